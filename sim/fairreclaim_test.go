package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestFairShareReclaimSim: team a fills a 2-node cluster with long 1-GPU
// jobs; six hours later team b submits as many. Ordering by decayed usage
// alone leaves b waiting for a's jobs to end (days); with
// fair_share_reclaim_above b takes GPUs back by fair share until the two
// hold alike: three of the four days of contention are fair (the last,
// as the jobs end unevenly, is not). Neither wastes a preemption or
// breaches the cap.
func TestFairShareReclaimSim(t *testing.T) {
	src := `
tier "training" {
  priority = 40
}
tenant "a" {}
tenant "b" {}
preemption {
  fair_share_half_life = "24h"
  fair_share_reclaim_above = ABOVE
}
`
	var jobs []Job
	for i := range 16 {
		jobs = append(jobs, Job{ID: "a" + itoa(i), Line: i + 2, User: "a", Tenant: "a", Tier: "training", GPUs: 1, Allocs: 1,
			Submit: time.Duration(i) * time.Second, RunTime: 72 * time.Hour, IdleAfter: NeverIdle})
	}
	for i := range 16 {
		jobs = append(jobs, Job{ID: "b" + itoa(i), Line: i + 18, User: "b", Tenant: "b", Tier: "training", GPUs: 1, Allocs: 1,
			Submit: 6*time.Hour + time.Duration(i)*time.Second, RunTime: 72 * time.Hour, IdleAfter: NeverIdle})
	}
	cases := []struct {
		name      string
		above     string
		fairShare int // fair_share preemptions
		days      int // fair_share_windows: days with contention
		fairDays  int // fair_share_fair_windows, of days
	}{
		{name: "ordering alone", above: "0", fairShare: 0, days: 4, fairDays: 0},
		// Every contested day fair: a's jobs promoted for waiting no longer
		// take b's work while a runs as much (ownswap.go); before, 3 of 4.
		{name: "with fair-share reclaim", above: "1.5", fairShare: 8, days: 6, fairDays: 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol, diags := policy.ParseBytes("fair.hcl", []byte(strings.ReplaceAll(src, "ABOVE", tc.above)))
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			r, err := Simulate(jobs, Config{Policy: pol, Nodes: 2, GPUsPerNode: 8, CheckpointEvery: DefaultCheckpointEvery,
				CheckpointCost: DefaultCheckpointCost, PlanInterval: DefaultPlanInterval}, Steward)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.PreemptionsByRule["fair_share"]; got != tc.fairShare {
				t.Errorf("fair_share preemptions %d, want %d (by rule %v)", got, tc.fairShare, r.PreemptionsByRule)
			}
			if fs := r.FairShare; fs.Windows != tc.days || fs.FairWindows != tc.fairDays {
				t.Errorf("%d of %d days fair (Jain %.3f, worst day %.3f), want %d of %d", fs.FairWindows, fs.Windows, fs.Jain, fs.JainMin, tc.fairDays, tc.days)
			}
			if r.WastedPreemptions != 0 || r.CapBreaches != 0 {
				t.Errorf("wasted preemptions %d, cap breaches %d; want none", r.WastedPreemptions, r.CapBreaches)
			}
		})
	}
}
