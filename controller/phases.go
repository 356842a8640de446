package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// One control round's phases (reconcile): observe and plan are the same
// for a leader and a dry run; recover, act and publish change Nomad and
// Steward's state, and are the leader's alone (leaderPhases). A dry run
// (steward plan, -dry-run) says what it would do and changes nothing
// (dryPhases); its Nomad refuses every write besides (dryNomad).
type roundPhases interface {
	// recover finishes what is due before planning: people's requests,
	// node drains, holds, pool guards, drains of preempted work; and,
	// when any of it changed the cluster, observes it again. It returns
	// the round to plan on.
	recover(ctx context.Context, r *round, pol *policy.Policy, following bool) (*round, error)
	// notices queues what people hear of their jobs before planning
	// (lifecycle.go).
	notices(ctx context.Context, r *round, pol *policy.Policy)
	// act carries the plan out (r.plan).
	act(ctx context.Context, r *round, pol *policy.Policy)
	// publish writes what the round leaves: idle warnings, holds and
	// placeholders, the outbox, states, records, fair share, status.
	publish(ctx context.Context, r *round, pol *policy.Policy)
	// ended runs as the round ends, failed or not.
	ended(r *round)
}

// phases are the leader's, or a dry run's.
func (c *Controller) phases() roundPhases {
	if c.cfg().DryRun {
		return dryPhases{c}
	}
	return leaderPhases{c}
}

// observed reads the cluster (in full when full, or when the cache is
// cold), admits what the pool guards let in, and notes the GPUs' usage.
// again: the round's second read, after its own writes (reobserve: no
// resync).
func (c *Controller) observed(ctx context.Context, pol *policy.Policy, full, again bool) (*Observation, error) {
	read := c.obs.observe
	if again {
		read = c.obs.reobserve
	}
	obs, err := read(ctx, c.now(), full)
	c.metrics.observed(c.obs.stats)
	if err != nil {
		c.metrics.nomadErrors.Inc()
		return nil, err
	}
	c.admitGuarded(obs)
	c.usage.setObservation(obs, statsTargets(pol, obs))
	c.usage.keepFor(sampleReads(pol, obs, c.states()))
	return obs, nil
}

// notePressure keeps the earliest event that started this round's
// pressure (zero: none), which decision latency counts from.
func (r *round) notePressure(at time.Time) {
	if !at.IsZero() && (r.pressureSince.IsZero() || at.Before(r.pressureSince)) {
		r.pressureSince = at
	}
}

// planRound notes who waits, reads the jobs' meta, and plans on a
// snapshot of the round (r.plan); it returns the snapshot.
func (c *Controller) planRound(ctx context.Context, r *round, pol *policy.Policy, eng *engine.Engine) *engine.Snapshot {
	obs := r.obs
	if c.log().IsDebug() {
		c.log().Debug("round observed", "full_reads", c.obs.stats.fullReads, "cache_index", c.obs.cache.at(), "gpus", obs.describe())
	}
	c.trackWaiting(r)
	c.checkJobMeta(pol, obs)
	c.phases().notices(ctx, r, pol)
	snap := buildSnapshot(pol, obs, c.states(), c.usage.samples(pol))
	c.fairShareUsage(ctx, pol, snap, r.now)
	planStart := time.Now()
	plan := eng.Plan(snap, r.now)
	c.holdBorrowed(plan.Tenants)
	c.metrics.planSeconds.Observe(time.Since(planStart).Seconds())
	c.keepCheckBase(snap, obs.Nodes, r.now)
	r.plan = plan
	c.pub.queue.forecastRound(r, pol, eng, snap)
	for _, s := range plan.Skipped {
		c.log().Warn("engine skipped snapshot item", "item", s.Item, "reason", s.Reason)
	}
	return snap
}

// roundEnded counts the round in the metrics and the health, and returns
// when the next is due at the latest.
func (c *Controller) roundEnded(r *round, snap *engine.Snapshot, pol *policy.Policy, start time.Time) time.Time {
	c.metrics.observePlan(r, snap, pol, c.states())
	c.metrics.reconcileSeconds.Observe(time.Since(start).Seconds())
	c.metrics.roundEnded(nil, r.failed)
	if r.failed == 0 {
		c.setHealth(func(h *Health) { h.LastReconcile = r.now; h.LastError = "" })
	}
	if r.acted > 0 {
		// What was done changes what Nomad shows: look again soon rather
		// than waiting for the events.
		r.wake(r.now.Add(time.Second))
	}
	if r.failed > 0 {
		// Failed actions are retried on a fresh read soon; only a failed
		// read (an outage) backs the whole loop off.
		c.log().Warn("some Nomad calls failed in this round; retrying", "failed", r.failed)
		c.setHealth(func(h *Health) { h.LastError = fmt.Sprintf("%d Nomad calls failed", r.failed) })
		r.wake(r.now.Add(2 * time.Second))
	}
	return r.wakeAt
}

// decisionOf is an action as the status shows it. A preemption of work
// Nomad placed over its tenant's limit, never admitted, is a hold
// (execute); event is what its notice is of.
func (c *Controller) decisionOf(r *round, a engine.Action, dryRun bool) (d Decision, event string) {
	kind, event := string(a.Kind), eventOf(a)
	if a.Kind == engine.Preempt && a.Reason.Rule == engine.RuleLimit && c.drains.neverAdmitted(a.Allocs) {
		kind, event = string(engine.Hold), policy.NotifyHold
	}
	return Decision{At: r.now, Kind: kind, Job: a.Job.String(), Group: a.Group, GPUs: a.GPUs,
		Rule: string(a.Reason.Rule), Reason: a.Reason.Message, DryRun: dryRun}, event
}

// dryPhases are a dry run's: nothing is recovered, acted on or published;
// each action is logged as what would be done, and kept for the status.
type dryPhases struct{ c *Controller }

func (dryPhases) recover(_ context.Context, r *round, _ *policy.Policy, _ bool) (*round, error) {
	return r, nil
}

func (dryPhases) notices(context.Context, *round, *policy.Policy) {}

func (p dryPhases) act(_ context.Context, r *round, _ *policy.Policy) {
	for _, a := range r.plan.Actions {
		d, _ := p.c.decisionOf(r, a, true)
		p.c.log().Info("would "+string(a.Kind), "job", a.Job.String(), "group", a.Group, "gpus", a.GPUs, "reason", a.Reason.String())
		p.c.decisions.add(d)
	}
}

func (dryPhases) publish(context.Context, *round, *policy.Policy) {}

func (dryPhases) ended(*round) {}
