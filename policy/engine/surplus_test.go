package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// A victim may free more GPUs than its beneficiary needs (4 for a 1-GPU
// job), and a plan may count the rest for a second beneficiary beside that
// one's own victim (an Earmark). The next plan, which sets all of the
// draining allocation's GPUs aside for the job it names, must still keep
// the rest for the second: otherwise work served after the first takes
// them, the second finds too few, and its victim stopped for nothing
// (Helios pressured, seed 5: 8 of 15 wasted preemptions). Work of a
// higher tier than the second still takes them, as before.
func TestSurplusOfAVictimKeptForTheSecondBeneficiary(t *testing.T) {
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["a"] = tenant("a", 0, policy.Unlimited)
		p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
		p.Tenants["c"] = tenant("c", 8, policy.Unlimited)
	})
	small, wide := engine.JobRef{"a", "small"}, engine.JobRef{"a", "wide"}
	alloc := func(ns, id, tier string, gpus int, forJob *engine.JobRef) engine.Alloc {
		ids := make([]string, gpus)
		for i := range ids {
			ids[i] = id + "-gpu" + string(rune('0'+i))
		}
		return engine.Alloc{ID: id, Job: engine.Job{Ref: engine.JobRef{ns, id}, Priority: pol.Tiers[tier].Priority, Tier: tier},
			Group: "main", NodeID: "n1", GPUIDs: ids, StartedAt: t0.Add(-2 * time.Hour), Draining: forJob != nil, For: forJob, ForGroup: "main"}
	}
	waiting := func(id, tier string, gpus int, since time.Duration) engine.Demand {
		return engine.Demand{Job: engine.Job{Ref: engine.JobRef{"a", id}, Priority: pol.Tiers[tier].Priority, Tier: tier},
			Group: "main", GPUsPerAlloc: gpus, Count: 1, Since: t0.Add(-since), Held: true}
	}
	tests := []struct {
		name     string
		earmarks []engine.Earmark
		intruder string // its tier
		resumed  string // must be resumed
		notOn    string // must not be resumed
	}{
		{
			name:     "the surplus promised to the second beneficiary stays its own against work of its tier",
			earmarks: []engine.Earmark{{NodeID: "n1", GPUs: 3, For: wide, ForGroup: "main"}},
			intruder: "training", resumed: "a/wide", notOn: "a/intruder",
		},
		{
			// Interactive work ranks above training: it waited 25 min
			// at p95 behind such promises (Helios seed 2, issue 31).
			name:     "work of a higher tier still takes the surplus promised to the second",
			earmarks: []engine.Earmark{{NodeID: "n1", GPUs: 3, For: wide, ForGroup: "main"}},
			intruder: "interactive", resumed: "a/intruder", notOn: "a/wide",
		},
		{
			name:     "without that promise the surplus is free to the next in order",
			intruder: "interactive", resumed: "a/intruder", notOn: "a/wide",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := engine.Snapshot{
				Nodes: []engine.Node{{ID: "n1", GPUs: 8}},
				Allocs: []engine.Alloc{
					alloc("b", "big", "training", 4, &small), // drains for small, which needs 1
					alloc("b", "v2", "training", 1, &wide),   // drains for wide, which needs 4
					alloc("c", "rest", "build", 3, nil),      // stays
				},
				Earmarks: tt.earmarks,
				Waiting: []engine.Demand{
					waiting("small", "interactive", 1, 2*time.Hour),
					waiting("intruder", tt.intruder, 2, time.Hour),
					waiting("wide", "training", 4, 3*time.Hour),
				},
			}
			plan := engine.New(pol).Plan(&snap, t0)
			resumed := map[string]bool{}
			var lines []string
			for _, a := range plan.Actions {
				lines = append(lines, a.String())
				if a.Kind == engine.Resume {
					resumed[a.Job.String()] = true
				}
			}
			if !resumed[tt.resumed] || resumed[tt.notOn] {
				t.Errorf("want %s resumed and %s not; plan:\n%s", tt.resumed, tt.notOn, strings.Join(lines, "\n"))
			}
		})
	}
}
