package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestPlanSnapshotReplay (issue 32, item 3): `steward plan -snapshot FILE`
// against a real agent writes what the plan was made from, and `steward
// plan -replay FILE` plans it again offline, with no Nomad to read (its
// address points nowhere): the same plan, byte for byte. With -policy the
// replay asks "what if": a policy under which training may not be
// preempted leaves the notebook waiting. The file is its owner's alone,
// and holds no webhook URL of the policy's.
func TestPlanSnapshotReplay(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 8, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s")+`
notify "ops" {
  url = "https://hooks.example.com/secret-path"
}
`)
	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.work("nb2", "ml", "interactive", 2, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1, "ml/nb2": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	snap := filepath.Join(t.TempDir(), "round.json")
	var live string
	testnomad.WaitFor(t, 30*time.Second, "steward plan proposes the preemption", func() (bool, string) {
		live, _ = c.steward("plan", "-policy", policy, "-snapshot", snap, "-json")
		return strings.Contains(live, "yields 4 GPUs to ml/nb/work"), live
	})
	info, err := os.Stat(snap)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("snapshot mode %v, want 0600", info.Mode().Perm())
	}
	if b, _ := os.ReadFile(snap); strings.Contains(string(b), "secret-path") {
		t.Errorf("the snapshot holds the notify block's URL")
	}

	offline := func(args ...string) (string, int) {
		return c.stewardWith([]string{"NOMAD_ADDR=http://127.0.0.1:1"}, append([]string{"plan", "-replay", snap, "-json"}, args...)...)
	}
	replayed, code := offline()
	if code != 2 || replayed != live {
		t.Errorf("replay: exit %d, want 2 and the live plan byte for byte\n got %s\nwant %s", code, replayed, live)
	}
	// Why train rather than nb2: the first criterion that tells them
	// apart, live and from the snapshot alike.
	const why = "ml/train is given up before ml/nb2 by criterion 3, priority (the lowest priority first): ml/train has priority 40; ml/nb2 has priority 60"
	if out, code := c.stewardWith([]string{"NOMAD_ADDR=" + c.Address}, "plan", "-policy", policy, "-explain", "ml/nb2", "-versus", "ml/train"); code != 0 || !strings.Contains(out, why) {
		t.Errorf("plan -explain: exit %d\n%s\nwant %q", code, out, why)
	}
	if out, code := offline("-explain", "ml/train", "-versus", "ml/nb2"); code != 0 || !strings.Contains(out, `"Criterion": 3`) {
		t.Errorf("plan -replay -explain -json: exit %d\n%s", code, out)
	}
	noPreempt := writePolicy(t, strings.Replace(fmt.Sprintf(faultPolicy, "0s"), "preemptible = true", "preemptible = false", -1))
	whatIf, _ := offline("-policy", noPreempt)
	if strings.Contains(whatIf, `"kind": "preempt"`) || !strings.Contains(whatIf, "ml/nb") {
		t.Errorf("replay with a policy that preempts nothing:\n%s", whatIf)
	}
}
