package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

func TestBuildSnapshot(t *testing.T) {
	train := job("ml", "train", "training", 40, 2, 4)
	nb := job("ml", "nb", "interactive", 60, 1, 1)
	gang := job("ml", "gang", "training", 40, 2, 8)
	gang.Meta["steward.gang"] = "true"
	gang.Meta["steward.checkpoint_signal"] = "SIGTERM"
	obs := func() *Observation {
		return &Observation{
			At:    t0,
			Nodes: []ObservedNode{{ID: "n1", GPUs: 8}, {ID: "n2", NodePool: "serving", GPUs: 8}},
			Jobs: map[jobKey]*ObservedJob{
				{"ml", "train"}: train, {"ml", "nb"}: nb, {"ml", "gang"}: gang,
			},
			Allocs: []ObservedAlloc{{ID: "a1", Namespace: "ml", JobID: "train", Group: "work", NodeID: "n1",
				GPUIDs: []string{"g0", "g1", "g2", "g3"}, StartedAt: t0.Add(-time.Hour), ClientStatus: "running"}},
			Queued: map[jobKey]map[string]QueuedGroup{{"ml", "nb"}: {"work": {Count: 1, Since: t0.Add(-time.Minute)}}},
		}
	}
	cases := []struct {
		name   string
		states map[jobKey]*JobState
		check  func(t *testing.T, s *engine.Snapshot)
	}{
		{"nodes keep their pool; an empty pool is default", nil, func(t *testing.T, s *engine.Snapshot) {
			if len(s.Nodes) != 2 || s.Nodes[0].NodePool != "default" || s.Nodes[1].NodePool != "serving" {
				t.Fatalf("nodes %+v", s.Nodes)
			}
		}},
		{"a queued group waits, not held, since its blocked evaluation", nil, func(t *testing.T, s *engine.Snapshot) {
			d := demandOf(t, s, "nb")
			if d.Held || d.Count != 1 || d.GPUsPerAlloc != 1 || !d.Since.Equal(t0.Add(-time.Minute)) || d.Job.Tier != "interactive" {
				t.Fatalf("demand %+v", d)
			}
		}},
		{"a held group waits as held work, since its hold", map[jobKey]*JobState{{"ml", "gang"}: {Namespace: "ml", ID: "gang",
			Held: map[string]*Held{"work": {Count: 2, Original: 2, Since: t0.Add(-time.Hour), Rule: "reclaim"}}}},
			func(t *testing.T, s *engine.Snapshot) {
				d := demandOf(t, s, "gang")
				if !d.Held || d.Requeued || d.Count != 2 || d.GPUsPerAlloc != 8 || !d.Job.Gang || d.Job.Checkpoint != "SIGTERM" {
					t.Fatalf("demand %+v", d)
				}
			}},
		{"a group preempted mid-run waits as preempted work (resume_order)", map[jobKey]*JobState{{"ml", "gang"}: {Namespace: "ml", ID: "gang",
			Held: map[string]*Held{"work": {Count: 2, Original: 2, Since: t0, Rule: "priority"}}, Interrupted: map[string]bool{"work": true}}},
			func(t *testing.T, s *engine.Snapshot) {
				if d := demandOf(t, s, "gang"); !d.Preempted || !d.Held {
					t.Fatalf("demand %+v", d)
				}
				if d := demandOf(t, s, "nb"); d.Preempted {
					t.Fatalf("work that never ran counts as preempted: %+v", d)
				}
			}},
		{"a paused job does not wait", map[jobKey]*JobState{{"ml", "gang"}: {Namespace: "ml", ID: "gang", Paused: true,
			Held: map[string]*Held{"work": {Count: 2, Original: 2, Since: t0}}}},
			func(t *testing.T, s *engine.Snapshot) {
				for _, d := range s.Waiting {
					if d.Job.Ref.ID == "gang" {
						t.Fatalf("paused job waits: %+v", d)
					}
				}
			}},
		{"work held after an idle release waits behind the rest", map[jobKey]*JobState{{"ml", "gang"}: {Namespace: "ml", ID: "gang",
			Held: map[string]*Held{"work": {Count: 1, Original: 2, Since: t0, Rule: "idle"}}}},
			func(t *testing.T, s *engine.Snapshot) {
				if d := demandOf(t, s, "gang"); !d.Requeued {
					t.Fatalf("demand %+v not requeued", d)
				}
			}},
		{"a resumed group keeps its place in line", map[jobKey]*JobState{{"ml", "nb"}: {Namespace: "ml", ID: "nb",
			Waiting: map[string]time.Time{"work": t0.Add(-3 * time.Hour)}}},
			func(t *testing.T, s *engine.Snapshot) {
				if d := demandOf(t, s, "nb"); !d.Since.Equal(t0.Add(-3 * time.Hour)) {
					t.Fatalf("since %s, want 3h ago", d.Since)
				}
			}},
		{"allocations being preempted are draining; history, the preemption in progress and promotion pass through", map[jobKey]*JobState{{"ml", "train"}: {
			Namespace: "ml", ID: "train", Promoted: true, Preemptions: []time.Time{t0.Add(-time.Minute)},
			Draining: []*Drain{{Group: "work", Allocs: []string{"a1"}, Kind: "preempt", Decided: t0, Deadline: t0.Add(time.Minute)}}}},
			func(t *testing.T, s *engine.Snapshot) {
				a := s.Allocs[0]
				if !a.Draining || !a.Job.Promoted || len(a.Job.Preemptions) != 2 || len(a.GPUIDs) != 4 {
					t.Fatalf("alloc %+v", a)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, buildSnapshot(testPolicy(t), obs(), tc.states, nil))
		})
	}
}

