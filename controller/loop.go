package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// The control loop: lead while holding the lock, and one round at a time:
// observe, finish what is due, plan, act, record.

// Run acts while this controller holds the leader lock, and waits for it
// otherwise, until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	// Every copy follows the cluster, leader or not, so that a new leader
	// plans on a warm cache at once: a cold start reads every job's spec
	// one by one.
	go c.follow(ctx)
	go c.watchSystemPreemption(ctx)
	if c.cfg.DryRun {
		c.log.Info("dry run: planning and logging only; nothing in Nomad is changed")
		c.setHealth(func(h *Health) { h.Leader = false })
		return c.lead(ctx)
	}
	if err := c.checkStateNamespace(ctx); err != nil {
		return err
	}
	if c.cfg.Consul != nil {
		return c.electConsul(ctx, c.lead)
	}
	if c.cfg.Election == ElectionLease {
		return c.electLease(ctx, c.lead)
	}
	return c.elect(ctx, c.lead)
}

// follow reads the cluster once into the cache, then keeps it current from
// the event stream (watch), until ctx ends.
func (c *Controller) follow(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		if _, err := c.obs.observe(ctx, c.now(), false); err == nil {
			break
		} else if ctx.Err() == nil {
			c.log.Warn("read the cluster", "error", err)
		}
		if !sleepCtx(ctx, backoff(attempt, c.cfg.MaxBackoff)) {
			return
		}
	}
	c.watch(ctx)
}

// checkStateNamespace fails when the state namespace does not exist: the
// controller does not create it (its token needs no right to), and writing
// state anywhere a tenant can write would let tenants steer it.
func (c *Controller) checkStateNamespace(ctx context.Context) error {
	ns := c.cfg.StateNamespace
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	_, _, err := c.client.Namespaces().Info(ns, (&api.QueryOptions{}).WithContext(ctx))
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound || err != nil && strings.Contains(err.Error(), "not found") {
		return fmt.Errorf("the state namespace %q does not exist: create it for Steward alone "+
			"(nomad namespace apply -description \"Steward's state\" %s) and give no tenant's token rights there; "+
			"or name another with -state-namespace", ns, ns)
	}
	if err != nil {
		// Nomad may be down for now: the control loop retries its reads.
		c.log.Warn("cannot check the state namespace", "namespace", ns, "error", err)
	}
	return nil
}

// notifyShutdownWait bounds how long the end of a lead term waits for
// webhook messages being sent, and then for marking them sent.
const notifyShutdownWait = 3 * time.Second

