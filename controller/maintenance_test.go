package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestMaintenanceDrains: the decision of a node maintenance. Batch GPU
// work on a node an operator drains in Nomad is drained, per job and
// group, with the node's name and the GPUs; work elsewhere, service and
// system jobs (Nomad's to migrate), work without GPUs, paused jobs and
// allocations some drain covers already are left alone.
func TestMaintenanceDrains(t *testing.T) {
	on := func(id, jobID, node string, gpus int) ObservedAlloc {
		a := alloc(id, jobID)
		a.NodeID = node
		a.GPUIDs = nil
		for i := 0; i < gpus; i++ {
			a.GPUIDs = append(a.GPUIDs, id+"-gpu")
		}
		return a
	}
	typed := func(j *ObservedJob, typ string) *ObservedJob { j.Type = typ; return j }
	tests := []struct {
		name     string
		draining map[string]DrainingNode
		jobs     []*ObservedJob
		allocs   []ObservedAlloc
		states   map[jobKey]*JobState
		want     []string
	}{
		{name: "no drain: nothing", jobs: []*ObservedJob{batchJob("train", 1)},
			allocs: []ObservedAlloc{on("a1", "train", "n1", 1)}},
		{name: "a batch job on the drained node: drained with the node and GPUs",
			draining: map[string]DrainingNode{"n1": {Name: "gpu-1"}}, jobs: []*ObservedJob{batchJob("train", 2)},
			allocs: []ObservedAlloc{on("a1", "train", "n1", 2), on("a2", "train", "n2", 2)},
			want:   []string{"ml/train work [a1] on [gpu-1] 2 GPUs"}},
		{name: "two nodes drained: one drain per group",
			draining: map[string]DrainingNode{"n1": {Name: "gpu-1"}, "n2": {Name: "gpu-2"}}, jobs: []*ObservedJob{batchJob("train", 2)},
			allocs: []ObservedAlloc{on("a2", "train", "n2", 1), on("a1", "train", "n1", 1)},
			want:   []string{"ml/train work [a1 a2] on [gpu-1 gpu-2] 2 GPUs"}},
		{name: "service and system jobs: Nomad's to migrate",
			draining: map[string]DrainingNode{"n1": {Name: "gpu-1"}},
			jobs:     []*ObservedJob{job("ml", "serve", "interactive", 60, 1, 1), typed(job("ml", "agent", "training", 40, 1, 1), "system")},
			allocs:   []ObservedAlloc{on("a1", "serve", "n1", 1), on("a2", "agent", "n1", 1)}},
		{name: "a forced drain: Nomad's (it stops everything at once)",
			draining: map[string]DrainingNode{"n1": {Name: "gpu-1", Forced: true}}, jobs: []*ObservedJob{batchJob("train", 1)},
			allocs: []ObservedAlloc{on("a1", "train", "n1", 1)}},
		{name: "work without GPUs: Nomad's",
			draining: map[string]DrainingNode{"n1": {Name: "gpu-1"}}, jobs: []*ObservedJob{batchJob("train", 1)},
			allocs: []ObservedAlloc{on("a1", "train", "n1", 0)}},
		{name: "a paused job and an allocation already draining: left alone",
			draining: map[string]DrainingNode{"n1": {Name: "gpu-1"}}, jobs: []*ObservedJob{batchJob("train", 2), batchJob("paused", 1)},
			allocs: []ObservedAlloc{on("a1", "train", "n1", 1), on("a2", "train", "n1", 1), on("a3", "paused", "n1", 1)},
			states: map[jobKey]*JobState{
				{"ml", "train"}:  {Draining: []*Drain{{Group: "work", Allocs: []string{"a1"}, Kind: string(engine.Preempt)}}},
				{"ml", "paused"}: {Paused: true},
			},
			want: []string{"ml/train work [a2] on [gpu-1] 1 GPU"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := roundWith(tt.jobs, tt.allocs)
			r.obs.Draining = tt.draining
			var got []string
			for _, d := range maintenanceDrains(r.obs, tt.states) {
				got = append(got, d.Job.String()+" "+d.Group+" ["+strings.Join(d.Allocs, " ")+"] on ["+strings.Join(d.Nodes, " ")+"] "+plural(d.GPUs, "GPU"))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("drains\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// TestNodeMaintenance: a batch job on a drained node goes the preemption's
// way with the reason "node maintenance": recorded (reason with the node,
// GPUs, signal and grace; the record's grace for its task), signalled a
// moment later, held at the end of its grace with a scaling message that
// says why, and not counted as an eviction; a controller that sees the
// drain again does not drain it twice.
func TestNodeMaintenance(t *testing.T) {
	f := newFakeNomad()
	clock := newTestClock(t0)
	c := testController(t, f, withClock(clock.now))
	k := jobKey{"ml", "train"}
	train := batchJob("train", 1)
	a := alloc("a1", "train")
	round := func(at time.Duration, allocs ...ObservedAlloc) *round {
		r := roundWith([]*ObservedJob{train}, allocs)
		r.now, r.obs.At = t0.Add(at), t0.Add(at)
		r.obs.Draining = map[string]DrainingNode{"n1": {Name: "gpu-1"}}
		clock.set(t0.Add(at))
		return r
	}
	r := round(0, a)
	c.drainNodes(context.Background(), r)
	st := c.states()[k]
	wantReason := "node maintenance: node gpu-1 drained by an operator: 1 GPU of group work there (checkpoint signal SIGUSR1, grace 2m) " +
		"stop and the job waits, held, to resume on other nodes when GPUs are free"
	if st == nil || len(st.Draining) != 1 || st.Reason != wantReason || st.Rule != "maintenance" || st.Status != StatusDraining {
		t.Fatalf("state after the drain was seen: %+v\nwant reason %q", st, wantReason)
	}
	rec := f.vars["ml:nomad/jobs/train"]
	if rec["steward_reason"] != wantReason || rec["steward_grace"] != "2m" || rec["steward_state"] != StatusDraining {
		t.Fatalf("record %v", rec)
	}
	if got := f.callsMatching("signal"); len(got) != 0 {
		t.Fatalf("signalled before the record could render: %q", got)
	}
	// Seen again: no second drain.
	c.drainNodes(context.Background(), round(500*time.Millisecond, a))
	if n := len(c.states()[k].Draining); n != 1 {
		t.Fatalf("%d drains after the drain was seen twice", n)
	}
	c.drains.finishDrains(context.Background(), round(2*time.Second, a))
	if got := f.callsMatching("signal"); strings.Join(got, "\n") != "signal ml a1 SIGUSR1" {
		t.Fatalf("signal calls %q", got)
	}
	c.drains.finishDrains(context.Background(), round(2*time.Minute+3*time.Second, a))
	want := "scale ml/train work 0: Steward holds (node maintenance) 1 allocation: " + wantReason
	if got := f.callsMatching("scale"); strings.Join(got, "\n") != want {
		t.Fatalf("scale calls %q\nwant %q", got, want)
	}
	st = c.states()[k]
	if h := st.Held["work"]; h == nil || h.Count != 1 || h.Rule != "maintenance" {
		t.Fatalf("held %+v, want the group held by rule maintenance", h)
	}
	if st.Status != StatusHeld || st.PreemptedTotal != 0 || len(st.Preemptions) != 0 || !st.Interrupted["work"] || st.Resumes != 1 {
		t.Fatalf("state %+v: want held, no eviction counted, interrupted, one resume", st)
	}
}

// TestMaintenanceGraceFitsDeadline: a drain whose deadline comes before
// the grace would end cuts the grace to end 10 s before it, and says so;
// one too near for any grace holds the work at once, without a signal,
// rather than leave Nomad to stop it and place it again; a deadline far
// off, or none known, leaves the policy's grace.
func TestMaintenanceGraceFitsDeadline(t *testing.T) {
	tests := []struct {
		name       string
		deadline   time.Duration // after t0; 0: unknown
		wantReason string
		wantCalls  []string // at once
	}{
		{"unknown deadline: the policy's grace", 0, "(checkpoint signal SIGUSR1, grace 2m)", nil},
		{"an hour: the policy's grace", time.Hour, "(checkpoint signal SIGUSR1, grace 2m)", nil},
		{"a minute: the grace cut to 49s", time.Minute,
			"(checkpoint signal SIGUSR1, grace 49s, cut from 2m to end before the drain's deadline, 12:01:00 UTC)", nil},
		{"5 seconds: held at once, no signal", 5 * time.Second,
			"(no checkpoint: the drain's deadline, 12:00:05 UTC, leaves no time for the grace of 2m)",
			[]string{"scale ml/train work 0: Steward holds (node maintenance) 1 allocation: node maintenance: node gpu-1 drained by an operator: 1 GPU of group work there " +
				"(no checkpoint: the drain's deadline, 12:00:05 UTC, leaves no time for the grace of 2m) stop and the job waits, held, to resume on other nodes when GPUs are free"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			r := roundWith([]*ObservedJob{batchJob("train", 1)}, []ObservedAlloc{alloc("a1", "train")})
			d := DrainingNode{Name: "gpu-1"}
			if tt.deadline > 0 {
				d.Deadline = t0.Add(tt.deadline)
			}
			r.obs.Draining = map[string]DrainingNode{"n1": d}
			c.drainNodes(context.Background(), r)
			st := c.states()[jobKey{"ml", "train"}]
			if st == nil || !strings.Contains(st.Reason, tt.wantReason) {
				t.Fatalf("state %+v\nwant a reason with %q", st, tt.wantReason)
			}
			if got := f.callsMatching("scale"); strings.Join(got, "\n") != strings.Join(tt.wantCalls, "\n") {
				t.Fatalf("calls %q\nwant %q", got, tt.wantCalls)
			}
		})
	}
}

// TestDrainDeadlineKept: a node's drain deadline and force come from its
// events (the list shows neither) and are kept over a full read that
// shows the node still draining; a node no longer draining forgets them.
func TestDrainDeadlineKept(t *testing.T) {
	deadline := t0.Add(time.Hour)
	ev := nodeFromAPI(&api.Node{ID: "n1", Name: "gpu-1", Status: "ready", SchedulingEligibility: "ineligible",
		DrainStrategy: &api.DrainStrategy{DrainSpec: api.DrainSpec{Deadline: time.Hour}, ForceDeadline: deadline}})
	if !ev.draining || !ev.drain.Deadline.Equal(deadline) || ev.drain.Forced || ev.drain.Name != "gpu-1" {
		t.Fatalf("from the event: %+v", ev)
	}
	forced := nodeFromAPI(&api.Node{ID: "n2", Name: "gpu-2", DrainStrategy: &api.DrainStrategy{DrainSpec: api.DrainSpec{Deadline: -1}}})
	if !forced.drain.Forced {
		t.Fatalf("a forced drain not seen: %+v", forced)
	}
	cached := map[string]cachedNode{"n1": ev, "n2": forced}
	read := map[string]cachedNode{
		"n1": nodeFromStub(&api.NodeListStub{ID: "n1", Name: "gpu-1", Drain: true}),
		"n2": nodeFromStub(&api.NodeListStub{ID: "n2", Name: "gpu-2", Drain: false}),
	}
	keepDrains(cached, read)
	if !read["n1"].drain.Deadline.Equal(deadline) {
		t.Fatalf("deadline lost over a full read: %+v", read["n1"])
	}
	if read["n2"].drain.Forced {
		t.Fatalf("a drain that ended kept its force: %+v", read["n2"])
	}
}