func demandOf(t *testing.T, s *engine.Snapshot, id string) engine.Demand {
	t.Helper()
	for _, d := range s.Waiting {
		if d.Job.Ref.ID == id {
			return d
		}
	}
	t.Fatalf("no demand for %s in %+v", id, s.Waiting)
	return engine.Demand{}
}

func TestLacksGPUs(t *testing.T) {
	cases := []struct {
		name string
		m    *api.AllocationMetric
		want bool
	}{
		{"no details", nil, true},
		{"devices exhausted", &api.AllocationMetric{DimensionExhausted: map[string]int{"devices: no devices match request": 1}}, true},
		{"no node has the device", &api.AllocationMetric{ConstraintFiltered: map[string]int{"missing devices": 2}}, true},
		{"memory exhausted", &api.AllocationMetric{DimensionExhausted: map[string]int{"memory": 1}}, false},
		// Issue 29: one node short of GPUs does not make the group
		// GPU-starved when another node it may use turned it away for
		// something else.
		{"one node lacks devices, another memory", &api.AllocationMetric{NodesEvaluated: 2, NodesExhausted: 2,
			DimensionExhausted: map[string]int{"devices: no devices match request": 1, "memory": 1}}, false},
		{"one node has no GPUs, the other lacks cpu", &api.AllocationMetric{NodesEvaluated: 2, NodesFiltered: 1, NodesExhausted: 1,
			ConstraintFiltered: map[string]int{"missing devices": 1}, DimensionExhausted: map[string]int{"cpu": 1}}, false},
		{"a node turned it away for an unnamed reason", &api.AllocationMetric{NodesEvaluated: 3, NodesExhausted: 1,
			DimensionExhausted: map[string]int{"devices: no devices match request": 1}}, false},
		{"every node lacks devices", &api.AllocationMetric{NodesEvaluated: 3, NodesFiltered: 1, NodesExhausted: 2,
			ConstraintFiltered: map[string]int{"missing devices": 1}, DimensionExhausted: map[string]int{"devices: no devices match request": 2}}, true},
		{"pinned: its constraint filters the others, its node lacks devices", &api.AllocationMetric{NodesEvaluated: 3, NodesFiltered: 2, NodesExhausted: 1,
			ConstraintFiltered: map[string]int{"${node.unique.name} = n1": 2}, DimensionExhausted: map[string]int{"devices: no devices match request": 1}}, true},
		{"pinned to a node short of memory", &api.AllocationMetric{NodesEvaluated: 3, NodesFiltered: 2, NodesExhausted: 1,
			ConstraintFiltered: map[string]int{"${node.unique.name} = n1": 2}, DimensionExhausted: map[string]int{"memory": 1}}, false},
	}
	for _, tc := range cases {
		if got := lacksGPUs(tc.m); got != tc.want {
			t.Errorf("%s: lacksGPUs = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestResumedInFlight: a group Steward just resumed, which Nomad shows
// neither placed nor blocked yet, still waits (else the engine gives its
// GPUs to other work in the meantime, the victim among them); once Nomad
// shows it, or resumeInFlight later, it counts as what Nomad shows.
func TestResumedInFlight(t *testing.T) {
	nb := job("ml", "nb", "interactive", 60, 1, 4)
	base := func(at time.Time, allocs []ObservedAlloc) *Observation {
		return &Observation{At: at, Nodes: []ObservedNode{{ID: "n1", GPUs: 8}},
			Jobs: map[jobKey]*ObservedJob{{"ml", "nb"}: nb}, Allocs: allocs, Queued: map[jobKey]map[string]QueuedGroup{}}
	}
	placed := []ObservedAlloc{{ID: "b1", Namespace: "ml", JobID: "nb", Group: "work", NodeID: "n1",
		GPUIDs: []string{"g0", "g1", "g2", "g3"}, ClientStatus: "pending"}}
	st := &JobState{Namespace: "ml", ID: "nb", resumed: map[string]time.Time{"work": t0}}
	states := map[jobKey]*JobState{{"ml", "nb"}: st}
	for _, tt := range []struct {
		name string
		obs  *Observation
		want int // GPUs the engine sees nb wait for
	}{
		{"just resumed, not shown yet: waits", base(t0.Add(time.Second), nil), 4},
		{"placed: does not wait", base(t0.Add(time.Second), placed), 0},
		{"long after the resume: Nomad's word again", base(t0.Add(resumeInFlight+time.Second), nil), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := buildSnapshot(testPolicy(t), tt.obs, states, nil)
			got := 0
			for _, d := range s.Waiting {
				got += d.GPUs()
				if d.Held {
					t.Errorf("demand %s held; want queued", d)
				}
				if d.Since.IsZero() || d.Since.After(tt.obs.At) {
					t.Errorf("demand %s waits since %s: want a time, not after now", d, d.Since)
				}
			}
			if got != tt.want {
				t.Fatalf("waiting GPUs %d, want %d (%v)", got, tt.want, s.Waiting)
			}
		})
	}
}

// A group resumed in full, not seen by Nomad yet, waits since its hold
// began, and keeps its place in line while in flight: preempted mid-run
// too (resume_order), or work that never started takes its GPUs first.
func TestResumedKeepsItsPlace(t *testing.T) {
	nb := job("ml", "nb", "interactive", 60, 1, 4)
	k := jobKey{"ml", "nb"}
	st := &JobState{Namespace: "ml", ID: "nb", resumed: map[string]time.Time{"work": t0},
		Held:        map[string]*Held{"work": {Count: 0, Original: 1, Since: t0.Add(-time.Hour)}},
		Interrupted: map[string]bool{"work": true}}
	st.setWaiting("work", t0.Add(-time.Hour))
	f := newFakeNomad()
	c := testController(t, f)
	c.states()[k] = st
	r := roundWith([]*ObservedJob{nb}, nil)
	r.now, r.obs.At = t0.Add(time.Second), t0.Add(time.Second)
	c.trackWaiting(r)
	if w, ok := st.Waiting["work"]; !ok || !w.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("in flight: waiting %v (%v), want its place since an hour ago", w, ok)
	}
	s := buildSnapshot(c.pol, r.obs, c.states(), nil)
	if len(s.Waiting) != 1 || !s.Waiting[0].Since.Equal(t0.Add(-time.Hour)) || !s.Waiting[0].Preempted {
		t.Fatalf("waiting %+v: want one demand since an hour ago, preempted mid-run", s.Waiting)
	}
	delete(st.Waiting, "work")
	if s := buildSnapshot(c.pol, r.obs, c.states(), nil); len(s.Waiting) != 1 || !s.Waiting[0].Since.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("without a place in line: waiting %+v, want since the hold began", s.Waiting)
	}
}

// A group resumed and placed in full waits no more, even within
// resumeInFlight of its resume: preempted again, it waits since then, not
// since before it ran (issue 28: b1, running 17 s, was preempted and at
// once promoted for "waiting 17s", and took its GPU back 240 ms later).
func TestResumedAndPlacedWaitsNoMore(t *testing.T) {
	b1 := job("ml", "b1", "training", 45, 1, 1)
	k := jobKey{"ml", "b1"}
	st := &JobState{Namespace: "ml", ID: "b1", resumed: map[string]time.Time{"work": t0},
		Held: map[string]*Held{"work": {Count: 0, Original: 1, Since: t0.Add(-17 * time.Second)}}}
	st.setWaiting("work", t0.Add(-17*time.Second))
	f := newFakeNomad()
	c := testController(t, f)
	c.states()[k] = st
	r := roundWith([]*ObservedJob{b1}, []ObservedAlloc{alloc("a1", "b1")})
	r.now, r.obs.At = t0.Add(time.Second), t0.Add(time.Second)
	c.trackWaiting(r)
	if w, ok := st.Waiting["work"]; ok {
		t.Fatalf("placed in full 1s after its resume: still waiting since %v", w)
	}
	preempted := t0.Add(17 * time.Second)
	if h := st.hold("work", 1, 1, "priority", preempted, 11); !h.Since.Equal(preempted) {
		t.Fatalf("held again at %v: waits since %v, want since then", preempted, h.Since)
	}
	// Not placed yet (in flight): it keeps its place since before.
	st = &JobState{Namespace: "ml", ID: "b1", resumed: map[string]time.Time{"work": t0},
		Held: map[string]*Held{"work": {Count: 0, Original: 1, Since: t0.Add(-17 * time.Second)}}}
	st.setWaiting("work", t0.Add(-17*time.Second))
	c.states()[k] = st
	r = roundWith([]*ObservedJob{b1}, nil)
	r.now, r.obs.At = t0.Add(time.Second), t0.Add(time.Second)
	c.trackWaiting(r)
	if h := st.hold("work", 1, 1, "capacity", t0.Add(2*time.Second), 11); !h.Since.Equal(t0.Add(-17 * time.Second)) {
		t.Fatalf("held back in flight: waits since %v, want its place since 17s before the resume", h.Since)
	}
}

// While Nomad carries out a partial preemption, a group can show more
// allocations than its count: the victims' replacements, placed by their
// stop's evaluation on the GPUs just freed, before the scale's evaluation
// stops the excess. Those are counted as being freed for the beneficiary,
// not as work to preempt again; which ones is Nomad's rule.
func TestLeavingAllocations(t *testing.T) {
	exp := func(count int) *ObservedJob { return job("ml", "exp", "training", 40, count, 1) }
	alloc := func(id string, index int, stop bool) ObservedAlloc {
		return ObservedAlloc{ID: id, Name: fmt.Sprintf("exp.work[%d]", index), Namespace: "ml", JobID: "exp", Group: "work",
			NodeID: "n1", GPUIDs: []string{"g-" + id}, StartedAt: t0.Add(-time.Hour), ClientStatus: "running", StopRequested: stop}
	}
	preempted := func(victims ...string) map[jobKey]*JobState {
		return map[jobKey]*JobState{{"ml", "exp"}: {Namespace: "ml", ID: "exp", Draining: []*Drain{{Group: "work", Allocs: victims,
			Kind: string(engine.Preempt), For: "ml/urgent", ForGroup: "work", Finished: true, FinishedAt: t0}}}}
	}
	cases := []struct {
		name   string
		count  int
		allocs []ObservedAlloc
		states map[jobKey]*JobState
		want   string // allocations draining, and for whom
	}{
		{"as many as the count: none leaves", 4, []ObservedAlloc{alloc("a0", 0, false), alloc("a1", 1, false), alloc("a2", 2, false), alloc("a3", 3, false)},
			nil, ""},
		{"victims' replacements on the freed GPUs: the highest names leave, for the beneficiary", 2,
			[]ObservedAlloc{alloc("a0", 0, false), alloc("a1", 1, false), alloc("r2", 2, false), alloc("r3", 3, false)},
			preempted("v2", "v3"), "r2:ml/urgent r3:ml/urgent"},
		{"victims still listed count first", 2,
			[]ObservedAlloc{alloc("a0", 0, false), alloc("a1", 1, false), alloc("v2", 2, true), alloc("v3", 3, true)},
			preempted("v2", "v3"), "v2:ml/urgent v3:ml/urgent"},
		{"one victim gone, its replacement placed, one still listed", 2,
			[]ObservedAlloc{alloc("a0", 0, false), alloc("a1", 1, false), alloc("r2", 2, false), alloc("v3", 3, true)},
			preempted("v2", "v3"), "r2:ml/urgent v3:ml/urgent"},
		{"marked to stop goes before a higher name", 2,
			[]ObservedAlloc{alloc("a0", 0, true), alloc("a1", 1, false), alloc("a2", 2, false), alloc("v3", 3, true)},
			preempted("v3", "v4"), "a0:ml/urgent v3:ml/urgent"},
		{"an owner's scale down, no preemption: running until Nomad stops them", 1,
			[]ObservedAlloc{alloc("a0", 0, false), alloc("a1", 1, false)}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := &Observation{At: t0, Nodes: []ObservedNode{{ID: "n1", GPUs: 8}},
				Jobs:   map[jobKey]*ObservedJob{{"ml", "exp"}: exp(tc.count), {"ml", "urgent"}: job("ml", "urgent", "interactive", 60, 1, 2)},
				Allocs: tc.allocs}
			s := buildSnapshot(testPolicy(t), obs, tc.states, nil)
			var got []string
			for _, a := range s.Allocs {
				if !a.Draining {
					continue
				}
				who := "-"
				if a.For != nil {
					who = a.For.String()
				}
				got = append(got, a.ID+":"+who)
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("draining %q, want %q", g, tc.want)
			}
		})
	}
}

