package controller

import (
	"context"
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
	allocs := []ObservedAlloc{alloc("a1", "train"), alloc("a2", "train")}
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	r := roundWith([]*ObservedJob{train}, allocs)
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

	r1 := roundWith([]*ObservedJob{train}, allocs)
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
	r2 := roundWith([]*ObservedJob{train}, allocs)
	r2.now, r2.obs.At = end, end
	c2.finishDrains(context.Background(), r2)
	r3 := roundWith([]*ObservedJob{train}, allocs[1:])
	r3.obs.At = end.Add(time.Second)
	snap = buildSnapshot(c2.pol, r3.obs, c2.states, nil)
	if want := []engine.Earmark{beside, beside}; !slices.Equal(snap.Earmarks, want) {
		t.Errorf("after the victim stopped: earmarks %v, want %v", snap.Earmarks, want)
	}

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
