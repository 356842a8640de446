package controller

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestMarksKeptForBeneficiary: what a preemption frees, and the free GPUs
// beside it that it counted on, reach the engine as the beneficiary's,
// survive a restart of the controller, and expire.
func TestMarksKeptForBeneficiary(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	train := job("ml", "train", "training", 40, 2, 1)
	nbJob := job("ml", "nb", "interactive", 60, 1, 1) // waiting for GPUs
	allocs := []ObservedAlloc{alloc("a1", "train"), alloc("a2", "train")}
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	r := roundWith([]*ObservedJob{train, nbJob}, allocs)
	r.plan = &engine.Plan{Earmarks: []engine.Earmark{{NodeID: "n1", GPUs: 1, For: nb, ForGroup: "work"}}}
	a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work",
		Allocs: []string{"a1"}, GPUs: 1, Grace: 2 * time.Minute, Signal: "SIGUSR1", Requeue: true,
		For: &nb, ForGroup: "work", Reason: engine.Reason{Rule: engine.RulePriority, Message: "for ml/nb"}}
	if err := c.execute(context.Background(), r, a); err != nil {
		t.Fatal(err)
	}
	beside := engine.Earmark{NodeID: "n1", GPUs: 1, For: nb, ForGroup: "work"}

	snap := buildSnapshot(c.pol, r.obs, c.states, nil)
	for _, sa := range snap.Allocs {
		draining := sa.ID == "a1"
		if sa.Draining != draining || (draining && (sa.For == nil || *sa.For != nb || sa.ForGroup != "work")) {
			t.Errorf("alloc %s: draining %v for %v/%q", sa.ID, sa.Draining, sa.For, sa.ForGroup)
		}
	}
	if want := []engine.Earmark{beside}; !slices.Equal(snap.Earmarks, want) {
		t.Errorf("during the grace: earmarks %v, want %v", snap.Earmarks, want)
	}

	r1 := roundWith([]*ObservedJob{train, nbJob}, allocs)
	r1.now = t0.Add(signalDelay)
	c.finishDrains(context.Background(), r1) // the checkpoint signal

	// A restarted controller finishes the preemption at the deadline: the
	// victim's GPU joins the mark.
	c2 := testController(t, f)
	if err := c2.loadStates(context.Background()); err != nil {
		t.Fatal(err)
	}
	end := t0.Add(signalDelay + 2*time.Minute)
	c2.now = func() time.Time { return end }
	r2 := roundWith([]*ObservedJob{train, nbJob}, allocs)
	r2.now, r2.obs.At = end, end
	c2.finishDrains(context.Background(), r2)
	r3 := roundWith([]*ObservedJob{train, nbJob}, allocs[1:])
	r3.obs.At = end.Add(time.Second)
	snap = buildSnapshot(c2.pol, r3.obs, c2.states, nil)
	if want := []engine.Earmark{beside, beside}; !slices.Equal(snap.Earmarks, want) {
		t.Errorf("after the victim stopped: earmarks %v, want %v", snap.Earmarks, want)
	}

	// A beneficiary that stopped wants none of them.
	stopped := *nbJob
	stopped.Stopped = true
	r3.obs.Jobs[jobKey{"ml", "nb"}] = &stopped
	if snap = buildSnapshot(c2.pol, r3.obs, c2.states, nil); len(snap.Earmarks) != 0 {
		t.Errorf("beneficiary stopped: earmarks %v, want none", snap.Earmarks)
	}
	r3.obs.Jobs[jobKey{"ml", "nb"}] = nbJob

	r3.obs.At = end.Add(markTTL + time.Second)
	if snap = buildSnapshot(c2.pol, r3.obs, c2.states, nil); len(snap.Earmarks) != 0 {
		t.Errorf("after markTTL: earmarks %v, want none", snap.Earmarks)
	}
}

