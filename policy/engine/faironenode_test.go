package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestFairReclaimOneNode: tenant a, below its fair share, waits for one
// 4-GPU allocation; tenant b, far above its fair share, runs 2-GPU jobs on
// two 4-GPU nodes (2 GPUs free on each, or none) and fills a third. No node
// has room in free GPUs alone; taking b's work on one node makes room, and
// a then borrows 4 GPUs against b's 6 or more.
//
// Fair-share reclaim's final-share test weighs a's whole ask (a gang's
// every allocation, and what a holds and has set aside), not one
// allocation. A 2×4 gang of a ahead of the 4-GPU job places its first
// allocation, fails its second (a would hold 8 against b's 8) and is
// undone: the plan's memory of failures must not answer the 4-GPU job with
// that failure (it did, keyed by the allocation's size alone).
func TestFairReclaimOneNode(t *testing.T) {
	const hour = 3600.0
	cases := []struct {
		name string
		gang bool // a 2×4 gang of a waits ahead of the 4-GPU job
		full bool // b runs 2-GPU jobs on the free GPUs too
	}{
		{name: "the 4-GPU job alone"},
		{name: "nothing free: two of b's jobs on one node", full: true},
		{name: "nothing free, behind a gang whose second allocation fair share may not serve", full: true, gang: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := engine.New(fairTwoTenants(1.5, nil))
			now := t0.Add(2 * time.Hour)
			s := &engine.Snapshot{Nodes: []engine.Node{{ID: "n0", NodePool: "default", GPUs: 4}, {ID: "n1", NodePool: "default", GPUs: 4},
				{ID: "n2", NodePool: "default", GPUs: 4}}, Usage: map[string]float64{"b": 40 * hour}}
			add := func(id, node string, gpus ...string) {
				s.Allocs = append(s.Allocs, engine.Alloc{ID: id, Job: engine.Job{Ref: engine.JobRef{"b", id}, Tier: "training", Priority: 40},
					Group: "main", NodeID: node, GPUIDs: gpus, StartedAt: now.Add(-time.Hour)})
			}
			add("b0", "n0", "g0", "g1")
			add("b1", "n1", "g0", "g1")
			add("b2", "n2", "g0", "g1", "g2", "g3")
			if tc.full {
				add("b3", "n0", "g2", "g3")
				add("b4", "n1", "g2", "g3")
			}
			if tc.gang {
				s.Waiting = append(s.Waiting, engine.Demand{Job: engine.Job{Ref: engine.JobRef{"a", "gang"}, Tier: "training", Priority: 40, Gang: true},
					Group: "main", GPUsPerAlloc: 4, Count: 2, Since: now.Add(-10 * time.Minute), Held: true})
			}
			s.Waiting = append(s.Waiting, engine.Demand{Job: engine.Job{Ref: engine.JobRef{"a", "w"}, Tier: "training", Priority: 40},
				Group: "main", GPUsPerAlloc: 4, Count: 1, Since: now.Add(-time.Minute), Held: true})
			plan := e.Plan(s, now)
			var got []string
			for _, a := range plan.Actions {
				if a.Kind == engine.Preempt {
					got = append(got, a.Job.String()+" "+string(a.Reason.Rule)+" for "+a.For.String())
				}
			}
			ok := len(got) > 0
			for _, g := range got {
				ok = ok && strings.HasPrefix(g, "b/") && strings.HasSuffix(g, " fair_share for a/w")
			}
			if !ok {
				t.Fatalf("preempted %q; want b's work by fair share for a/w; waiting %v", got, plan.Waiting)
			}
		})
	}
}
