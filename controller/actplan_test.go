package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// slowNomad is the fake with a round trip on each write, counting how
// many are in flight at once.
type slowNomad struct {
	*fakeNomad
	delay         time.Duration
	mu            sync.Mutex
	now, maxCalls int
}

func (s *slowNomad) trip() func() {
	s.mu.Lock()
	s.now++
	s.maxCalls = max(s.maxCalls, s.now)
	s.mu.Unlock()
	time.Sleep(s.delay)
	return func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}
}

func (s *slowNomad) PutVar(ctx context.Context, ns, path string, items map[string]string, cas bool, index uint64) (uint64, error) {
	defer s.trip()()
	return s.fakeNomad.PutVar(ctx, ns, path, items, cas, index)
}

func (s *slowNomad) Scale(ctx context.Context, ns, job, group string, count int, msg string, meta map[string]any, index uint64) (uint64, error) {
	defer s.trip()()
	return s.fakeNomad.Scale(ctx, ns, job, group, count, msg, meta, index)
}

func (s *slowNomad) StopAlloc(ctx context.Context, ns, alloc string) (uint64, error) {
	defer s.trip()()
	return s.fakeNomad.StopAlloc(ctx, ns, alloc)
}

// slowController is a test controller over a slowNomad with a 20 ms
// round trip, width actions in flight.
func slowController(t *testing.T, width int) (*slowNomad, *Controller) {
	f := &slowNomad{fakeNomad: newFakeNomad(), delay: 20 * time.Millisecond}
	return f, testController(t, f.fakeNomad, withNomad(f), withConfig(func(cfg *Config) { cfg.ActInFlight = width }))
}

// victimsOf are n one-allocation jobs v00, v01, ... and an action like a
// on each.
func victimsOf(n int, a engine.Action) ([]*ObservedJob, []ObservedAlloc, []engine.Action) {
	var jobs []*ObservedJob
	var allocs []ObservedAlloc
	var actions []engine.Action
	for i := range n {
		id := fmt.Sprintf("v%02d", i)
		jobs = append(jobs, job("ml", id, "training", 40, 1, 1))
		allocs = append(allocs, alloc("a"+id, id))
		a.Job, a.Allocs = engine.JobRef{Namespace: "ml", ID: id}, []string{"a" + id}
		actions = append(actions, a)
	}
	return jobs, allocs, actions
}

// TestActCarriesOutJobsAtOnce: a plan's actions for different jobs are
// carried out ActInFlight at a time, each job's calls in the order one
// after another made them (its state written before Nomad is asked). At
// 250 nodes a round's 20–38 actions, one after another, held it for
// 4–6 s (issue 33).
func TestActCarriesOutJobsAtOnce(t *testing.T) {
	reason := engine.Reason{Rule: engine.RulePriority, Message: "tier training yields to ml/nb/work"}
	cases := []struct {
		name     string
		width    int
		jobs     int
		maxCalls int // Nomad calls in flight at most
	}{
		{"20 victims' preemptions, 8 at a time", 8, 20, 8},
		{"20 victims' preemptions, one at a time", 1, 20, 1},
		{"3 victims, fewer than the bound", 8, 3, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, c := slowController(t, tc.width)
			jobs, allocs, actions := victimsOf(tc.jobs, engine.Action{Kind: engine.Preempt, Group: "work", GPUs: 1, Requeue: true,
				For: &engine.JobRef{Namespace: "ml", ID: "nb"}, ForGroup: "work", Reason: reason})
			r := roundWith(jobs, allocs)
			r.plan = &engine.Plan{Actions: actions}
			leaderPhases{c}.act(context.Background(), r, c.pol)
			if f.maxCalls != tc.maxCalls {
				t.Errorf("Nomad calls in flight at most: %d, want %d", f.maxCalls, tc.maxCalls)
			}
			if r.failed != 0 {
				t.Errorf("%d failed", r.failed)
			}
			calls := f.callsMatching("")
			for _, j := range jobs {
				put := slices.Index(calls, "put steward steward/jobs/ml/"+j.ID)
				scale := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "scale ml/"+j.ID+" ") })
				if put < 0 || scale < 0 || put > scale {
					t.Errorf("job %s: state written at call %d, scaled at %d: want the state first", j.ID, put, scale)
				}
			}
			var kinds []string
			for _, d := range c.decisions.list() {
				kinds = append(kinds, d.Job)
			}
			want := make([]string, tc.jobs)
			for i := range want {
				want[i] = fmt.Sprintf("ml/v%02d", i)
			}
			if !slices.Equal(kinds, want) {
				t.Errorf("decisions %v: want plan order %v", kinds, want)
			}
		})
	}
}

