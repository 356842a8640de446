package controller

import (
	"testing"
	"time"

	"github.com/gpu-steward/steward/forecast"
	"github.com/gpu-steward/steward/policy/engine"
)

// TestKeepWork: a preemption that asked the job to checkpoint adds the
// run it interrupted to the work kept; one that did not loses it all.
func TestKeepWork(t *testing.T) {
	h := time.Hour
	for _, tc := range []struct {
		name         string
		done, ran    time.Duration
		checkpointed bool
		want         time.Duration
	}{
		{"first checkpointed preemption: the run kept", 0, 2 * h, true, 2 * h},
		{"second checkpointed preemption: added up", 2 * h, h, true, 3 * h},
		{"no checkpoint signal: all lost", 2 * h, h, false, 0},
		{"nothing running: unchanged", 2 * h, 0, false, 2 * h},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &JobState{Done: tc.done}
			st.keepWork(tc.checkpointed, tc.ran)
			if st.Done != tc.want {
				t.Errorf("Done = %v, want %v", st.Done, tc.want)
			}
		})
	}
}

// TestWorkDone: the forecast's Input.Done from the job states: the work
// kept, plus the current run unless it is being drained (counted at its
// preemption already); jobs that kept none are left to their allocations'
// ages.
func TestWorkDone(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	resumed := engine.JobRef{Namespace: "ml", ID: "resumed"}
	draining := engine.JobRef{Namespace: "ml", ID: "draining"}
	waiting := engine.JobRef{Namespace: "ml", ID: "waiting"}
	fresh := engine.JobRef{Namespace: "ml", ID: "fresh"}
	// The publisher reads the states through the store.
	c := &Controller{stateStore: &stateStore{byJob: map[jobKey]*JobState{
		{"ml", "resumed"}:  {Namespace: "ml", ID: "resumed", Done: 3 * time.Hour},
		{"ml", "draining"}: {Namespace: "ml", ID: "draining", Done: 2 * time.Hour, Draining: []*Drain{{Signal: "SIGUSR1"}}},
		{"ml", "waiting"}:  {Namespace: "ml", ID: "waiting", Done: 5 * time.Hour},
		{"ml", "fresh"}:    {Namespace: "ml", ID: "fresh"},
	}}}
	c.pub = newPublisher(c)
	snap := &engine.Snapshot{
		Allocs: []engine.Alloc{
			{ID: "a1", Job: engine.Job{Ref: resumed}, StartedAt: now.Add(-time.Hour)},
			{ID: "a2", Job: engine.Job{Ref: draining}, StartedAt: now.Add(-2 * time.Hour)},
			{ID: "a3", Job: engine.Job{Ref: fresh}, StartedAt: now.Add(-time.Hour)},
		},
		Waiting: []engine.Demand{{Job: engine.Job{Ref: waiting}, GPUsPerAlloc: 1, Count: 1}},
	}
	got := c.pub.queue.workDone(now, snap)
	for _, tc := range []struct {
		name string
		ref  engine.JobRef
		want time.Duration
		in   bool
	}{
		{"resumed and running: kept plus its run", resumed, 4 * time.Hour, true},
		{"draining: kept only (its run counted at the preemption)", draining, 2 * time.Hour, true},
		{"waiting again: kept", waiting, 5 * time.Hour, true},
		{"never preempted: left to its allocation's age", fresh, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := got[tc.ref]
			if ok != tc.in || d != tc.want {
				t.Errorf("Done[%s] = %v (present %v), want %v (present %v)", tc.ref, d, ok, tc.want, tc.in)
			}
		})
	}
}

// TestLearnStarts: the calibration learns a job's start when it waits no
// more and runs, keeps waiting for one still in the queue, and forgets
// one gone without running.
func TestLearnStarts(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c := &Controller{}
	c.pub = newPublisher(c)
	c.pub.queue.fc = newQueueForecaster()
	started := engine.JobRef{Namespace: "ml", ID: "started"}
	waits := engine.JobRef{Namespace: "ml", ID: "waits"}
	gone := engine.JobRef{Namespace: "ml", ID: "gone"}
	c.pub.queue.fc.cal.Record(&forecast.Result{At: t0, Jobs: map[engine.JobRef]*forecast.JobForecast{
		started: {P50: t0.Add(time.Hour)}, waits: {P50: t0.Add(time.Hour)}, gone: {P50: t0.Add(time.Hour)}}})
	r := &round{now: t0.Add(30 * time.Minute), obs: &Observation{Allocs: []ObservedAlloc{
		{ID: "a1", Namespace: "ml", JobID: "started", GPUIDs: []string{"g0"}}}}}
	c.pub.queue.learnStarts(r, []forecast.Entry{{Job: waits}})
	if got := c.pub.queue.fc.cal.Waiting(); len(got) != 1 || got[0] != waits {
		t.Errorf("still waiting %v, want only %s", got, waits)
	}
	if n := c.pub.queue.fc.cal.Starts(); n != 1 {
		t.Errorf("%d starts learnt, want 1 (%s's; %s's forecast forgotten)", n, started, gone)
	}
}
