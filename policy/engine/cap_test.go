package engine

import (
	"slices"
	"testing"
	"time"
)

// TestCapCountsThisPlan: a job one preemption short of the eviction cap
// loses one allocation in a plan, not two: the plan's own preemption counts
// towards the cap. (The engine records planned preemptions only when some
// job is one short, so this is the case that must keep working.)
func TestCapCountsThisPlan(t *testing.T) {
	e := New(testPolicy(nil)) // cap: 2 per job per hour
	job := Job{Ref: JobRef{"ml", "bounced"}, Tier: "training", Priority: 40,
		Preemptions: []time.Time{t0.Add(-30 * time.Minute)}}
	s := &Snapshot{
		Nodes: []Node{{ID: "n1", NodePool: "default", GPUs: 1}, {ID: "n2", NodePool: "default", GPUs: 1}},
		Allocs: []Alloc{
			{ID: "a1", Job: job, Group: "main", NodeID: "n1", GPUIDs: []string{"g0"}, StartedAt: t0.Add(-time.Hour)},
			{ID: "a2", Job: job, Group: "main", NodeID: "n2", GPUIDs: []string{"g0"}, StartedAt: t0.Add(-time.Hour)},
		},
		Waiting: []Demand{
			{Job: Job{Ref: JobRef{"ml", "nb1"}, Tier: "interactive", Priority: 60}, Group: "main",
				GPUsPerAlloc: 1, Count: 1, Since: t0.Add(-time.Minute)},
			{Job: Job{Ref: JobRef{"ml", "nb2"}, Tier: "interactive", Priority: 60}, Group: "main",
				GPUsPerAlloc: 1, Count: 1, Since: t0},
		},
	}
	got := kinds(e.Plan(s, t0))
	if want := []string{"preempt ml/bounced", "hold ml/nb1", "hold ml/nb2"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
