package engine

import (
	"testing"
	"time"
)

// TestTierPriority: a job's Nomad priority follows its tier's; only a job
// Steward promoted may sit above it, and by no more than the boost.
func TestTierPriority(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		tier     string
		priority int
		promoted bool
		want     int // new priority; 0: no action
		reason   string
	}{
		{"Nomad's default priority is corrected to the tier's", "training", 50, false, 40,
			"tier training runs at priority 40; the job had priority 50"},
		{"at the tier's priority: nothing to do", "training", 40, false, 0, ""},
		{"promoted within the boost: kept", "training", 50, true, 0, ""},
		{"promoted beyond the boost: corrected", "training", 70, true, 40,
			"tier training runs at priority 40; the job had priority 70"},
		{"below the tier: corrected", "interactive", 30, false, 60,
			"tier interactive runs at priority 60; the job had priority 30"},
		{"unknown tier gets the default tier's", "gold", 50, false, 40,
			"tier training runs at priority 40; the job had priority 50"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(testPolicy(nil))
			job := Job{Ref: JobRef{Namespace: "ml", ID: "j"}, Tier: tc.tier, Priority: tc.priority, Promoted: tc.promoted}
			s := &Snapshot{
				Nodes:  []Node{{ID: "n1", NodePool: "default", GPUs: 4}},
				Allocs: []Alloc{{ID: "a1", Job: job, Group: "main", NodeID: "n1", GPUIDs: []string{"g0"}, StartedAt: now.Add(-time.Hour)}},
			}
			plan := e.Plan(s, now)
			var got []Action
			for _, a := range plan.Actions {
				if a.Kind == SetPriority {
					got = append(got, a)
				}
			}
			if tc.want == 0 {
				if len(got) != 0 {
					t.Fatalf("want no set-priority, got %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Priority != tc.want || got[0].Reason.Rule != RuleTier || got[0].Reason.Message != tc.reason {
				t.Fatalf("want one set-priority to %d (%q), got %v", tc.want, tc.reason, got)
			}
		})
	}
}
