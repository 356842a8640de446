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
}

// start is when the latency of a's decision starts (zero: not measured),
// and notes the beneficiary's blocking as measured.
func (l *decisionLatency) start(r *round, a engine.Action) time.Time {
	if a.Kind != engine.Preempt && a.Kind != engine.IdleStop || r.latencyTaken {
		return time.Time{}
	}
	if a.For != nil {
		k := jobKey{a.For.Namespace, a.For.ID}
		if q, ok := r.obs.Queued[k][a.ForGroup]; ok && !q.Since.IsZero() && !l.measured[k].Equal(q.Since) {
			if l.measured == nil {
				l.measured = map[jobKey]time.Time{}
			}
			l.measured[k] = q.Since
			r.latencyTaken = true
			return q.Since
		}
	}
	if !r.pressureSince.IsZero() {
		r.latencyTaken = true
	}
	return r.pressureSince
}

// prune forgets the blockings of work no longer queued.
func (l *decisionLatency) prune(r *round) {
	for k := range l.measured {
		if _, queued := r.obs.Queued[k]; !queued {
			delete(l.measured, k)
		}
	}
}
