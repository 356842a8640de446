package controller

import (
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// The decision latency (steward_decision_latency_seconds, the log's
// decision_latency): from the moment Nomad blocked the evaluation of the
// work a preemption is for to the controller's first call on a victim.
//
// It used to start from the pressure the round was woken by, taken by the
// first round after the event. When that round did not see the work
// queued yet (its job summary was read a moment before Nomad counted the
// queued allocation), the next round preempted with no pressure left to
// measure from, and the preemption went unmeasured (issue 36: "9
// latencies logged for 10 preemptions"). Now the start is the
// beneficiary's own blocked evaluation, measured once per blocking; the
// round's pressure stays the start for a preemption whose beneficiary
// Nomad did not block (work Steward holds itself).

// decisionLatency measures it: it owns, per job whose preemption's
// latency was measured, the blocking it was measured from (its zero value
// measures nothing yet).
type decisionLatency struct {
	measured map[jobKey]time.Time
	// waits follows each queued job from the first round that saw its
	// blocking to its decision, so that a slow decision's line says
	// where its time went (issue 33): before a round saw it (Nomad's
	// blocking, the event stream, rounds not started), or after (the
	// plan left it waiting, and why).
	waits map[jobKey]*queuedWait
	// unqueued is when each job in measured or waits was last seen out
	// of the queue: its entries are forgotten only once it has stayed
	// out for forgetUnqueued. Nomad takes work out of the queued count
	// for a moment while it re-processes an unblocked evaluation, and
	// re-blocks it as a copy with the old CreateTime; forgetting at once
	// measured that blocking again at the next preemption, from its old
	// start (issue 33: a decision counted twice, the second tens of
	// seconds long).
	unqueued map[jobKey]time.Time
	// spans: when recent rounds ran, for a slow decision's split
	// (split.go).
	spans roundSpans
}

// forgetUnqueued is how long a job stays out of the queue before its
// measured blocking and its wait are forgotten.
const forgetUnqueued = 10 * time.Minute

// queuedWait is a queued job's wait as the rounds saw it.
type queuedWait struct {
	since  time.Time // its blocking (the earliest of its groups')
	seen   time.Time // the first round that saw it queued
	rounds int       // the rounds that saw it queued
	reason string    // why the last plan that left it waiting did ("" none did)
	// placeable counts the rounds whose plan neither preempted for it
	// nor listed it as waiting: the engine counted it placeable on GPUs
	// it saw free and left it to Nomad (a demand placed on free GPUs
	// alone), while Nomad kept its evaluation blocked. lastPlaceable is
	// the last such round's time. At 250 simulated nodes on a 2-core
	// machine that was most of the tail: the server's one scheduling
	// worker had hundreds of evaluations waiting in its broker (every
	// allocation that ends unblocks all blocked evaluations of its node
	// class), and Nomad reached the work's evaluation tens of seconds
	// after its GPUs were free (issue 33).
	placeable     int
	lastPlaceable time.Time
}

// waitFields are the log fields of the wait a decision for k ends.
func (l *decisionLatency) waitFields(k jobKey, since time.Time, now time.Time) []any {
	w := l.waits[k]
	if w == nil || !w.since.Equal(since) {
		return []any{"seen_after", max(now.Sub(since), 0).Round(time.Millisecond), "rounds_waiting", 0}
	}
	f := []any{"seen_after", max(w.seen.Sub(since), 0).Round(time.Millisecond),
		"planned_after", now.Sub(w.seen).Round(time.Millisecond), "rounds_waiting", w.rounds}
	if w.reason != "" {
		f = append(f, "waited_for", w.reason)
	}
	if w.placeable > 0 {
		// The part of the latency that was Nomad's to place: from the
		// blocking to the last round that left the work to it. What
		// follows is the controller's decision (the harness reports both).
		f = append(f, "rounds_left_to_nomad", w.placeable,
			"left_to_nomad", max(w.lastPlaceable.Sub(since), 0).Round(time.Millisecond))
	}
	return f
}

// waitReasonMax bounds the reason a decision's line quotes.
const waitReasonMax = 160

// noteWaits follows the queued jobs through a round that has acted: the
// first round that saw each blocking, and why its plan left it waiting.
func (l *decisionLatency) noteWaits(r *round) {
	if l.waits == nil {
		l.waits = map[jobKey]*queuedWait{}
	}
	for k, groups := range r.obs.Queued {
		var since time.Time
		for _, q := range groups {
			if !q.Since.IsZero() && (since.IsZero() || q.Since.Before(since)) {
				since = q.Since
			}
		}
		if since.IsZero() {
			continue
		}
		w := l.waits[k]
		if w == nil || !w.since.Equal(since) {
			w = &queuedWait{since: since, seen: r.now}
			l.waits[k] = w
		}
		w.rounds++
		w.reason = ""
	}
	if r.plan == nil {
		return
	}
	for _, wt := range r.plan.Waiting {
		if w := l.waits[jobKey{wt.Job.Namespace, wt.Job.ID}]; w != nil {
			w.reason = clip(wt.Reason.String(), waitReasonMax)
		}
	}
	for k := range r.obs.Queued {
		// Queued, yet neither waiting in the plan nor decided (a decision
		// ends its wait before this): left to Nomad on free GPUs.
		if w := l.waits[k]; w != nil && w.reason == "" && !l.decided(k, w) {
			w.placeable++
			w.lastPlaceable = r.now
		}
	}
}

// decided reports whether the decision for w's blocking was taken (its
// latency measured): rounds after it do not leave the work to Nomad, they
// wait for its victims.
func (l *decisionLatency) decided(k jobKey, w *queuedWait) bool {
	return l.measured[k].Equal(w.since)
}

// start is when the latency of a's decision starts (zero: not measured),
// and notes the beneficiary's blocking as measured. Each beneficiary's
// blocking is measured once, at the first preemption for it, whichever
// round and whichever place in the round: a round that preempts for two
// jobs measures both (measuring one a round left the second to be
// measured at a later preemption for it, a victim's grace later, and
// counted that as the decision's time: issue 33). Only the round's
// pressure, the start for work Nomad did not block, is taken once a round.
func (l *decisionLatency) start(r *round, a engine.Action) time.Time {
	if a.Kind != engine.Preempt && a.Kind != engine.IdleStop {
		return time.Time{}
	}
	if a.For != nil {
		k := jobKey{a.For.Namespace, a.For.ID}
		if q, ok := r.obs.Queued[k][a.ForGroup]; ok && !q.Since.IsZero() {
			if l.measured[k].Equal(q.Since) {
				return time.Time{} // this blocking's decision was measured
			}
			if l.measured == nil {
				l.measured = map[jobKey]time.Time{}
			}
			l.measured[k] = q.Since
			return q.Since
		}
	}
	if r.pressureTaken || r.pressureSince.IsZero() {
		return time.Time{}
	}
	r.pressureTaken = true
	return r.pressureSince
}

// prune forgets the blockings of work out of the queue for
// forgetUnqueued or more.
func (l *decisionLatency) prune(r *round) {
	gone := func(k jobKey) bool {
		if _, queued := r.obs.Queued[k]; queued {
			delete(l.unqueued, k)
			return false
		}
		since, ok := l.unqueued[k]
		if !ok {
			if l.unqueued == nil {
				l.unqueued = map[jobKey]time.Time{}
			}
			l.unqueued[k] = r.now
			return false
		}
		return r.now.Sub(since) >= forgetUnqueued
	}
	for k := range l.measured {
		if gone(k) {
			delete(l.measured, k)
		}
	}
	for k := range l.waits {
		if gone(k) {
			delete(l.waits, k)
		}
	}
	for k := range l.unqueued {
		if _, kept := l.measured[k]; !kept {
			if _, waiting := l.waits[k]; !waiting {
				delete(l.unqueued, k)
			}
		}
	}
}
