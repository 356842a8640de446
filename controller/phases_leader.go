package controller

import (
	"context"
	"errors"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// leaderPhases are the leader's: it recovers, acts and publishes.
type leaderPhases struct{ c *Controller }

func (p leaderPhases) recover(ctx context.Context, r *round, pol *policy.Policy, following bool) (*round, error) {
	c := p.c
	t := time.Now()
	c.applyRequests(ctx, r)
	c.drainNodes(ctx, r)
	c.syncHolds(ctx, r)
	c.guardPools(ctx, r)
	c.election.phases.current.part("recover_holds", t)
	t = time.Now()
	c.drains.finishDrains(ctx, r)
	c.election.phases.current.part("recover_drains", t)
	if r.failed > 0 {
		c.metrics.nomadErrors.Add(float64(r.failed))
	}
	if r.acted == 0 {
		return r, nil
	}
	// Holds and stops just changed the cluster: plan on what Nomad shows
	// with them, not on what it showed before them. The event stream
	// brings them within milliseconds; without it (or if it is late) the
	// cluster is read again, from the leader. A resync due meanwhile
	// waits for the next round (observer.reobserve): with the stream, this
	// read is of the cache, and brings the work that blocked meanwhile
	// into this round's plan.
	c.unsettled = max(c.unsettled, r.written)
	t = time.Now()
	full := !following || !c.settled(ctx)
	obs, err := c.observed(ctx, pol, full, true)
	c.election.phases.current.part("recover_observe", t)
	if err != nil {
		return r, err
	}
	next := newRound(obs.At, obs, c.states())
	next.failed, next.wakeAt, next.acted = r.failed, r.wakeAt, r.acted
	next.notePressure(r.pressureSince)
	next.notePressure(obs.NewPressure)
	return next, nil
}

func (p leaderPhases) notices(ctx context.Context, r *round, pol *policy.Policy) {
	p.c.lifecycleNotices(ctx, r, pol)
}

func (p leaderPhases) act(ctx context.Context, r *round, pol *policy.Policy) {
	for _, d := range p.c.unmark(ctx, r, r.plan.Unmarked) {
		p.c.decisions.add(d)
	}
	// Different jobs' actions at once (actplan.go); the decisions kept in
	// plan order, as one after another kept them.
	decided := make([]*Decision, len(r.plan.Actions))
	actConcurrently(ctx, r.plan.Actions, p.c.cfg().ActInFlight, func(ctx context.Context, i int) {
		decided[i] = p.actOn(ctx, r, pol, r.plan.Actions[i])
	})
	for _, d := range decided {
		if d != nil {
			p.c.decisions.add(*d)
		}
	}
}

// actOn carries out one action of the plan, unless it waits (for its
// victims, or out of a backoff), and returns its decision for the status
// (nil when it did nothing).
func (p leaderPhases) actOn(ctx context.Context, r *round, pol *policy.Policy, a engine.Action) *Decision {
	c := p.c
	d, event := c.decisionOf(r, a, false)
	if a.Kind == engine.Resume && a.AfterVictims && r.beneficiaryDraining(a.Job) {
		return nil
	}
	k := jobKey{a.Job.Namespace, a.Job.ID}
	if c.writes.backedOff(r.now, k, writeOf(a)) {
		// Nomad refused this write to the job recently: it waits out its
		// backoff, in the job's record (backoff.go).
		return nil
	}
	fields := []any{"job", clip(a.Job.String(), quoteMax), "group", a.Group, "gpus", a.GPUs, "reason", clip(a.Reason.String(), reasonMax)}
	var split []any
	if start := c.latency.start(r, a); !start.IsZero() {
		// The first call on a victim follows right after this line.
		latency := max(time.Since(start), 0) // Nomad's clock may run ahead
		c.metrics.decisionLatency.Observe(latency.Seconds())
		fields = append(fields, "decision_latency", latency)
		if a.For != nil {
			fields = append(fields, c.latency.waitFields(jobKey{a.For.Namespace, a.For.ID}, start, r.now)...)
		}
		if latency >= slowDecision {
			split = c.latency.splitFields(r, a, start, latency)
		}
	}
	c.log().Info(string(a.Kind), fields...)
	if split != nil {
		c.log().Info("decision split", split...)
	}
	// The action's message, by job: its own until its save takes it.
	r.pending[k] = noticeFor(pol, r.obs.Jobs[k], event, d.Kind, a.Group, a.GPUs, a.Reason, r.now)
	delete(r.attached, k)
	err := c.execute(ctx, r, a)
	delete(r.pending, k)
	attached := r.attached[k]
	delete(r.attached, k)
	if errors.Is(err, errRerun) || refusedOrBackedOff(err) {
		// Refused, its reason in the job's record (refuseRerun,
		// backoff.go): not a failure to retry at once, nor an action
		// taken, nor a decision for the status to quote.
		return nil
	}
	if err != nil {
		if st := c.states()[k]; st != nil {
			c.notices.dropUnsaved(st, attached)
		}
		if !errors.Is(err, errStateTooBig) { // the job's own, in its record: no retry writes it
			r.failed++
			c.metrics.nomadErrors.Inc()
		}
		d.Error = err.Error()
		c.log().Error("action failed", "kind", a.Kind, "job", a.Job.String(), "error", err)
	} else {
		r.acted++
		c.metrics.action(a, pol)
	}
	return &d
}

func (p leaderPhases) publish(ctx context.Context, r *round, pol *policy.Policy) {
	c := p.c
	t := time.Now()
	for _, w := range r.plan.Warnings {
		c.warnIdle(ctx, r, pol, w)
	}
	c.holdUnadmitted(ctx, r)
	c.syncPlaceholders(ctx, r)
	c.pruneIdleWarnings(r, pol)
	c.notices.sendOutbox(pol)
	c.flush(ctx, r)
	c.writes.pruneRefusedWrites(r)
	c.election.phases.current.part("publish_states", t)
	if c.pub.deferPublish(r) {
		return
	}
	t = time.Now()
	c.pub.writeRecords(ctx, r, pol)
	if pol.Preemption.FairShareHalfLife > 0 {
		c.saveFairShare(ctx, r.now)
	}
	c.pub.writeStatus(ctx, r, pol)
	c.election.phases.current.part("publish_records", t)
}

// ended: the drains signalled by now, as this round leaves them: their
// victims' checkpoint-written files are read until the next.
func (p leaderPhases) ended(r *round) {
	p.c.drains.written.setTargets(writtenTargets(p.c.sortedStates(), r.obs))
}
