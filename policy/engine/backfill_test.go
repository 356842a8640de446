package engine

import (
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestBackfillGangAcrossPools: a gang that backfills a policy pool from a
// node pool the policy does not name is taken back with the policy pool's
// grace (this once indexed past the pools the policy names and panicked).
func TestBackfillGangAcrossPools(t *testing.T) {
	e := New(testPolicy(func(p *policy.Policy) {
		p.Pools["serving"] = &policy.Pool{Name: "serving", NodePool: "serving", Owners: []string{"inference"}, Grace: 30 * time.Second}
		p.Tenants["prod"] = tenant("prod", 4, policy.Unlimited) // inference runs within its reserve
	}))
	gang := Job{Ref: JobRef{"ml", "gang"}, Tier: "training", Priority: 40, Gang: true}
	s := &Snapshot{
		Nodes: []Node{{ID: "n1", NodePool: "batch", GPUs: 4}, {ID: "n2", NodePool: "serving", GPUs: 4}},
		Allocs: []Alloc{
			{ID: "a1", Job: gang, Group: "main", NodeID: "n1", GPUIDs: []string{"g0", "g1", "g2", "g3"}, StartedAt: t0.Add(-time.Hour)},
			{ID: "a2", Job: gang, Group: "main", NodeID: "n2", GPUIDs: []string{"g0", "g1", "g2", "g3"}, StartedAt: t0.Add(-time.Hour)},
		},
		Waiting: []Demand{{Job: Job{Ref: JobRef{"prod", "serve"}, Tier: "inference", Priority: 90}, Group: "main",
			GPUsPerAlloc: 4, Count: 1, Since: t0, NodePool: "serving"}},
	}
	plan := e.Plan(s, t0)
	var pre *Action
	for i := range plan.Actions {
		if plan.Actions[i].Kind == Preempt {
			pre = &plan.Actions[i]
		}
	}
	if pre == nil || pre.Reason.Rule != RuleBackfill || pre.Grace != 30*time.Second || len(pre.Allocs) != 2 {
		t.Fatalf("want the whole gang taken back as backfill with the serving pool's 30s grace; got %v", plan.Actions)
	}
}
