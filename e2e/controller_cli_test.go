package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// steward runs the CLI against the cluster and returns its output.
func (c *cluster) steward(args ...string) (string, error) {
	cmd := exec.Command(testnomad.StewardBin(c.t), args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.Address)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var listenRE = regexp.MustCompile(`serving /metrics and /healthz: address=(\S+)`)

// TestOperatorCLIAndMetrics: what an operator sees — steward plan,
// steward status, pause and resume, /metrics and /healthz.
func TestOperatorCLIAndMetrics(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	ctl := c.startController("ctl", policy, "-listen", "127.0.0.1:0")

	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})

	// steward plan shows what the controller would do, changing nothing.
	ctl.Stop()
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	// It exits 2 when actions are pending, as `nomad job plan` does.
	testnomad.WaitFor(t, 30*time.Second, "steward plan proposes the preemption, exit 2", func() (bool, string) {
		out, err := c.steward("plan", "-policy", policy)
		var exit *exec.ExitError
		code := 0
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		return code == 2 && strings.Contains(out, "preempt") && strings.Contains(out, "yields 4 GPUs to ml/nb/work"),
			fmt.Sprintf("exit %d (%v): %s", code, err, out)
	})
	var plan struct {
		Actions []struct{ Kind, Job, Reason string } `json:"actions"`
	}
	out, _ := c.steward("plan", "-policy", policy, "-json")
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan.Actions) == 0 || plan.Actions[0].Job == "" {
		t.Errorf("steward plan -json: %v\n%s", err, out)
	}
	if n := c.running("ml", "train"); n != 1 {
		t.Fatalf("steward plan changed the cluster")
	}

	ctl = c.startController("ctl2", policy, "-listen", "127.0.0.1:0")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})

	// steward status: tenants, held jobs with reasons, decisions.
	var status string
	testnomad.WaitFor(t, 30*time.Second, "steward status shows the held job", func() (bool, string) {
		out, err := c.steward("status")
		status = out
		return err == nil && strings.Contains(out, "ml/train") && strings.Contains(out, "Held Jobs") &&
			strings.Contains(out, "preempted") && strings.Contains(out, "Tenants"), out
	})
	t.Logf("steward status:\n%s", status)

	// /metrics and /healthz.
	var addr string
	testnomad.WaitFor(t, 10*time.Second, "the metrics address in the log", func() (bool, string) {
		m := listenRE.FindStringSubmatch(ctl.Log())
		if m != nil {
			addr = m[1]
		}
		return m != nil, ""
	})
	metrics := get(t, "http://"+addr+"/metrics")
	for _, want := range []string{`steward_preemptions_total{reason="priority",tenant="ml",tier="training"} 1`,
		"steward_held_jobs 1", `steward_gpus_in_use{tenant="ml"} 4`, "steward_decision_latency_seconds_count", "steward_leader 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if h := get(t, "http://"+addr+"/healthz"); !strings.Contains(h, `"leader":true`) {
		t.Errorf("/healthz = %s", h)
	}

	// pause and resume, as a person would.
	if _, _, err := c.Client.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	if out, err := c.steward("pause", "-namespace", "ml", "train"); err != nil {
		t.Fatalf("steward pause: %v\n%s", err, out)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 0})
	rec := c.waitRecord(30*time.Second, "ml", "train", "steward_state", "paused")
	if !strings.Contains(rec["steward_reason"], "paused by") {
		t.Errorf("pause reason %q", rec["steward_reason"])
	}
	time.Sleep(3 * time.Second)
	if n := c.running("ml", "train"); n != 0 {
		t.Fatalf("a paused job came back by itself")
	}
	if out, err := c.steward("resume", "-namespace", "ml", "train"); err != nil {
		t.Fatalf("steward resume: %v\n%s", err, out)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})

	// steward status lists the operator's pause and resume among the
	// decisions, with the GPUs paused.
	testnomad.WaitFor(t, 30*time.Second, "pause and resume among the recent decisions", func() (bool, string) {
		out, err := c.steward("status")
		return err == nil && regexp.MustCompile(`pause\s+ml/train\s+4\s+paused by`).MatchString(out) &&
			regexp.MustCompile(`resume\s+ml/train\s+4\s+resumed by`).MatchString(out), out
	})
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestDryRun: with -dry-run the controller logs what it would do and
// changes nothing: no preemption, no variable written.
func TestDryRun(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	ctl := c.startController("ctl", writePolicy(t, fmt.Sprintf(faultPolicy, "0s")), "-dry-run")
	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	testnomad.WaitFor(t, 30*time.Second, "the dry run logs the preemption it would make", func() (bool, string) {
		return ctl.Contains("would preempt") && ctl.Contains("yields 4 GPUs to ml/nb/work"), ""
	})
	time.Sleep(3 * time.Second)
	if n := c.running("ml", "train"); n != 1 {
		t.Fatalf("a dry run preempted (train running %d)", n)
	}
	vars, _, err := c.Client.Variables().List(&api.QueryOptions{Namespace: "*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		t.Errorf("a dry run wrote the variable %s@%s", v.Path, v.Namespace)
	}
}