// TestActionDeps: what each action of a plan waits for.
func TestActionDeps(t *testing.T) {
	ref := func(id string) engine.JobRef { return engine.JobRef{Namespace: "ml", ID: id} }
	act := func(kind engine.Kind, id, forID string) engine.Action {
		a := engine.Action{Kind: kind, Job: ref(id)}
		if forID != "" {
			f := ref(forID)
			a.For = &f
		}
		return a
	}
	cases := []struct {
		name string
		plan []engine.Action
		want [][]int
	}{
		{"different jobs: none waits", []engine.Action{act(engine.Preempt, "a", "nb"), act(engine.Preempt, "b", "nb"), act(engine.Hold, "c", "")},
			[][]int{nil, nil, nil}},
		{"one job's actions in plan order", []engine.Action{act(engine.Move, "a", ""), act(engine.Hold, "b", ""), act(engine.Resume, "a", "")},
			[][]int{nil, nil, {0}}},
		{"a beneficiary's resume after its victims' preemptions", []engine.Action{act(engine.Preempt, "a", "nb"), act(engine.Preempt, "b", "nb"),
			act(engine.Resume, "nb", ""), act(engine.Resume, "nb", "")},
			[][]int{nil, nil, {0, 1}, {2}}},
		{"a preemption for a job after that job's earlier action", []engine.Action{act(engine.Move, "nb", ""), act(engine.Preempt, "a", "nb")},
			[][]int{nil, {0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := actionDeps(tc.plan)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("deps %v, want %v", got, tc.want)
			}
		})
	}
}

func (s *slowNomad) Signal(ctx context.Context, ns, alloc, task, signal string) error {
	defer s.trip()()
	return s.fakeNomad.Signal(ctx, ns, alloc, task, signal)
}

// TestFinishDrainsSignalsJobsAtOnce: the checkpoint signals of different
// victims' jobs are sent ActInFlight at a time (one after another, ten
// held a round for 5.6 s at 250 nodes: issue 33), each victim's once.
func TestFinishDrainsSignalsJobsAtOnce(t *testing.T) {
	reason := engine.Reason{Rule: engine.RulePriority, Message: "tier training yields to ml/nb/work"}
	cases := []struct {
		name            string
		width, victims  int
		maxCalls, sends int
	}{
		{"10 victims, 4 at a time", 4, 10, 4, 10},
		{"10 victims, 8 at a time", 8, 10, 8, 10},
		{"10 victims, one at a time", 1, 10, 1, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, c := slowController(t, tc.width)
			jobs, allocs, actions := victimsOf(tc.victims, engine.Action{Kind: engine.Preempt, Group: "work", GPUs: 1, Requeue: true,
				Signal: "SIGUSR1", Grace: 2 * time.Minute, For: &engine.JobRef{Namespace: "ml", ID: "nb"}, ForGroup: "work", Reason: reason})
			r := roundWith(jobs, allocs)
			r.plan = &engine.Plan{Actions: actions}
			leaderPhases{c}.act(context.Background(), r, c.pol)
			f.mu.Lock()
			f.maxCalls = 0
			f.mu.Unlock()
			r1 := roundWith(jobs, allocs)
			r1.now = t0.Add(signalDelay)
			c.drains.finishDrains(context.Background(), r1)
			if f.maxCalls != tc.maxCalls {
				t.Errorf("Nomad calls in flight at most: %d, want %d", f.maxCalls, tc.maxCalls)
			}
			if got := f.callsMatching("signal "); len(got) != tc.sends || r1.failed != 0 {
				t.Errorf("signals %v (failed %d): want %d", got, r1.failed, tc.sends)
			}
			for _, st := range c.states() {
				if len(st.Draining) != 1 || !st.Draining[0].Sent {
					t.Errorf("job %s: drains %+v, want its signal sent", st.key(), st.Draining)
				}
			}
		})
	}
}
