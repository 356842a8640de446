package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestLifetimeBoundProtects (issue 31, item 2: every job completes) on the
// production-shaped cluster, tenants' work in containers: training fills
// the 4-GPU node, and notebooks of a higher tier take it twice, each
// purged once it ran, the training resuming after each. With
// max_per_job = 2 the second preemption says the job is now protected,
// in its reason and its record; the third notebook takes nothing, and
// waits, while the training runs on to its end. Its resume after the
// second preemption is the story the engine's gate once broke: one node
// never has two nodes' worth of GPUs free.
func TestLifetimeBoundProtects(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{extra: dockerOnly(t, testnomad.Options{})}, "ml")
	c.waitDriver(c.NodeID, "docker")
	ctl := c.startController("ctl", writePolicy(t, twoTiers+`
preemption {
  min_runtime          = "0s"
  grace                = "0s"
  max_per_job_per_hour = 0
  max_per_job          = 2
  promote {
    after_preemptions = 0
    after_wait        = "0s"
    boost             = 0
  }
}
`))
	c.dockerWork("train", "training", 4, 40)
	c.waitRunning(90*time.Second, map[string]int{"ml/train": 1})
	for i := range 2 {
		c.dockerWork("nb", "interactive", 4, 60)
		c.waitRunning(90*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
		if i == 1 {
			rec := c.waitRecord(30*time.Second, "ml", "train", "steward_reason", "protected until it ends")
			t.Logf("ml/train after its second preemption: %s", rec["steward_reason"])
			if !strings.Contains(rec["steward_reason"], "was preempted 2 times, the most over its life (preemption.max_per_job)") {
				t.Errorf("ml/train's reason %q does not give the count and the bound", rec["steward_reason"])
			}
		}
		if _, _, err := c.Client.Jobs().Deregister("nb", true, &api.WriteOptions{Namespace: "ml"}); err != nil {
			t.Fatal(err)
		}
		c.waitRunning(90*time.Second, map[string]int{"ml/train": 1})
	}
	// Protected: the third notebook takes nothing.
	c.dockerWork("nb", "interactive", 4, 60)
	rec := c.waitRecord(60*time.Second, "ml", "nb", "steward_reason", "nothing may be preempted")
	t.Logf("ml/nb waits: %s", rec["steward_reason"])
	time.Sleep(5 * time.Second)
	c.waitRunning(10*time.Second, map[string]int{"ml/train": 1, "ml/nb": 0})
	if n := strings.Count(ctl.Log(), "preempt: job=ml/train "); n != 2 {
		t.Errorf("ml/train was preempted %d times, want 2 (the bound)", n)
	}
}