// TestResumeWaitsForThisRoundsDrain: a beneficiary's resume planned with
// its preemption waits for the victims' grace, like one planned later
// (beneficiaryDraining): released at once, Nomad would place it on the
// first GPUs anyone frees. A victim stopped without a grace holds nothing
// up.
func TestResumeWaitsForThisRoundsDrain(t *testing.T) {
	for _, tt := range []struct {
		name      string
		grace     time.Duration
		signal    string
		wantWaits bool
	}{
		{"grace and signal: the resume waits", 2 * time.Minute, "SIGUSR1", true},
		{"stopped at once: the resume goes ahead", 0, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			train := job("ml", "train", "training", 40, 1, 1)
			nb := engine.JobRef{Namespace: "ml", ID: "nb"}
			r := roundWith([]*ObservedJob{train}, []ObservedAlloc{alloc("a1", "train")})
			a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work",
				Allocs: []string{"a1"}, GPUs: 1, Grace: tt.grace, Signal: tt.signal, Requeue: true,
				For: &nb, ForGroup: "work", Reason: engine.Reason{Rule: engine.RulePriority, Message: "for ml/nb"}}
			if err := c.execute(context.Background(), r, a); err != nil {
				t.Fatal(err)
			}
			if got := r.beneficiaryDraining(nb); got != tt.wantWaits {
				t.Fatalf("beneficiaryDraining(ml/nb) = %v after the preemption, want %v", got, tt.wantWaits)
			}
		})
	}
}

// TestResumeAhead: a resume of work GPUs were set aside for goes through
// ScaleAhead (an evaluation ahead of Nomad's queue, which would otherwise
// place queued work of a higher priority on exactly those GPUs first);
// any other resume is a plain scale.
func TestResumeAhead(t *testing.T) {
	for _, tt := range []struct {
		name    string
		ahead   bool
		refused error // ScaleAhead's error
		want    []string
	}{
		{"GPUs set aside for it: ahead of the queue", true, nil, []string{"scale-ahead ml/nb work 1"}},
		{"nothing set aside: a plain scale", false, nil, []string{"scale ml/nb work 1: Steward resumes 1 allocation: go"}},
		{"re-registration refused: a plain scale", true, errors.New("403 Permission denied: vault"),
			[]string{"scale-ahead ml/nb work 1", "scale ml/nb work 1: Steward resumes 1 allocation: go"}},
		{"the job changed: decided again next round", true, errJobChanged, []string{"scale-ahead ml/nb work 1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			if tt.refused != nil {
				f.fail["scale-ahead"] = tt.refused
			}
			c := testController(t, f)
			c.state(jobKey{"ml", "nb"}).hold("work", 1, 1, string(engine.RuleDraining), t0, 10)
			r := roundWith([]*ObservedJob{job("ml", "nb", "interactive", 60, 0, 1)}, nil)
			a := engine.Action{Kind: engine.Resume, Job: engine.JobRef{Namespace: "ml", ID: "nb"}, Group: "work", Count: 1,
				Ahead: tt.ahead, Reason: engine.Reason{Rule: engine.RuleAdmit, Message: "go"}}
			err := c.execute(context.Background(), r, a)
			if (err != nil) != errors.Is(tt.refused, errJobChanged) {
				t.Fatalf("execute: %v", err)
			}
			if got := f.callsMatching("scale"); !slices.Equal(got, tt.want) {
				t.Fatalf("calls %q, want %q", got, tt.want)
			}
		})
	}
}

