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

// latencyStart is when the latency of a's decision starts (zero: not
// measured), and notes the beneficiary's blocking as measured.
func (c *Controller) latencyStart(r *round, a engine.Action) time.Time {
	if a.Kind != engine.Preempt && a.Kind != engine.IdleStop || r.latencyTaken {
		return time.Time{}
	}
	if a.For != nil {
		k := jobKey{a.For.Namespace, a.For.ID}
		if q, ok := r.obs.Queued[k][a.ForGroup]; ok && !q.Since.IsZero() && !c.latencyMeasured[k].Equal(q.Since) {
			if c.latencyMeasured == nil {
				c.latencyMeasured = map[jobKey]time.Time{}
			}
			c.latencyMeasured[k] = q.Since
			r.latencyTaken = true
			return q.Since
		}
	}
	if !r.pressureSince.IsZero() {
		r.latencyTaken = true
	}
	return r.pressureSince
}

// pruneLatencyMeasured forgets the blockings of work no longer queued.
func (c *Controller) pruneLatencyMeasured(r *round) {
	for k := range c.latencyMeasured {
		if _, queued := r.obs.Queued[k]; !queued {
			delete(c.latencyMeasured, k)
		}
	}
}
