package controller

import (
	"testing"
	"time"

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
		{name: "blocked again: measured from the new blocking, once a round",
			queued: queued(blockedAgain), actions: []engine.Action{preempt, preempt}, want: []time.Time{blockedAgain, {}}},
		{name: "work Nomad did not block: from the round's pressure",
			pressure: woken, actions: []engine.Action{{Kind: engine.Preempt, For: &engine.JobRef{Namespace: "ml", ID: "held"}}}, want: []time.Time{woken}},
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
