package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestLatencyStart: the decision latency starts when Nomad blocked the
// work the victims are stopped for, once per blocking, whichever round
// preempts for it (issue 36: a round woken by the blocking that did not
// see the work queued yet used up the pressure, and the next round's
// preemption went unmeasured).
func TestLatencyStart(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	blockedAt, blockedAgain, woken := t0.Add(-80*time.Millisecond), t0.Add(5*time.Second), t0.Add(-70*time.Millisecond)
	nb := &engine.JobRef{Namespace: "ml", ID: "nb"}
	preempt := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, For: nb, ForGroup: "work"}
	preempt2 := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train2"}, For: &engine.JobRef{Namespace: "ml", ID: "nb2"}, ForGroup: "work"}
	queued := func(since time.Time) map[jobKey]map[string]QueuedGroup {
		return map[jobKey]map[string]QueuedGroup{{"ml", "nb"}: {"work": {Count: 1, Since: since}}}
	}
	type call struct {
		name     string
		queued   map[jobKey]map[string]QueuedGroup
		pressure time.Time
		actions  []engine.Action
		want     []time.Time   // per action
		at       time.Duration // the round's time after t0
	}
	calls := []call{
		{name: "the round woken by the blocking does not see it queued: nothing measured",
			pressure: woken, actions: nil},
		{name: "the next round preempts for it: measured from its blocking",
			queued: queued(blockedAt), actions: []engine.Action{preempt}, want: []time.Time{blockedAt}},
		{name: "a later preemption for the same blocking: not measured again",
			queued: queued(blockedAt), actions: []engine.Action{preempt}, want: []time.Time{{}}},
		{name: "blocked again: measured from the new blocking, once",
			queued: queued(blockedAgain), actions: []engine.Action{preempt, preempt}, want: []time.Time{blockedAgain, {}}},
		{name: "out of the queue for a round (Nomad re-processing its unblocked evaluation)", at: time.Second},
		{name: "back with the same blocking, re-blocked as a copy with its old start: not measured again",
			queued: queued(blockedAgain), actions: []engine.Action{preempt}, want: []time.Time{{}}, at: 2 * time.Second},
		{name: "two jobs preempted for in one round: each from its own blocking",
			queued: map[jobKey]map[string]QueuedGroup{{"ml", "nb"}: {"work": {Count: 1, Since: blockedAgain.Add(time.Minute)}},
				{"ml", "nb2"}: {"work": {Count: 1, Since: blockedAt.Add(2 * time.Minute)}}},
			actions: []engine.Action{preempt, preempt2, preempt2},
			want:    []time.Time{blockedAgain.Add(time.Minute), blockedAt.Add(2 * time.Minute), {}}},
		{name: "work Nomad did not block: from the round's pressure, once a round",
			pressure: woken, actions: []engine.Action{{Kind: engine.Preempt, For: &engine.JobRef{Namespace: "ml", ID: "held"}},
				{Kind: engine.Preempt, For: &engine.JobRef{Namespace: "ml", ID: "held2"}}}, want: []time.Time{woken, {}}},
		{name: "a resume is no decision on a victim",
			queued: queued(blockedAt.Add(time.Minute)), pressure: woken, actions: []engine.Action{{Kind: engine.Resume, Job: *nb}}, want: []time.Time{{}}},
	}
	c := &Controller{}
	for _, cl := range calls {
		r := newRound(t0.Add(cl.at), &Observation{Queued: cl.queued}, nil)
		r.pressureSince = cl.pressure
		for i, a := range cl.actions {
			if got := c.latency.start(r, a); !got.Equal(cl.want[i]) {
				t.Errorf("%s: action %d starts at %v, want %v", cl.name, i, got, cl.want[i])
			}
		}
		c.latency.prune(r)
	}
}

// TestLatencyForgetsWorkOutOfTheQueue: a job's measured blocking and its
// wait are kept while it is out of the queue for a moment, and forgotten
// once it has stayed out for forgetUnqueued.
func TestLatencyForgetsWorkOutOfTheQueue(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC)
	k := jobKey{"ml", "nb"}
	var l decisionLatency
	r := newRound(t0, &Observation{Queued: map[jobKey]map[string]QueuedGroup{k: {"work": {Count: 1, Since: t0.Add(-time.Second)}}}}, nil)
	l.start(r, engine.Action{Kind: engine.Preempt, For: &engine.JobRef{Namespace: "ml", ID: "nb"}, ForGroup: "work"})
	for _, step := range []struct {
		name string
		at   time.Duration
		kept bool
	}{
		{"first round out of the queue", time.Second, true},
		{"out for less than forgetUnqueued", forgetUnqueued - time.Second, true},
		{"out for forgetUnqueued", forgetUnqueued + time.Second, false},
	} {
		l.prune(newRound(t0.Add(step.at), &Observation{}, nil))
		if _, kept := l.measured[k]; kept != step.kept {
			t.Errorf("%s: blocking kept = %v, want %v", step.name, kept, step.kept)
		}
	}
	if len(l.unqueued) != 0 {
		t.Errorf("unqueued keeps %d jobs after forgetting them, want 0", len(l.unqueued))
	}
}