// lead is the control loop of the leader.
func (c *Controller) lead(ctx context.Context) error {
	c.setHealth(func(h *Health) { h.Leader = !c.cfg.DryRun })
	c.metrics.leader.Set(1)
	c.planned = nil       // what another leader saw meanwhile is not known
	c.fair.loaded = false // another leader may have saved usage meanwhile
	defer c.metrics.stepDown()
	defer c.setHealth(func(h *Health) { h.Leader = false })

	for attempt := 0; ; attempt++ {
		err := c.loadStates(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, errNewerState) {
			return c.refuseNewer(err)
		}
		c.log.Error("load controller state", "error", err)
		if !sleepCtx(ctx, backoff(attempt, c.cfg.MaxBackoff)) {
			return nil
		}
	}

	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	go c.pollStats(streamCtx)
	go c.pollWritten(streamCtx, c.cfg.WrittenPoll)
	if c.notifier != nil {
		// Messages go out only in a lead term; those not sent by its end
		// stay in the states for the next leader.
		stopNotify := c.notifier.run(ctx)
		defer func() {
			stopNotify(notifyShutdownWait)
			fctx, cancel := context.WithTimeout(context.Background(), notifyShutdownWait)
			defer cancel()
			c.flushOutbox(fctx)
		}()
	}

	resync := time.NewTicker(c.cfg.Resync)
	defer resync.Stop()
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.trigger:
			// Gather the rest of a burst of events into one round.
			if !sleepCtx(ctx, c.cfg.Debounce) {
				return nil
			}
		case <-resync.C:
		case <-timer.C:
		}
		if failures == 0 {
			// Waiting for work is not being stuck: the round timeout
			// counts from the start of this round, or of the first of a
			// run of failed ones (stepdown.go).
			c.roundFinished()
		}
		wake, err := c.reconcile(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errNewerState) {
			// A newer controller wrote a state since this term began
			// (a check-and-set refused, every state read again).
			return c.refuseNewer(err)
		}
		next := c.cfg.Resync
		if err != nil {
			c.metrics.roundEnded(err, 0)
			failures++
			next = backoff(failures-1, c.cfg.MaxBackoff)
			c.log.Error("control round failed; retrying", "error", err, "retry_in", next)
			c.setHealth(func(h *Health) { h.LastError = err.Error() })
			// Drop events that arrived meanwhile: the retry reads
			// everything afresh, so an outage ends in one round, not a
			// burst.
			select {
			case <-c.trigger:
			default:
			}
		} else {
			failures = 0
			c.roundFinished()
			if !wake.IsZero() {
				if d := time.Until(wake); d < next {
					next = max(d, 0)
				}
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// reconcile is one control round: observe, finish what is due, plan, act,
// record. It returns when the next round is due at the latest.
func (c *Controller) reconcile(ctx context.Context) (time.Time, error) {
	start := time.Now()
	if c.reload {
		if err := c.loadStates(ctx); err != nil {
			return time.Time{}, err
		}
	}
	pressureSince := c.takePressure()
	pol, eng := c.engineNow()
	following := c.obs.cache.follows()
	// Read your own writes: an earlier round's writes may not be back from
	// the event stream yet (a round can follow the last within
	// milliseconds). Planning on the cache without them would decide the
	// same again. Wait for them (settle), or read in full. What Nomad then
	// does with them arrives later, and is read for what it is
	// (buildSnapshot: leaving, unseenResumed).
	stale := following && !c.settled(ctx)
	obs, err := c.obs.observe(ctx, c.now(), stale)
	c.metrics.observed(c.obs.stats)
	if err != nil {
		c.metrics.nomadErrors.Inc()
		return time.Time{}, err
	}
	c.admitGuarded(obs)
	c.usage.setObservation(obs, statsTargets(pol, obs))
	c.resolveStates(obs)
	r := newRound(obs.At, obs, c.states)
	defer func() { c.unsettled = max(c.unsettled, r.written) }() // r as it ends
	if !c.cfg.DryRun {
		// The drains signalled by now, as this round leaves them: their
		// victims' checkpoint-written files are read until the next.
		defer func() { c.written.setTargets(writtenTargets(c.sortedStates(), r.obs)) }()
	}
	r.pressureSince = pressureSince
	if !obs.NewPressure.IsZero() && (r.pressureSince.IsZero() || obs.NewPressure.Before(r.pressureSince)) {
		r.pressureSince = obs.NewPressure
	}
	if !c.cfg.DryRun {
		c.applyRequests(ctx, r)
		c.drainNodes(ctx, r)
		c.syncHolds(ctx, r)
		c.guardPools(ctx, r)
		c.finishDrains(ctx, r)
		if r.failed > 0 {
			c.metrics.nomadErrors.Add(float64(r.failed))
		}
		if r.acted > 0 {
			// Holds and stops just changed the cluster: plan on what
			// Nomad shows with them, not on what it showed before them.
			// The event stream brings them within milliseconds; without it
			// (or if it is late) the cluster is read again, from the
			// leader.
			c.unsettled = max(c.unsettled, r.written)
			full := !following || !c.settled(ctx)
			obs, err = c.obs.observe(ctx, c.now(), full)
			c.metrics.observed(c.obs.stats)
			if err != nil {
				c.metrics.nomadErrors.Inc()
				return time.Time{}, err
			}
			c.admitGuarded(obs)
			c.usage.setObservation(obs, statsTargets(pol, obs))
			prev := r
			r = newRound(obs.At, obs, c.states)
			r.pressureSince, r.failed, r.wakeAt, r.acted = prev.pressureSince, prev.failed, prev.wakeAt, prev.acted
			if !obs.NewPressure.IsZero() && (r.pressureSince.IsZero() || obs.NewPressure.Before(r.pressureSince)) {
				r.pressureSince = obs.NewPressure
			}
		}
	}

	if c.log.IsDebug() {
		c.log.Debug("round observed", "full_reads", c.obs.stats.fullReads, "cache_index", c.obs.cache.at(), "gpus", obs.describe())
	}
	c.trackWaiting(r)
	c.checkJobMeta(pol, obs)
	if !c.cfg.DryRun {
		c.lifecycleNotices(ctx, r, pol)
	}
	snap := buildSnapshot(pol, obs, c.states, c.usage.samples())
	c.fairShareUsage(ctx, pol, snap, r.now)
	planStart := time.Now()
	plan := eng.Plan(snap, r.now)
	c.fair.hold(plan.Tenants)
	c.metrics.planSeconds.Observe(time.Since(planStart).Seconds())
	c.keepCheckBase(snap, obs.Nodes, r.now)
	r.plan = plan
	c.forecastRound(r, pol, eng, snap)
	for _, s := range plan.Skipped {
		c.log.Warn("engine skipped snapshot item", "item", s.Item, "reason", s.Reason)
	}
	if !c.cfg.DryRun {
		for _, d := range c.unmark(ctx, r, plan.Unmarked) {
			c.remember(d)
		}
	}
	for _, a := range plan.Actions {
		kind, event := string(a.Kind), eventOf(a)
		if a.Kind == engine.Preempt && a.Reason.Rule == engine.RuleLimit && c.neverAdmitted(a.Allocs) {
			// Placed by Nomad over its tenant's limit, never admitted:
			// a hold (execute).
			kind, event = string(engine.Hold), policy.NotifyHold
		}
		d := Decision{At: r.now, Kind: kind, Job: a.Job.String(), Group: a.Group, GPUs: a.GPUs,
			Rule: string(a.Reason.Rule), Reason: a.Reason.Message, DryRun: c.cfg.DryRun}
		if c.cfg.DryRun {
			c.log.Info("would "+string(a.Kind), "job", a.Job.String(), "group", a.Group, "gpus", a.GPUs, "reason", a.Reason.String())
			c.remember(d)
			continue
		}
		if a.Kind == engine.Resume && a.AfterVictims && r.beneficiaryDraining(a.Job) {
			continue
		}
		if c.backedOff(r.now, jobKey{a.Job.Namespace, a.Job.ID}, writeOf(a)) {
			// Nomad refused this write to the job recently: it waits out
			// its backoff, in the job's record (backoff.go).
			continue
		}
		fields := []any{"job", clip(a.Job.String(), quoteMax), "group", a.Group, "gpus", a.GPUs, "reason", clip(a.Reason.String(), reasonMax)}
		if start := c.latencyStart(r, a); !start.IsZero() {
			// The first call on a victim follows right after this line.
			latency := max(time.Since(start), 0) // Nomad's clock may run ahead
			c.metrics.decisionLatency.Observe(latency.Seconds())
			fields = append(fields, "decision_latency", latency)
		}
		c.log.Info(string(a.Kind), fields...)
		k := jobKey{a.Job.Namespace, a.Job.ID}
		r.pending = noticeFor(pol, r.obs.Jobs[k], event, kind, a.Group, a.GPUs, a.Reason, r.now)
		r.attached = nil
		err := c.execute(ctx, r, a)
		r.pending = nil
		if errors.Is(err, errRerun) || refusedOrBackedOff(err) {
			// Refused, its reason in the job's record (refuseRerun,
			// backoff.go): not a failure to retry at once, nor an action
			// taken, nor a decision for the status to quote.
			continue
		}
		if err != nil {
			if st := c.states[k]; st != nil {
				c.dropUnsaved(st, r.attached)
			}
			if !errors.Is(err, errStateTooBig) { // the job's own, in its record: no retry writes it
				r.failed++
				c.metrics.nomadErrors.Inc()
			}
			d.Error = err.Error()
			c.log.Error("action failed", "kind", a.Kind, "job", a.Job.String(), "error", err)
		} else {
			r.acted++
			c.metrics.action(a, pol)
		}
		c.remember(d)
	}
	c.planned = r.alive
	c.pruneLatencyMeasured(r)
	if !c.cfg.DryRun {
		for _, w := range plan.Warnings {
			c.warnIdle(ctx, r, pol, w)
		}
		c.holdUnadmitted(ctx, r)
		c.syncPlaceholders(ctx, r)
		c.pruneIdleWarnings(r, pol)
		c.sendOutbox(pol)
		c.flush(ctx, r)
		c.pruneRefusedWrites(r)
		c.writeRecords(ctx, r, pol)
		if pol.Preemption.FairShareHalfLife > 0 {
			c.saveFairShare(ctx, r.now)
		}
	}
	if !c.cfg.DryRun {
		c.writeStatus(ctx, r, pol)
	}
	c.metrics.observePlan(r, snap, pol, c.states)
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
		c.log.Warn("some Nomad calls failed in this round; retrying", "failed", r.failed)
		c.setHealth(func(h *Health) { h.LastError = fmt.Sprintf("%d Nomad calls failed", r.failed) })
		r.wake(r.now.Add(2 * time.Second))
	}
	return r.wakeAt, nil
}

// settled waits until the cache holds Steward's last writes
// (clusterCache.settle) and reports whether it does. Either way they are
// forgotten: past the timeout the round reads the cluster in full instead,
// which holds them.
func (c *Controller) settled(ctx context.Context) bool {
	if c.unsettled == 0 {
		return true
	}
	index := c.unsettled
	c.unsettled = 0
	if !c.obs.cache.settle(ctx, index, settleTimeout) {
		c.metrics.settleTimeouts.Inc()
		return false
	}
	return true
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// PlanOnce reads the cluster and the controller's saved state and returns
// what the controller would do now, changing nothing (steward plan).
func (c *Controller) PlanOnce(ctx context.Context) (*engine.Plan, error) {
	_, plan, err := c.CaptureOnce(ctx)
	return plan, err
}

// resumeInFlight reports whether a group Steward resumed lately (within
// resumeInFlight) is not placed in full yet: Nomad shows fewer of its
// allocations than its count. Once placed, its wait is over at once: kept
// for resumeInFlight, a preemption in that time held it again as waiting
// since before it ran (issue 28: b1, running 17 s, was preempted and
// promoted at once for "waiting 17s", and took its GPU back 240 ms later).
func (r *round) resumeInFlight(k jobKey, st *JobState, g string) bool {
	if st.resumed == nil || r.now.Sub(st.resumed[g]) > resumeInFlight {
		return false
	}
	job := r.obs.Jobs[k]
	if job == nil {
		return true // as before: Nomad's word once resumeInFlight passes
	}
	// Placed in full, or (a batch group) partly completed meanwhile:
	// Nomad shows it all, and it waits no more.
	spec, ok := job.Groups[g]
	return !ok || r.live[k][g]+r.obs.Done[k][g] < spec.Count
}

// trackWaiting remembers since when each group has waited for GPUs, and
// forgets groups that wait no more.
func (c *Controller) trackWaiting(r *round) {
	for k, groups := range r.obs.Queued {
		for g, q := range groups {
			if q.Count > 0 {
				c.state(k).setWaiting(g, q.Since)
			}
		}
	}
	for k, st := range c.states {
		for g := range st.Waiting {
			// Resumed and not yet seen by Nomad: it waits still, in its
			// place (unseenResumed).
			if q := r.obs.Queued[k][g]; q.Count == 0 && !st.holds(g) && !r.resumeInFlight(k, st, g) {
				c.observeWaitEnd(r, k, g, st.Waiting[g])
				delete(st.Waiting, g)
			}
		}
		for g := range st.Interrupted {
			// Running again (nothing of it held or queued), or gone. A
			// group resumed and not yet shown by Nomad is neither, and
			// keeps its place among preempted work (resume_order) until
			// Nomad places it.
			if q := r.obs.Queued[k][g]; q.Count == 0 && !st.holds(g) && !r.resumeInFlight(k, st, g) {
				delete(st.Interrupted, g)
			}
		}
	}
}
