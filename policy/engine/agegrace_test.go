package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// A victim gets no longer a grace than it has run: work Nomad placed a
// moment ago has nothing to checkpoint, and what it yields to should not
// wait for it.
func TestGraceCappedByAge(t *testing.T) {
	pol := testPolicy(func(p *policy.Policy) { p.Preemption.MinRuntime = 0 })
	tests := []struct {
		name      string
		age       time.Duration
		grace     time.Duration
		signal    string
		reasonHas string
	}{
		{name: "placed a moment ago: stopped at once", age: 400 * time.Millisecond, grace: 0, signal: "",
			reasonHas: "started under a second ago: stopped at once"},
		{name: "ran 90s: grace 90s", age: 90 * time.Second, grace: 90 * time.Second, signal: "SIGUSR1",
			reasonHas: "started at most 1m30s ago: grace 1m30s"},
		{name: "ran an hour: the whole grace", age: time.Hour, grace: 2 * time.Minute, signal: "SIGUSR1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := Snapshot{
				Nodes: []Node{{ID: "n1", GPUs: 1}},
				Allocs: []Alloc{{ID: "v", Job: Job{Ref: JobRef{"a", "train"}, Tier: "training", Priority: 40}, Group: "main",
					NodeID: "n1", GPUIDs: []string{"g0"}, StartedAt: t0.Add(-tc.age)}},
				Waiting: []Demand{{Job: Job{Ref: JobRef{"a", "nb"}, Tier: "interactive", Priority: 60}, Group: "main",
					GPUsPerAlloc: 1, Count: 1, Since: t0}},
			}
			plan := New(pol).Plan(&snap, t0)
			var got *Action
			for i, a := range plan.Actions {
				if a.Kind == Preempt {
					got = &plan.Actions[i]
				}
			}
			if got == nil {
				t.Fatalf("no preemption: %v", plan.Actions)
			}
			if got.Grace != tc.grace || got.Signal != tc.signal {
				t.Errorf("grace %s signal %q, want %s %q", got.Grace, got.Signal, tc.grace, tc.signal)
			}
			if tc.reasonHas != "" && !strings.Contains(got.Reason.Message, tc.reasonHas) {
				t.Errorf("reason %q lacks %q", got.Reason.Message, tc.reasonHas)
			} else if tc.reasonHas == "" && strings.Contains(got.Reason.Message, "started") {
				t.Errorf("reason %q speaks of a cut grace", got.Reason.Message)
			}
		})
	}
}