// TestAllocAgeFromCreation: an allocation's age (min_runtime, youngest
// first) counts from its creation, never from its tasks' latest start, so a
// notebook that restarts its task does not stay forever young (issue 29).
func TestAllocAgeFromCreation(t *testing.T) {
	created := t0.Add(-3 * time.Hour)
	cases := []struct {
		name   string
		states map[string]*api.TaskState
	}{
		{"never restarted", map[string]*api.TaskState{"work": {State: "running", StartedAt: created.Add(time.Second)}}},
		{"task restarted a minute ago", map[string]*api.TaskState{"work": {State: "running", StartedAt: t0.Add(-time.Minute), Restarts: 40}}},
		{"one of two tasks restarted", map[string]*api.TaskState{
			"work":    {State: "running", StartedAt: t0.Add(-time.Minute), Restarts: 3},
			"sidecar": {State: "running", StartedAt: t0.Add(-2 * time.Minute), Restarts: 1}}},
		{"not started yet", map[string]*api.TaskState{"work": {State: "pending"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := toObservedAlloc(&api.AllocationListStub{ID: "a1", Namespace: "ml", JobID: "nb", TaskGroup: "work",
				ClientStatus: "running", DesiredStatus: "run", CreateTime: created.UnixNano(), TaskStates: tc.states})
			if !a.StartedAt.Equal(created) {
				t.Fatalf("StartedAt = %v, want the allocation's creation %v", a.StartedAt, created)
			}
		})
	}
}
