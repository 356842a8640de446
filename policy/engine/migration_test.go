package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// A victim that fits at once in free GPUs elsewhere moves there instead of
// waiting in line; one that does not is held.
func TestMigration(t *testing.T) {
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["a"] = tenant("a", 4, policy.Unlimited)
		p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
	})
	victim := Alloc{ID: "v", Job: Job{Ref: JobRef{"b", "train"}, Tier: "training", Priority: 40}, Group: "main",
		NodeID: "n1", GPUIDs: []string{"n1-g0"}, StartedAt: t0.Add(-2 * time.Hour)}
	bene := Demand{Job: Job{Ref: JobRef{"a", "big"}, Tier: "training", Priority: 40}, Group: "main", GPUsPerAlloc: 2, Count: 1,
		Since: t0.Add(-time.Minute), Held: true}
	tests := []struct {
		name   string
		nodes  []Node
		others []Alloc
		moveTo string
	}{
		{"free GPUs elsewhere: it moves", []Node{{ID: "n1", GPUs: 2}, {ID: "n2", GPUs: 1}}, nil, "n2"},
		{"nothing free elsewhere: it is held", []Node{{ID: "n1", GPUs: 2}, {ID: "n2", GPUs: 1}},
			[]Alloc{{ID: "o", Job: Job{Ref: JobRef{"a", "other"}, Tier: "training", Priority: 40}, Group: "main",
				NodeID: "n2", GPUIDs: []string{"n2-g0"}, StartedAt: t0.Add(-time.Hour)}}, ""},
		{"free GPUs only in another node pool: it is held", []Node{{ID: "n1", GPUs: 2}, {ID: "n2", NodePool: "gpu-b", GPUs: 1}}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := Snapshot{Nodes: tc.nodes, Allocs: append([]Alloc{victim}, tc.others...), Waiting: []Demand{bene}}
			plan := New(pol).Plan(&snap, t0)
			var pre *Action
			for i, a := range plan.Actions {
				if a.Kind == Preempt {
					pre = &plan.Actions[i]
				}
			}
			if pre == nil {
				t.Fatalf("no preemption: %v", plan.Actions)
			}
			if pre.MoveTo != tc.moveTo {
				t.Errorf("move to %q, want %q: %s", pre.MoveTo, tc.moveTo, pre)
			}
			if moves := strings.Contains(pre.Reason.Message, "it moves to node "+tc.moveTo+", where 1 GPU is free"); moves != (tc.moveTo != "") {
				t.Errorf("reason %q: says it moves %v, want %v", pre.Reason.Message, moves, tc.moveTo != "")
			}
		})
	}
}
