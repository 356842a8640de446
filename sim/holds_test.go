package sim

import (
	"maps"
	"math"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestHoldTimes follows one high-priority job's wait plan by plan: the
// time each rule held it, and its delay net of its own tenant's limit.
func TestHoldTimes(t *testing.T) {
	ref := engine.JobRef{Namespace: "a", ID: "I1"}
	waits := func(rule engine.Rule) *engine.Plan {
		return &engine.Plan{Waiting: []engine.Waiting{{Job: ref, Group: "main", GPUs: 8, Held: true, Reason: engine.Reason{Rule: rule}}}}
	}
	act := func(a engine.Action) *engine.Plan {
		a.Job = ref
		return &engine.Plan{Actions: []engine.Action{a}}
	}
	type step struct {
		at   time.Duration
		plan *engine.Plan
	}
	tests := []struct {
		name  string
		steps []step
		start time.Duration      // of its first start; it was submitted at 0
		net   float64            // minutes
		long  map[string]float64 // hours by rule, of a wait over 30 minutes
		all   map[string]float64 // hours by rule
	}{
		{
			name:  "held by its limit for 10 minutes, then 2 for capacity: net 2",
			steps: []step{{0, waits(engine.RuleLimit)}, {10 * time.Minute, waits(engine.RuleCapacity)}},
			start: 12 * time.Minute, net: 2,
			all: map[string]float64{"limit": 10.0 / 60, "capacity": 2.0 / 60},
		},
		{
			name: "a limit hold between two capacity holds is taken off alone",
			steps: []step{{0, waits(engine.RuleCapacity)}, {5 * time.Minute, waits(engine.RuleLimit)},
				{8 * time.Minute, waits(engine.RuleLimit)}, {11 * time.Minute, waits(engine.RuleCapacity)}},
			start: 15 * time.Minute, net: 9, // 6 of its 15 minutes were its limit's
		},
		{
			name:  "never held: its whole wait is Nomad's queue",
			start: 40 * time.Minute, net: 40,
			long: map[string]float64{"queued": 40.0 / 60},
		},
		{
			// The minute before the first plan it was in Nomad's queue;
			// resumed, it is there again.
			name: "resumed after its limit: the time in the queue counts",
			steps: []step{{time.Minute, waits(engine.RuleLimit)},
				{41 * time.Minute, act(engine.Action{Kind: engine.Resume, Reason: engine.Reason{Rule: engine.RuleAdmit}})}},
			start: 43 * time.Minute, net: 3,
			long: map[string]float64{"queued": 3.0 / 60, "limit": 40.0 / 60},
		},
		{
			name: "resumed after victims: the drain is not its limit",
			steps: []step{{0, act(engine.Action{Kind: engine.Hold, Reason: engine.Reason{Rule: engine.RuleLimit}})},
				{30 * time.Minute, act(engine.Action{Kind: engine.Resume, AfterVictims: true})}},
			start: 32 * time.Minute, net: 2,
			long: map[string]float64{"limit": 0.5, "draining": 2.0 / 60},
		},
		{
			name:  "a plan that leaves it out of its waiting list keeps its rule",
			steps: []step{{0, waits(engine.RuleLimit)}, {5 * time.Minute, &engine.Plan{}}},
			start: 9 * time.Minute, net: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &simulator{
				jobs:        []simJob{{spec: &Job{ID: "I1"}, ref: ref, high: true, firstStart: -1}},
				byRef:       map[engine.JobRef]int32{ref: 0},
				nextArrival: 1,
				m:           &metrics{delays: map[string][]float64{}},
			}
			for _, st := range tc.steps {
				s.now = st.at
				s.m.holds.plan(s, st.plan)
			}
			j := &s.jobs[0]
			j.firstStart = tc.start
			s.m.started(j, tc.start)
			if got := s.m.holds.net; len(got) != 1 || math.Abs(got[0]-tc.net) > 1e-9 {
				t.Errorf("net of own limit %v min, want [%.3f] (delay %v)", got, tc.net, s.m.high)
			}
			if long := inHours(s.m.holds.longByRule); tc.long != nil && !maps.EqualFunc(long, tc.long, func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }) {
				t.Errorf("long-wait hours by rule %v, want %v", long, tc.long)
			}
			if all := inHours(s.m.holds.allByRule); tc.all != nil && !maps.EqualFunc(all, tc.all, func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }) {
				t.Errorf("hours by rule %v, want %v", all, tc.all)
			}
		})
	}
}
