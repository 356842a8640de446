package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// promotionPolicy: batch (45) and training (40) lie within a promotion's
// boost (10) of each other; both are promoted after waiting 15 seconds.
// No eviction cap, so that nothing but the rule stops a loop.
const promotionPolicy = `
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "batch" {
  priority    = 45
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
}
preemption {
  min_runtime          = "0s"
  grace                = "0s"
  max_per_job_per_hour = 0
  promote {
    after_preemptions = 0
    after_wait        = "15s"
    boost             = 10
  }
}

# These tests' namespaces have no tenant blocks: they may use every tier.
defaults {
  unnamed_tiers = ["interactive", "batch", "training"]
}
`

// preemptLine is a preemption in the controller's log: its victim and
// the work it frees GPUs for.
var preemptLine = regexp.MustCompile(`preempt: job=(\S+) .*?(?:yields \d+ GPUs? to|reclaiming \d+ for) ([^/\s]+/[^/\s]+)/`)

// TestPromotedJobsNeverPreemptEachOther (issue 28): training t1 (40) and
// batch b1 (45) wait behind an interactive job on the one GPU. When it
// frees, b1, of the higher tier, is resumed; t1, waiting longer, is then
// promoted (to 50). Before, t1 took b1's GPU (50 > 45), b1 was promoted
// in its turn (to 55) and took it back (55 > 50), and so on. A promotion
// now outranks only work of its own tier or below: t1 waits, and says
// why. No two jobs may preempt each other in turn; played on an idle
// machine and on a loaded one.
func TestPromotedJobsNeverPreemptEachOther(t *testing.T) {
	for _, load := range []int{0, 2} {
		name := "idle machine"
		if load > 0 {
			name = "loaded machine"
		}
		t.Run(name, func(t *testing.T) {
			if load > 0 {
				loadMachine(t, load)
			}
			playPromotedPair(t)
		})
	}
}

func playPromotedPair(t *testing.T) {
	c := startCluster(t, 1, "ml")
	ctl := c.startController("ctl", writePolicy(t, promotionPolicy))
	c.work("i1", "ml", "interactive", 1, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/i1": 1})
	// t1 waits first; b1 comes later and, of the higher tier, is resumed
	// first when the GPU frees, before it has waited long enough to be
	// promoted. t1, promoted then, outranked it by the numbers (50 > 45).
	c.work("t1", "ml", "training", 1, 1, "priority", "40")
	c.waitRecord(60*time.Second, "ml", "t1", "steward_state", "held")
	c.work("b1", "ml", "batch", 1, 1, "priority", "45")
	c.waitRecord(60*time.Second, "ml", "b1", "steward_state", "held")
	if _, _, err := c.Client.Jobs().Deregister("i1", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/b1": 1})
	c.waitRecord(60*time.Second, "ml", "t1", "steward_priority", "50")
	// Long enough to see the loop: two turns take two promotions for
	// waiting (after_wait 15 s).
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		if turns := preemptTurns(ctl.Log()); turns != "" {
			t.Fatalf("promoted jobs preempt each other in turn:\n%s\nrecords: t1 %v\nb1 %v", turns,
				c.record("ml", "t1"), c.record("ml", "b1"))
		}
	}
	if got := preemptions(ctl.Log()); len(got) > 0 {
		t.Errorf("preempted: %q; want none: b1 runs, and promoted t1 may not take batch's GPU", got)
	}
	if n := c.running("ml", "b1"); n != 1 {
		t.Errorf("b1 runs %d allocations, want 1", n)
	}
	if rec := c.record("ml", "t1"); rec["steward_priority"] != "50" || rec["steward_held"] == "" {
		t.Errorf("t1: %v; want it held, promoted to 50", rec)
	}
}

// preemptions lists "victim for beneficiary" per preemption in a log.
func preemptions(log string) []string {
	var out []string
	for _, m := range preemptLine.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1]+" for "+m[2])
	}
	return out
}

// preemptTurns returns the preemptions of a log, one a line, if two jobs
// preempted each other in turn in it (A for B, then B for A); else "".
func preemptTurns(log string) string {
	seen := map[[2]string]bool{}
	all := preemptions(log)
	for _, m := range preemptLine.FindAllStringSubmatch(log, -1) {
		if seen[[2]string{m[2], m[1]}] {
			return strings.Join(all, "\n")
		}
		seen[[2]string{m[1], m[2]}] = true
	}
	return ""
}
