package e2e

import (
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestPurgedJobFreesGPUs: `nomad job stop -purge` deletes the job's
// allocations in the same transaction, and Nomad's event stream sends no
// event for a deleted allocation, only the job's deregistration. The
// controller's cache kept them until its next full read (every 30 s by
// default): in between, the purged notebook's 8 GPUs were held in every
// plan, and the next notebook was held ("none free") instead of taking
// the GPUs training had got back. Each round here purges a notebook and
// submits the next while training runs again.
func TestPurgedJobFreesGPUs(t *testing.T) {
	c := startCluster(t, 8, "ml")
	ctl := c.startController("ctl", writePolicy(t, benchPolicy))
	c.work("train", "ml", "training", 8, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})

	for i := 0; i < 3; i++ {
		c.work("nb", "ml", "interactive", 8, 1, "priority", "60")
		c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
		if _, _, err := c.Client.Jobs().Deregister("nb", true, &api.WriteOptions{Namespace: "ml"}); err != nil {
			t.Fatal(err)
		}
		c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	}
	// The purged notebook's GPUs are never counted as held: no notebook
	// is held for want of GPUs, and no allocation is skipped as sitting
	// on GPUs another holds.
	log := ctl.Log()
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`hold: job=ml/nb .*`),
		regexp.MustCompile(`engine skipped snapshot item.*already held.*`),
	} {
		if m := re.FindString(log); m != "" {
			t.Errorf("a purged job's allocations were still counted: %s", m)
		}
	}
	preempts := regexp.MustCompile(`preempt: job=ml/train `).FindAllString(log, -1)
	if len(preempts) != 3 {
		t.Errorf("%d preemptions of ml/train for 3 notebooks, want 3", len(preempts))
	}
}
