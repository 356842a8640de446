package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// stewardAs runs the CLI with a token (NOMAD_TOKEN) and returns its
// output (stdout and stderr) and exit status.
func (c *cluster) stewardAs(token string, args ...string) (string, int) {
	c.t.Helper()
	return c.stewardWith(c.nomadEnv(token), args...)
}

// stewardWith runs the CLI with env added to this process's environment
// and returns its output (stdout and stderr) and exit status.
func (c *cluster) stewardWith(env []string, args ...string) (string, int) {
	c.t.Helper()
	cmd := exec.Command(testnomad.StewardBin(c.t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	c.t.Fatalf("run steward %v: %v", args, err)
	return "", -1
}

// TestTenantCLISeesItsNamespaceOnly: with ACLs on, research's job is
// preempted for ml's. A research token (the shipped steward-user policy
// and the team's own) reads research's view with `steward status` and
// `steward queue`: research's jobs, research's figures, nothing of ml's;
// the whole cluster's status and ml's view are forbidden to it; its view
// and its job's record name ml's job only as another tenant's. It finds
// its job by prefix (`steward status tr`), and with only the shipped user
// policy, which may not list jobs, by its full ID; an ambiguous prefix
// lists the matches. The operator's token
// reads the whole cluster. -json output decodes into the controller's
// types.
func TestTenantCLISeesItsNamespaceOnly(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{}, "research", "ml")
	research := c.aclToken("team-research", fmt.Sprintf(teamRules, "research"), userACL(t, "research"))
	researchUser := c.aclToken("user-research", userACL(t, "research"))
	ml := c.aclToken("team-ml", fmt.Sprintf(teamRules, "ml"), userACL(t, "ml"))
	ctl := c.startController("ctl", writePolicy(t, tenantPolicy), "-listen", "127.0.0.1:0")

	c.work("train", "research", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"research/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "research/train": 0})
	c.waitRecord(30*time.Second, "research", "train", "steward_state", "preempted")

	// research's view: its held job and its decision, no word of ml's.
	var view controller.Status
	testnomad.WaitFor(t, 30*time.Second, "research's view shows its held job", func() (bool, string) {
		out, code := c.stewardAs(research, "status", "-namespace", "research", "-json")
		view = controller.Status{}
		if code != 0 || json.Unmarshal([]byte(out), &view) != nil {
			return false, out
		}
		return len(view.Held) == 1 && view.Held[0].Job == "research/train", out
	})
	raw, _ := json.Marshal(view)
	if strings.Contains(string(raw), `"ml/`) || len(view.Tenants) != 1 || view.Tenants[0].Tenant != "research" {
		t.Errorf("research's view shows another tenant's jobs or figures:\n%s", raw)
	}
	for _, d := range view.Decisions {
		if !strings.HasPrefix(d.Job, "research/") {
			t.Errorf("research's view has ml's decision %+v", d)
		}
	}
	if view.CheckAddress != "" {
		t.Errorf("research's view names the check address %q (a team may write its own namespace's variables)", view.CheckAddress)
	}
	// Issue 29: reasons shown to research name ml's job only as another
	// tenant's job, in its view and in its job's record.
	if raw := string(raw); strings.Contains(raw, "ml/nb") || !strings.Contains(raw, "another tenant's job") {
		t.Errorf("research's view names ml's job, or not as another tenant's job:\n%s", raw)
	}
	if rec := c.record("research", "train"); strings.Contains(rec["steward_reason"], "ml/nb") ||
		!strings.Contains(rec["steward_reason"], "another tenant's job") {
		t.Errorf("research/train's record names ml's job: steward_reason %q", rec["steward_reason"])
	}
	out, code := c.stewardAs(research, "status", "-namespace", "research")
	if code != 0 || !strings.Contains(out, "research/train") || regexp.MustCompile(`(?m)^ml\b|\sml\s`).MatchString(out) {
		t.Errorf("steward status -namespace research (exit %d):\n%s", code, out)
	}
	t.Logf("steward status -namespace research:\n%s", out)

	// The queue: research's entries only, as JSON and as a table.
	out, code = c.stewardAs(research, "queue", "-namespace", "research", "-json")
	var queue []controller.QueueEntry
	if err := json.Unmarshal([]byte(out), &queue); code != 0 || err != nil {
		t.Fatalf("steward queue -json (exit %d, %v):\n%s", code, err, out)
	}
	for _, q := range queue {
		if q.Namespace != "research" {
			t.Errorf("research's queue lists %s", q.Job)
		}
	}
	if out, code = c.stewardAs(research, "queue", "-namespace", "research"); code != 0 || strings.Contains(out, "ml/") {
		t.Errorf("steward queue -namespace research (exit %d):\n%s", code, out)
	}
	t.Logf("steward queue -namespace research:\n%s", out)

	// Forbidden: the whole cluster's status, and ml's view.
	for _, args := range [][]string{{"status"}, {"queue"}, {"status", "-namespace", "ml"}, {"queue", "-namespace", "ml"}} {
		out, code := c.stewardAs(research, args...)
		if code != 1 || !strings.Contains(out, "403") {
			t.Errorf("steward %v with research's token: exit %d, want 1 with a 403:\n%s", args, code, out)
		}
	}
	if out, _ := c.stewardAs(research, "status"); !strings.Contains(out, "give -namespace") {
		t.Errorf("the refusal does not say to give -namespace:\n%s", out)
	}

	// One job, by prefix with the team's token, by full ID with only the
	// shipped user policy.
	out, code = c.stewardAs(research, "status", "-namespace", "research", "tr")
	if code != 0 || !strings.Contains(out, "ID") || !strings.Contains(out, "train") || !strings.Contains(out, "preempted") {
		t.Errorf("steward status -namespace research tr (exit %d):\n%s", code, out)
	}
	t.Logf("steward status -namespace research tr:\n%s", out)
	out, code = c.stewardAs(researchUser, "status", "-namespace", "research", "-json", "train")
	var js struct {
		Job    string            `json:"job"`
		Record map[string]string `json:"record"`
	}
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || js.Job != "research/train" || js.Record["steward_state"] != "preempted" {
		t.Errorf("steward status -json train with the user policy only (exit %d, %v):\n%s", code, err, out)
	}
	if out, code = c.stewardAs(research, "status", "-namespace", "research", "nb"); code != 1 {
		t.Errorf("research found ml's job nb in its namespace (exit %d):\n%s", code, out)
	}

	// An ambiguous prefix lists the matches and exits 1, for status and
	// pause alike (the jobs wait: every GPU is taken).
	c.work("sweep-a", "research", "training", 1, 1, "priority", "40")
	c.work("sweep-b", "research", "training", 1, 1, "priority", "40")
	for _, args := range [][]string{{"status", "-namespace", "research", "sweep"}, {"pause", "-namespace", "research", "sw"}} {
		out, code := c.stewardAs(research, args...)
		if code != 1 || !strings.Contains(out, "matched multiple jobs") || !strings.Contains(out, "sweep-a") || !strings.Contains(out, "sweep-b") {
			t.Errorf("steward %v (exit %d), want 1 and the matches:\n%s", args, code, out)
		}
	}

	// ml's view: nothing of research's.
	out, code = c.stewardAs(ml, "status", "-namespace", "ml", "-json")
	if code != 0 || strings.Contains(out, "research/") {
		t.Errorf("ml's view (exit %d):\n%s", code, out)
	}

	// The operator reads the whole cluster. The sweeps are held too once
	// the controller's next status is published, which may come before or
	// after this read: train must be there, and nothing but research's jobs.
	out, code = c.stewardAs(prodMgmtToken, "status", "-t", "{{range .Held}}{{.Job}} {{end}}")
	held := strings.Fields(out)
	if code != 0 || !slices.Contains(held, "research/train") {
		t.Errorf("the operator's steward status -t (exit %d), want research/train held: %q", code, out)
	}
	for _, j := range held {
		if !slices.Contains([]string{"research/train", "research/sweep-a", "research/sweep-b"}, j) {
			t.Errorf("the operator's steward status -t lists %s, not one of the jobs held: %q", j, out)
		}
	}
	if strings.Contains(ctl.Log(), "Permission denied") {
		t.Errorf("the shipped controller policy lacks a capability for the views:\n%s", tail(ctl.Log(), 30))
	}
}
