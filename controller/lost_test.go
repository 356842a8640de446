package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestNothingLost: each way a preemption, hold or resume could be left
// half done, and how the next rounds finish it.
func TestNothingLost(t *testing.T) {
	ctx := context.Background()
	train := func(count int) *ObservedJob { return job("ml", "train", "training", 40, count, 1) }
	k := jobKey{"ml", "train"}
	cases := []struct {
		name string
		run  func(t *testing.T, f *fakeNomad, c *Controller)
	}{
		{"a full resume whose scale failed is scaled again, and forgotten once Nomad shows it", func(t *testing.T, f *fakeNomad, c *Controller) {
			st := &JobState{Namespace: "ml", ID: "train", Held: map[string]*Held{"work": {Count: 2, Original: 2, Since: t0, Rule: "reclaim", Index: 10}}}
			c.states()[k] = st
			f.fail["scale"] = errors.New("503 Service Unavailable")
			a := engine.Action{Kind: engine.Resume, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work", Count: 2,
				Reason: engine.Reason{Rule: engine.RuleAdmit, Message: "GPUs are free"}}
			if err := c.execute(ctx, roundWith([]*ObservedJob{train(0)}, nil), a); err == nil {
				t.Fatal("the failed scale was not reported")
			}
			if h := st.Held["work"]; h == nil || h.Count != 0 {
				t.Fatalf("the hold's record went with the failed scale: %+v", st.Held)
			}
			delete(f.fail, "scale")
			c.syncHolds(ctx, roundWith([]*ObservedJob{train(0)}, nil))
			if got := f.callsMatching("scale"); len(got) != 2 || !strings.HasPrefix(got[1], "scale ml/train work 2:") {
				t.Fatalf("scale calls %q: want the resume applied again", got)
			}
			c.syncHolds(ctx, roundWith([]*ObservedJob{train(2)}, nil))
			if _, ok := st.Held["work"]; ok {
				t.Fatalf("the resume stays recorded after Nomad shows it: %+v", st.Held)
			}
		}},
		{"a victim Nomad still runs is stopped again, and the preemption given up after a bound", func(t *testing.T, f *fakeNomad, c *Controller) {
			d := &Drain{Group: "work", Allocs: []string{"a1"}, Kind: "preempt", Requeue: true, Finished: true, FinishedAt: t0}
			c.states()[k] = &JobState{Namespace: "ml", ID: "train", Draining: []*Drain{d}}
			at := func(d time.Duration) *round {
				r := roundWith([]*ObservedJob{train(1)}, []ObservedAlloc{alloc("a1", "train")})
				r.now = t0.Add(d)
				return r
			}
			c.drains.finishDrains(ctx, at(2*time.Second))
			if got := f.callsMatching("stop"); len(got) != 0 {
				t.Fatalf("stopped again too soon: %q", got)
			}
			c.drains.finishDrains(ctx, at(victimStopRetry))
			if got := f.callsMatching("stop"); !slices.Equal(got, []string{"stop ml a1"}) {
				t.Fatalf("stop calls %q, want the victim stopped again", got)
			}
			// Rounds come often under load: each stop makes Nomad evaluate
			// the job again, so they are paced, not repeated every round.
			for d := victimStopRetry + 100*time.Millisecond; d < 2*victimStopRetry; d += 300 * time.Millisecond {
				c.drains.finishDrains(ctx, at(d))
			}
			if got := f.callsMatching("stop"); len(got) != 1 {
				t.Fatalf("stop calls %q within %s of the last: want none", got, victimStopRetry)
			}
			c.drains.finishDrains(ctx, at(2*victimStopRetry))
			if got := f.callsMatching("stop"); len(got) != 2 {
				t.Fatalf("stop calls %q, want a second retry after %s", got, victimStopRetry)
			}
			c.drains.finishDrains(ctx, at(victimStopLimit))
			if st := c.states()[k]; len(st.Draining) != 0 {
				t.Fatalf("the preemption is kept for ever: %+v", st.Draining)
			}
		}},
		{"a new leader stops a victim Nomad still runs at the dead leader's pace, not in its first round", func(t *testing.T, f *fakeNomad, c *Controller) {
			// The dead leader finished the preemption a minute ago and
			// may have stopped the victim again a second before it died
			// (this process's alone): the next leader's first round leaves
			// it to Nomad, and stops it victimStopRetry later if it runs.
			d := &Drain{Group: "work", Allocs: []string{"a1"}, Kind: "preempt", Requeue: true, Finished: true, FinishedAt: t0.Add(-time.Minute)}
			st := &JobState{Namespace: "ml", ID: "train", Draining: []*Drain{d}}
			items, _ := st.encode()
			if _, err := f.PutVar(ctx, c.cfg().StateNamespace, statePath(k), items, false, 0); err != nil {
				t.Fatal(err)
			}
			next := testController(t, f) // its clock reads t0: it loads the states at t0
			if err := next.loadStates(ctx); err != nil {
				t.Fatal(err)
			}
			at := func(d time.Duration) *round {
				r := roundWith([]*ObservedJob{train(1)}, []ObservedAlloc{alloc("a1", "train")})
				r.now = t0.Add(d)
				return r
			}
			next.drains.finishDrains(ctx, at(time.Second))
			if got := f.callsMatching("stop"); len(got) != 0 {
				t.Fatalf("the new leader's first round stopped %q: the dead leader's stops are Nomad's to carry out", got)
			}
			next.drains.finishDrains(ctx, at(victimStopRetry))
			if got := f.callsMatching("stop"); !slices.Equal(got, []string{"stop ml a1"}) {
				t.Fatalf("stop calls %q, want the victim stopped again %s after the new leader took over", got, victimStopRetry)
			}
			next.drains.finishDrains(ctx, at(time.Minute))
			if len(next.states()[k].Draining) != 0 {
				t.Fatalf("given up %s after the preemption finished, as before: %+v", victimStopLimit, next.states()[k].Draining)
			}
		}},
		{"a victim Nomad was asked to stop, or whose group Nomad shows at 0, is left to Nomad", func(t *testing.T, f *fakeNomad, c *Controller) {
			// Under load Nomad evaluates late: stopping again would only
			// queue another evaluation behind the rest.
			d := &Drain{Group: "work", Allocs: []string{"a1", "a2"}, Kind: "preempt", Requeue: true, Finished: true, FinishedAt: t0}
			c.states()[k] = &JobState{Namespace: "ml", ID: "train", Draining: []*Drain{d}}
			asked := alloc("a1", "train")
			asked.StopRequested = true
			for _, tc := range []struct {
				job    *ObservedJob
				allocs []ObservedAlloc
				want   []string
			}{
				{train(1), []ObservedAlloc{asked, alloc("a2", "train")}, []string{"stop ml a2"}},
				{train(0), []ObservedAlloc{alloc("a1", "train"), alloc("a2", "train")}, nil},
			} {
				f.calls = nil
				d.stoppedAgain = time.Time{}
				r := roundWith([]*ObservedJob{tc.job}, tc.allocs)
				r.now = t0.Add(victimStopRetry)
				c.drains.finishDrains(ctx, r)
				if got := f.callsMatching("stop"); !slices.Equal(got, tc.want) {
					t.Errorf("group at %d: stop calls %q, want %q", tc.job.Groups["work"].Count, got, tc.want)
				}
			}
		}},
		{"a preemption whose victims' stops stay pending in Nomad waits 10 minutes, then is given up as a decision", func(t *testing.T, f *fakeNomad, c *Controller) {
			// Nomad's eval broker holds the stops (their evaluations at the
			// victim's priority, behind a backlog): asking again would only
			// queue more. Given up before at 2 minutes as a failed call, so
			// that a new leader's rounds all failed until then.
			d := &Drain{Group: "work", Allocs: []string{"a1", "a2"}, Kind: "preempt", Requeue: true, Finished: true, FinishedAt: t0,
				For: "ml/nb", On: []NodeGPUs{{Node: "n1", GPUs: 2}}}
			c.states()[k] = &JobState{Namespace: "ml", ID: "train", Draining: []*Drain{d}}
			asked := func(id string) ObservedAlloc {
				a := alloc(id, "train")
				a.StopRequested = true
				return a
			}
			at := func(d time.Duration) *round {
				r := roundWith([]*ObservedJob{train(2)}, []ObservedAlloc{asked("a1"), asked("a2")})
				r.now = t0.Add(d)
				return r
			}
			for _, after := range []time.Duration{victimStopRetry, victimStopLimit, 5 * time.Minute, victimPendingLimit - time.Second} {
				r := at(after)
				c.drains.finishDrains(ctx, r)
				if got := f.callsMatching("stop"); len(got) != 0 || r.failed != 0 || len(c.states()[k].Draining) != 1 {
					t.Fatalf("%s after: stop calls %q, failed %d, preemptions %d: want none, none, and the preemption kept", after, got, r.failed, len(c.states()[k].Draining))
				}
			}
			r := at(victimPendingLimit)
			c.drains.finishDrains(ctx, r)
			if len(c.states()[k].Draining) != 0 || r.failed != 0 {
				t.Fatalf("at %s: preemptions %+v, failed %d: want it given up, no failed call", victimPendingLimit, c.states()[k].Draining, r.failed)
			}
			want := Decision{At: t0.Add(victimPendingLimit), Kind: decisionGiveUp, Job: "ml/train", Group: "work", GPUs: 2, Rule: givenUpStopsPending,
				Reason: "victims' stops pending in Nomad for 10m0s: giving up preemption of ml/train for ml/nb (2 victims of 2 still running; the next plan sees them)"}
			if n := len(c.decisions.list()); n == 0 || c.decisions.list()[n-1] != want {
				t.Fatalf("decisions %+v, want the last %+v", c.decisions, want)
			}
			if n := testutil.ToFloat64(c.metrics.givenUp.WithLabelValues(givenUpStopsPending)); n != 1 {
				t.Fatalf("steward_preemptions_given_up_total{why=stops-pending} = %v, want 1", n)
			}
		}},
		{"a signal recorded but never sent is sent by the next leader", func(t *testing.T, f *fakeNomad, c *Controller) {
			d := &Drain{Group: "work", Allocs: []string{"a1"}, Kind: "preempt", Requeue: true, Signal: "SIGUSR1", Grace: time.Minute,
				Decided: t0, Signaled: t0.Add(time.Second), Deadline: t0.Add(time.Minute + time.Second)}
			st := &JobState{Namespace: "ml", ID: "train", Draining: []*Drain{d}}
			items, _ := st.encode()
			if _, err := f.PutVar(ctx, c.cfg().StateNamespace, statePath(k), items, false, 0); err != nil {
				t.Fatal(err)
			}
			next := testController(t, f)
			if err := next.loadStates(ctx); err != nil {
				t.Fatal(err)
			}
			r := roundWith([]*ObservedJob{train(1)}, []ObservedAlloc{alloc("a1", "train")})
			r.now = t0.Add(5 * time.Second)
			next.drains.finishDrains(ctx, r)
			if got := f.callsMatching("signal"); !slices.Equal(got, []string{"signal ml a1 SIGUSR1"}) {
				t.Fatalf("signal calls %q", got)
			}
			got := next.states()[k].Draining[0]
			if !got.Sent || !got.Deadline.Equal(d.Deadline) {
				t.Fatalf("after the resend: sent %v, deadline %s (the grace keeps running from the first send, %s)", got.Sent, got.Deadline, d.Deadline)
			}
			next.drains.finishDrains(ctx, r)
			if n := len(f.callsMatching("signal")); n != 1 {
				t.Fatalf("sent %d times", n)
			}
		}},
		{"a purged job's state is pruned; a job only out of sight is kept", func(t *testing.T, f *fakeNomad, c *Controller) {
			for _, id := range []string{"gone", "hidden"} {
				st := &JobState{Namespace: "ml", ID: id, Preemptions: []time.Time{t0}, Held: map[string]*Held{"work": {Count: 1, Original: 1}}}
				c.states()[jobKey{"ml", id}] = st
				if err := c.save(ctx, st); err != nil {
					t.Fatal(err)
				}
			}
			f.purged["ml/gone"] = true
			c.syncHolds(ctx, roundWith(nil, nil))
			if _, ok := c.states()[jobKey{"ml", "gone"}]; ok {
				t.Fatalf("the purged job's state is kept")
			}
			if items, _, _ := f.GetVar(ctx, c.cfg().StateNamespace, statePath(jobKey{"ml", "gone"})); items != nil {
				t.Fatalf("the purged job's state variable is kept")
			}
			if st := c.states()[jobKey{"ml", "hidden"}]; st == nil || st.heldCount() != 1 {
				t.Fatalf("a job Nomad still knows lost its hold: %+v", st)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			tc.run(t, f, testController(t, f))
		})
	}
}

// TestSignalTasks: the checkpoint signal goes to the tasks that take it —
// steward-exec tasks and tasks that use the GPUs — and never to a sidecar
// without GPUs, whose default action for SIGUSR1 is to die; task meta
// steward.checkpoint opts in or out.
func TestSignalTasks(t *testing.T) {
	gpu := func() *api.Resources {
		return &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: new(uint64(1))}}}
	}
	task := func(name, driver string, res *api.Resources, meta map[string]string) *api.Task {
		return &api.Task{Name: name, Driver: driver, Resources: res, Meta: meta}
	}
	cases := []struct {
		name  string
		tasks []*api.Task
		want  []string
	}{
		{"a GPU task and its sidecar", []*api.Task{task("train", "raw_exec", gpu(), nil), task("logs", "raw_exec", nil, nil)}, []string{"train"}},
		{"steward-exec without GPUs of its own", []*api.Task{task("train", "steward-exec", nil, nil)}, []string{"train"}},
		{"a GPU task that opts out", []*api.Task{task("serve", "docker", gpu(), map[string]string{"steward.checkpoint": "false"})}, nil},
		{"a sidecar that opts in", []*api.Task{task("train", "raw_exec", gpu(), nil), task("saver", "raw_exec", nil, map[string]string{"steward.checkpoint": "true"})},
			[]string{"train", "saver"}},
		{"an unreadable opt-in is ignored", []*api.Task{task("logs", "raw_exec", nil, map[string]string{"steward.checkpoint": "maybe"})}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := &api.Job{ID: new("j"), Namespace: new("ml"), TaskGroups: []*api.TaskGroup{{Name: new("work"), Count: new(1), Tasks: tc.tasks}}}
			if got := toObservedJob(j).Groups["work"].SignalTasks; !slices.Equal(got, tc.want) {
				t.Fatalf("signal tasks %q, want %q", got, tc.want)
			}
		})
	}
}
