package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

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
		want     []time.Time // per action
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
		r := newRound(t0, &Observation{Queued: cl.queued}, nil)
		r.pressureSince = cl.pressure
		for i, a := range cl.actions {
			if got := c.latency.start(r, a); !got.Equal(cl.want[i]) {
				t.Errorf("%s: action %d starts at %v, want %v", cl.name, i, got, cl.want[i])
			}
		}
		c.latency.prune(r)
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
	cases := []struct {
		name  string
		until time.Duration // the decision's round, after t0
		plans int           // rounds before it that saw the work and left it waiting
		want  []string
	}{
		{name: "decided by the first round that saw it", until: 0,
			want: []string{"seen_after=3s", "rounds_waiting=0"}},
		{name: "left waiting by two rounds first", until: 4 * time.Second, plans: 2,
			want: []string{"seen_after=3s", "planned_after=4s", "rounds_waiting=2", `waited_for="draining: GPUs are being freed for it"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l decisionLatency
			for i := range tc.plans {
				r := newRound(t0.Add(time.Duration(i)*time.Second), &Observation{Queued: queued}, nil)
				r.plan = waiting
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
		})
	}
}