// TestDecisionWaitFields: a decision's line says where its latency went:
// from the blocking to the first round that saw the work queued, then the
// rounds whose plans left it waiting, and why the last one did (issue 33).
func TestDecisionWaitFields(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	blocked := t0.Add(-3 * time.Second)
	k := jobKey{"ml", "nb"}
	queued := map[jobKey]map[string]QueuedGroup{k: {"work": {Count: 1, Since: blocked}}}
	waiting := &engine.Plan{Waiting: []engine.Waiting{{Job: engine.JobRef{Namespace: "ml", ID: "nb"}, Group: "work", GPUs: 1,
		Reason: engine.Reason{Rule: engine.RuleDraining, Message: "GPUs are being freed for it"}}}}
	// A plan that neither preempts for the work nor lists it as waiting:
	// the engine counted it placeable on free GPUs and left it to Nomad.
	leftToNomad := &engine.Plan{}
	cases := []struct {
		name  string
		until time.Duration // the decision's round, after t0
		plans int           // rounds before it that saw the work and left it waiting
		plan  *engine.Plan  // what those rounds planned (nil: waiting)
		want  []string
		lacks []string
	}{
		{name: "decided by the first round that saw it", until: 0,
			want: []string{"seen_after=3s", "rounds_waiting=0"}, lacks: []string{"left_to_nomad"}},
		{name: "left waiting by two rounds first", until: 4 * time.Second, plans: 2,
			want:  []string{"seen_after=3s", "planned_after=4s", "rounds_waiting=2", `waited_for="draining: GPUs are being freed for it"`},
			lacks: []string{"left_to_nomad"}},
		// Issue 33's tail: Nomad kept the work blocked while its one
		// scheduling worker went through hundreds of ready evaluations;
		// the engine saw GPUs free for it for three rounds, then none
		// (Nomad placed other work there) and preempted. The line says
		// which part was Nomad's to place (to the last of those rounds,
		// 2 s after t0: 5 s after the blocking).
		{name: "left to Nomad on free GPUs by three rounds, then decided", until: 4 * time.Second, plans: 3, plan: leftToNomad,
			want: []string{"seen_after=3s", "rounds_waiting=3", "rounds_left_to_nomad=3", "left_to_nomad=5s"}, lacks: []string{"waited_for"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l decisionLatency
			for i := range tc.plans {
				r := newRound(t0.Add(time.Duration(i)*time.Second), &Observation{Queued: queued}, nil)
				r.plan = waiting
				if tc.plan != nil {
					r.plan = tc.plan
				}
				l.prune(r)
				l.noteWaits(r)
			}
			var out lockedLog
			log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})
			log.Info("preempt", l.waitFields(k, blocked, t0.Add(tc.until))...)
			got := out.lines("preempt")
			for _, w := range tc.want {
				if len(got) != 1 || !strings.Contains(got[0], w) {
					t.Errorf("lacks %s: %q", w, got)
				}
			}
			for _, w := range tc.lacks {
				if len(got) == 1 && strings.Contains(got[0], w) {
					t.Errorf("has %s: %q", w, got)
				}
			}
		})
	}
}

// TestLeftToNomadOverFakeNomad: issue 33's tail, over the fake Nomad. The
// server's scheduler is behind (its broker holds hundreds of ready
// evaluations): b1's evaluation stays blocked for three rounds while two
// GPUs stand free, so the engine counts b1 placeable there and leaves it
// to Nomad; then Nomad places other work (a2) on them and the next round
// preempts for b1. The preemption's line says how long the work was left
// to Nomad, for the harness to report the controller's own part apart.
func TestLeftToNomadOverFakeNomad(t *testing.T) {
	f := newFakeNomad()
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
	a1 := apiJob("a", "a1", "training", 40, 1, 2)
	a2 := apiJob("a", "a2", "training", 40, 1, 2)
	b1 := apiJob("b", "b1", "interactive", 60, 1, 2)
	cl.jobs["a/a1"], cl.jobs["b/b1"] = a1, b1
	cl.allocs = []*api.AllocationListStub{apiAlloc("a-a1", a1, "n1", []string{"n1-gpu0", "n1-gpu1"}, t0.Add(-time.Hour))}
	ev, sum := apiBlockedEval(b1, 1, t0.Add(-time.Second))
	cl.evals, cl.summary["b/b1"] = []*api.Evaluation{ev}, sum
	var out lockedLog
	r := newRoundRunner(t, f, withLogger(hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})))
	for i := range 3 {
		// Rounds without Nomad's scheduler catching up: no schedule.
		r.clock = t0.Add(time.Duration(i) * time.Second)
		if _, err := r.c.reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := out.lines("preempt"); len(got) > 0 {
			t.Fatalf("round %d preempted with two GPUs free: %q", i, got)
		}
	}
	// Nomad gets to a2's evaluation first and places it on the free GPUs.
	cl.jobs["a/a2"] = a2
	cl.allocs = append(cl.allocs, apiAlloc("a-a2", a2, "n1", []string{"n1-gpu2", "n1-gpu3"}, t0.Add(2500*time.Millisecond)))
	if _, err := r.round(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	got := out.lines("preempt")
	if len(got) != 1 {
		t.Fatalf("want one preemption for b1 once its GPUs are taken, got %q", got)
	}
	for _, w := range []string{"rounds_waiting=3", "rounds_left_to_nomad=3", "left_to_nomad=3s"} {
		if !strings.Contains(got[0], w) {
			t.Errorf("lacks %s: %q", w, got[0])
		}
	}
}
