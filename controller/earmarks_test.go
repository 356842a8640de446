package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
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

	snap := buildSnapshot(c.pol, r.obs, c.states(), nil)
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
	c.drains.finishDrains(context.Background(), r1) // the checkpoint signal

	// A restarted controller signals again (the signal's time was not
	// saved by itself) and finishes the preemption a grace later: the
	// victim's GPU joins the mark.
	clock := newTestClock(t0.Add(signalDelay + 2*time.Minute))
	c2 := testController(t, f, withClock(clock.now))
	if err := c2.loadStates(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{signalDelay + 2*time.Minute, signalDelay + 4*time.Minute} {
		now := t0.Add(at)
		clock.set(now)
		r2 := roundWith([]*ObservedJob{train, nbJob}, allocs)
		r2.now, r2.obs.At = now, now
		c2.drains.finishDrains(context.Background(), r2)
	}
	end := t0.Add(signalDelay + 4*time.Minute)
	r3 := roundWith([]*ObservedJob{train, nbJob}, allocs[1:])
	r3.obs.At = end.Add(time.Second)
	snap = buildSnapshot(c2.pol, r3.obs, c2.states(), nil)
	if want := []engine.Earmark{beside, beside}; !slices.Equal(snap.Earmarks, want) {
		t.Errorf("after the victim stopped: earmarks %v, want %v", snap.Earmarks, want)
	}

	// A beneficiary that stopped wants none of them.
	stopped := *nbJob
	stopped.Stopped = true
	r3.obs.Jobs[jobKey{"ml", "nb"}] = &stopped
	if snap = buildSnapshot(c2.pol, r3.obs, c2.states(), nil); len(snap.Earmarks) != 0 {
		t.Errorf("beneficiary stopped: earmarks %v, want none", snap.Earmarks)
	}
	r3.obs.Jobs[jobKey{"ml", "nb"}] = nbJob

	r3.obs.At = end.Add(markTTL + time.Second)
	if snap = buildSnapshot(c2.pol, r3.obs, c2.states(), nil); len(snap.Earmarks) != 0 {
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
			clock := newTestClock(t0)
			c := testController(t, f, withClock(clock.now))
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
					Allocs: []string{"o1"}, Deadline: t0.Add(30 * time.Second).Add(tt.otherEnds)}}
			}
			// The victim checkpointed and exited; the next round finds it gone.
			later := t0.Add(30 * time.Second)
			clock.set(later)
			// ml/other's victim is its own allocation: victims match
			// within their job only.
			r2 := roundWith([]*ObservedJob{train, job("ml", "nb", "interactive", 60, 1, 1)}, []ObservedAlloc{allocs[1], alloc("o1", "other")})
			r2.now, r2.obs.At = later, later
			c.drains.finishDrains(context.Background(), r2)
			marks := c.states()[jobKey{"ml", "train"}].Marks
			if len(marks) != 1 || marks[0].Node != "n1" || marks[0].GPUs != 1 || marks[0].For != "ml/nb" {
				t.Fatalf("marks %+v: want 1 GPU on n1 for ml/nb", marks)
			}
			if got := marks[0].Until.Sub(later); got != tt.wantUntil {
				t.Fatalf("set aside for %s, want %s", got, tt.wantUntil)
			}
			snap := buildSnapshot(c.pol, r2.obs, c.states(), nil)
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
	marks := c.states()[jobKey{"ml", "idle"}].Marks
	want := t0.Add(signalDelay + 2*time.Minute + markTTL)
	if len(marks) != 1 || !marks[0].Until.Equal(want) {
		t.Fatalf("idle stop's marks %+v: want 1 until %s", marks, want)
	}
}

// TestPauseFreesSetAsideGPUs: b/b1 preempts a/a1 for the node's 2 GPUs;
// what a1 gave back is set aside for b1 for a minute after. When b pauses
// b1, b1 waits for nothing: the GPUs set aside for it are given up (its
// marks dropped, left out of the snapshot, no placeholder for it), and a1,
// waiting for exactly those GPUs, resumes in the round after b1 stops,
// not when the set-aside would have lapsed.
func TestPauseFreesSetAsideGPUs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause bool // b pauses b1 once it runs
		// resumed: a1 resumes within 10s of the pause (else: stays held
		// while b1 runs)
		resumed bool
	}{
		{name: "b1 runs: a1 stays held", pause: false, resumed: false},
		{name: "b pauses b1: a1 resumes at once", pause: true, resumed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cl := f.cl()
			cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
			a1 := apiJob("a", "a1", "training", 40, 1, 2)
			b1 := apiJob("b", "b1", "interactive", 60, 1, 2)
			cl.jobs["a/a1"], cl.jobs["b/b1"] = a1, b1
			cl.allocs = []*api.AllocationListStub{apiAlloc("a-a1", a1, "n1", []string{"n1-gpu0", "n1-gpu1"}, t0.Add(-time.Hour))}
			ev, sum := apiBlockedEval(b1, 1, t0.Add(-time.Second))
			cl.evals, cl.summary["b/b1"] = []*api.Evaluation{ev}, sum
			r := newRoundRunner(t, f)
			p, diags := policy.ParseBytes("test.hcl", []byte(strings.Replace(testPolicyText, `grace             = "2m"`, `grace             = "0s"`, 1)))
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			r.c.pol, r.c.eng = p, engine.New(p)
			at := time.Duration(0)
			resumedAt := time.Duration(-1)
			step := func() []string {
				t.Helper()
				w, err := r.round(at)
				if err != nil {
					t.Fatalf("round at %v: %v", at, err)
				}
				for _, c := range w {
					if resumedAt < 0 && (strings.HasPrefix(c, "scale a/a1 work 1") || strings.HasPrefix(c, "scale-ahead a/a1 work 1")) {
						resumedAt = at
					}
					if strings.HasPrefix(c, "register steward/"+placeholderPrefix) {
						t.Errorf("round at %v: %s", at, c)
					}
				}
				at += time.Second
				return w
			}
			for r.running("b", "b1") == 0 && at < 10*time.Second {
				step()
			}
			if r.running("b", "b1") != 1 || r.count("a", "a1") != 0 || resumedAt >= 0 {
				t.Fatalf("b1 running %d, a1 count %d: want b1 to have preempted a1", r.running("b", "b1"), r.count("a", "a1"))
			}
			if marks := r.c.states()[jobKey{"a", "a1"}].Marks; len(marks) == 0 || marks[0].For != "b/b1" {
				t.Fatalf("a1's state sets aside %v, want its GPUs for b/b1", marks)
			}
			paused := at
			if tc.pause {
				if err := SubmitRequest(context.Background(), f, "b", "b1", Request{Action: "pause", By: "bob"}); err != nil {
					t.Fatal(err)
				}
			}
			for at < paused+10*time.Second {
				step()
			}
			if got := resumedAt >= 0; got != tc.resumed {
				t.Fatalf("a1 resumed at %v (-1: not) after b1 ran from %v, want resumed %v", resumedAt, paused, tc.resumed)
			}
			if !tc.pause {
				return
			}
			if n := r.running("a", "a1"); n != 1 || r.running("b", "b1") != 0 {
				t.Errorf("a1 running %d, b1 running %d; want a1 back, b1 paused", n, r.running("b", "b1"))
			}
			for k, st := range r.c.states() {
				if slices.ContainsFunc(st.Marks, func(m Mark) bool { return m.For == "b/b1" }) {
					t.Errorf("%s still sets GPUs aside for the paused b/b1: %v", k, st.Marks)
				}
			}
		})
	}
}
