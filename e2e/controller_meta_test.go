package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

const metaPolicy = twoTiers + `
tenant "ml" {
  reserve = 0
}
preemption {
  min_runtime       = "0s"
  grace             = "3s"
  checkpoint_signal = "SIGUSR1"
}
`

// TestInvalidJobMetaRefused: a job whose meta names a tier the policy lacks
// ("infrence"), a gang value that is not true or false ("maybe") and a
// checkpoint signal that is no signal ("SIGFOO") is refused where each is
// read: it runs as the default tier, is no gang, and on preemption gets the
// policy's signal (which its raw_exec task traps), not SIGFOO (which
// raw_exec would turn into SIGINT, interrupting it without a checkpoint).
// Its record and `steward status` say what was wrong and what is used
// instead; the controller logs it once and counts it in a metric.
func TestInvalidJobMetaRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "ml")
	ctl := c.startController("ctl", writePolicy(t, metaPolicy), "-listen", "127.0.0.1:0")
	c.work("bad", "ml", "infrence", 2, 1, "priority", "40", "gang", "maybe", "checkpoint_signal", "SIGFOO")
	c.waitRunning(60*time.Second, map[string]int{"ml/bad": 1})
	rec := c.waitRecord(30*time.Second, "ml", "bad", "steward_warning", "SIGFOO")
	for _, want := range []string{
		`tier "infrence" is not defined (did you mean inference?): runs as training`,
		`steward.gang "maybe" is not true or false: not a gang`,
		`steward.checkpoint_signal "SIGFOO" is not a signal name`, `: uses SIGUSR1`,
	} {
		if want == `tier "infrence" is not defined (did you mean inference?): runs as training` {
			// This policy has no tier "inference": no suggestion.
			want = `tier "infrence" is not defined: runs as training`
		}
		if !strings.Contains(rec["steward_warning"], want) {
			t.Errorf("record's warning lacks %q: %q", want, rec["steward_warning"])
		}
	}
	if rec["steward_tier"] != "training" {
		t.Errorf("steward_tier = %q, want training", rec["steward_tier"])
	}
	testnomad.WaitFor(t, 30*time.Second, "steward status lists the job's warnings", func() (bool, string) {
		out, err := c.steward("status")
		return err == nil && strings.Contains(out, "Job Warnings") && strings.Contains(out, `ml/bad  steward.checkpoint_signal "SIGFOO"`), out
	})

	// Preempted for interactive work, it gets SIGUSR1 and checkpoints.
	victim := c.allocIDs("ml", "bad")[0]
	c.work("nb", "ml", "interactive", 2, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/bad": 0})
	if !ctl.Contains(`checkpoint signal sent: job=ml/bad signal=SIGUSR1`) {
		t.Errorf("the controller did not send SIGUSR1:\n%s", tail(ctl.Log(), 40))
	}
	alloc, _, err := c.Client.Allocations().Info(victim, &api.QueryOptions{Namespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := readTaskStdout(c.Agent, alloc, "work")
	if err != nil || !strings.Contains(out, "checkpoint requested: saving state") {
		t.Errorf("the task did not checkpoint (%v):\n%s", err, out)
	}

	// Logged once, however many rounds ran and however often Steward
	// scaled the job (each scale is a new job version); counted.
	if n := strings.Count(ctl.Log(), "job meta refused"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, tail(ctl.Log(), 40))
	}
	addr := checkAddrRE.FindStringSubmatch(ctl.Log())
	if addr == nil {
		t.Fatalf("no listen address in the log")
	}
	metrics := get(t, "http://"+addr[1]+"/metrics")
	for _, key := range []string{"steward.tier", "steward.gang", "steward.checkpoint_signal"} {
		if want := fmt.Sprintf(`steward_job_meta_refused_total{key=%q} 1`, key); !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