// TestMarksOfVictimsGoneEarly: GPUs given back by a drain stay set aside
// for its beneficiary even when its victim exited by itself before the
// drain was finished (Nomad lists it no more: Drain.On says where it ran),
// for an idle stop under pressure as for a preemption, and until markTTL
// after the last other drain for the same beneficiary ends (it is
// released only then).
func TestMarksOfVictimsGoneEarly(t *testing.T) {
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	for _, tt := range []struct {
		name      string
		kind      engine.Kind
		otherEnds time.Duration // another drain for nb ends this long after now (0: none)
		wantUntil time.Duration
	}{
		{"preempted, gone before its deadline", engine.Preempt, 0, markTTL},
		{"idle-stopped under pressure", engine.IdleStop, 0, markTTL},
		{"another victim still draining for it", engine.Preempt, 90 * time.Second, 90*time.Second + markTTL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			train := job("ml", "train", "training", 40, 2, 1)
			allocs := []ObservedAlloc{alloc("a1", "train"), alloc("a2", "train")}
			r := roundWith([]*ObservedJob{train}, allocs)
			r.plan = &engine.Plan{}
			a := engine.Action{Kind: tt.kind, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work",
				Allocs: []string{"a1"}, GPUs: 1, Grace: 2 * time.Minute, Signal: "SIGUSR1", Requeue: true,
				For: &nb, ForGroup: "work", Reason: engine.Reason{Rule: engine.RulePriority, Message: "for ml/nb"}}
			if err := c.execute(context.Background(), r, a); err != nil {
				t.Fatal(err)
			}
			if tt.otherEnds > 0 {
				c.state(jobKey{"ml", "other"}).Draining = []*Drain{{Kind: string(engine.Preempt), For: "ml/nb",
					Allocs: []string{"a2"}, Deadline: t0.Add(30 * time.Second).Add(tt.otherEnds)}}
			}
			// The victim checkpointed and exited; the next round finds it gone.
			later := t0.Add(30 * time.Second)
			c.now = func() time.Time { return later }
			r2 := roundWith([]*ObservedJob{train, job("ml", "nb", "interactive", 60, 1, 1)}, allocs[1:])
			r2.now, r2.obs.At = later, later
			c.finishDrains(context.Background(), r2)
			marks := c.states[jobKey{"ml", "train"}].Marks
			if len(marks) != 1 || marks[0].Node != "n1" || marks[0].GPUs != 1 || marks[0].For != "ml/nb" {
				t.Fatalf("marks %+v: want 1 GPU on n1 for ml/nb", marks)
			}
			if got := marks[0].Until.Sub(later); got != tt.wantUntil {
				t.Fatalf("set aside for %s, want %s", got, tt.wantUntil)
			}
			snap := buildSnapshot(c.pol, r2.obs, c.states, nil)
			if want := []engine.Earmark{{NodeID: "n1", GPUs: 1, For: nb, ForGroup: "work"}}; !slices.Equal(snap.Earmarks, want) {
				t.Fatalf("earmarks %v, want %v", snap.Earmarks, want)
			}
		})
	}
}

// TestMarksLastUntilTheLastVictim: GPUs an idle stop gave back at once
// for a beneficiary stay its own while a victim preempted for it later in
// the same plan checkpoints: it is released only when that one stops.
func TestMarksLastUntilTheLastVictim(t *testing.T) {
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	f := newFakeNomad()
	c := testController(t, f)
	idle := job("ml", "idle", "interactive", 60, 1, 1)
	train := job("ml", "train", "training", 40, 1, 1)
	allocs := []ObservedAlloc{alloc("i1", "idle"), alloc("t1", "train")}
	r := roundWith([]*ObservedJob{idle, train}, allocs)
	r.plan = &engine.Plan{}
	for _, a := range []engine.Action{
		{Kind: engine.IdleStop, Job: engine.JobRef{Namespace: "ml", ID: "idle"}, Group: "work", Allocs: []string{"i1"}, GPUs: 1,
			Requeue: true, For: &nb, ForGroup: "work", Reason: engine.Reason{Rule: engine.RuleIdle, Message: "idle"}},
		{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work", Allocs: []string{"t1"}, GPUs: 1,
			Grace: 2 * time.Minute, Signal: "SIGUSR1", Requeue: true, For: &nb, ForGroup: "work",
			Reason: engine.Reason{Rule: engine.RulePriority, Message: "for ml/nb"}},
	} {
		if err := c.execute(context.Background(), r, a); err != nil {
			t.Fatal(err)
		}
	}
	marks := c.states[jobKey{"ml", "idle"}].Marks
	want := t0.Add(signalDelay + 2*time.Minute + markTTL)
	if len(marks) != 1 || !marks[0].Until.Equal(want) {
		t.Fatalf("idle stop's marks %+v: want 1 until %s", marks, want)
	}
}
