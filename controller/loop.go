package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

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
	if c.cfg().DryRun {
		c.log().Info("dry run: planning and logging only; nothing in Nomad is changed")
		c.setHealth(func(h *Health) { h.Leader = false })
		return c.lead(ctx)
	}
	if err := c.checkStateNamespace(ctx); err != nil {
		return err
	}
	return c.election.run(ctx, c.lead)
}

// follow reads the cluster once into the cache, then keeps it current from
// the event stream (watch), until ctx ends.
func (c *Controller) follow(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		if _, err := c.obs.observe(ctx, c.now(), false); err == nil {
			break
		} else if ctx.Err() == nil {
			c.log().Warn("read the cluster", "error", err)
		}
		if !sleepCtx(ctx, backoff(attempt, c.cfg().MaxBackoff)) {
			return
		}
	}
	c.watch(ctx)
}

// checkStateNamespace fails when the state namespace does not exist: the
// controller does not create it (its token needs no right to), and writing
// state anywhere a tenant can write would let tenants steer it.
func (c *Controller) checkStateNamespace(ctx context.Context) error {
	ns := c.cfg().StateNamespace
	ctx, cancel := context.WithTimeout(ctx, c.cfg().CallTimeout)
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
		c.log().Warn("cannot check the state namespace", "namespace", ns, "error", err)
	}
	return nil
}

// notifyShutdownWait bounds how long the end of a lead term waits for
// webhook messages being sent, and then for marking them sent.
const notifyShutdownWait = 3 * time.Second

// lead is the control loop of the leader.
func (c *Controller) lead(ctx context.Context) error {
	c.election.phases.termStarted(time.Now())
	c.setHealth(func(h *Health) { h.Leader = !c.cfg().DryRun })
	c.metrics.leader.Set(1)
	c.drains.planned = nil // what another leader saw meanwhile is not known
	c.newTerm()            // another leader may have saved fair-share usage meanwhile
	defer c.metrics.stepDown()
	defer c.setHealth(func(h *Health) { h.Leader = false })

	if loaded, err := c.loadTerm(ctx); !loaded {
		return err
	}

	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	go c.sampler.pollStats(streamCtx)
	go c.drains.pollWritten(streamCtx, c.cfg().WrittenPoll)
	if c.notices.notifier != nil {
		// Messages go out only in a lead term; those not sent by its end
		// stay in the states for the next leader.
		stopNotify := c.notices.notifier.run(ctx)
		defer func() {
			stopNotify(notifyShutdownWait)
			fctx, cancel := context.WithTimeout(context.Background(), notifyShutdownWait)
			defer cancel()
			c.notices.flushOutbox(fctx)
		}()
	}

	resync := time.NewTicker(c.cfg().Resync)
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
			if !sleepCtx(ctx, c.cfg().Debounce) {
				return nil
			}
		case <-resync.C:
		case <-timer.C:
		}
		if failures == 0 {
			// Waiting for work is not being stuck: the round timeout
			// counts from the start of this round, or of the first of a
			// run of failed ones (stepdown.go).
			c.election.roundFinished()
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
		var next time.Duration
		next, failures = c.nextRound(wake, err, failures)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// loadTerm reads every state at the start of a lead term, retrying
// until it can; loaded is false when the term ends instead (err: a newer
// controller's states were found).
func (c *Controller) loadTerm(ctx context.Context) (loaded bool, err error) {
	for attempt := 0; ; attempt++ {
		err := c.loadStates(ctx)
		if err == nil {
			return true, nil
		}
		if errors.Is(err, errNewerState) {
			return false, c.refuseNewer(err)
		}
		c.log().Error("load controller state", "error", err)
		if !sleepCtx(ctx, backoff(attempt, c.cfg().MaxBackoff)) {
			return false, nil
		}
	}
}

// nextRound is how long after a round the next one starts: at the
// resync, or sooner when something is due (wake); after a failed round,
// after a backoff that grows with the run of failures. It returns the
// run of failures as this round leaves it.
func (c *Controller) nextRound(wake time.Time, err error, failures int) (time.Duration, int) {
	next := c.cfg().Resync
	if err != nil {
		c.metrics.roundEnded(err, 0)
		failures++
		next = backoff(failures-1, c.cfg().MaxBackoff)
		c.log().Error("control round failed; retrying", "error", err, "retry_in", next)
		c.setHealth(func(h *Health) { h.LastError = err.Error() })
		// Drop events that arrived meanwhile: the retry reads everything
		// afresh, so an outage ends in one round, not a burst.
		select {
		case <-c.trigger:
		default:
		}
		return next, failures
	}
	c.election.roundFinished()
	if !wake.IsZero() {
		if d := time.Until(wake); d < next {
			next = max(d, 0)
		}
	}
	return next, 0
}

// reconcile is one control round, in phases (phases.go): observe what
// Nomad shows; recover what is due from earlier rounds and from people
// (requests, drains, holds); plan; act on the plan; publish what the
// round leaves (records, status, outbox, metrics). A dry run's phases
// change nothing (dryPhases). It returns when the next round is due at
// the latest.
func (c *Controller) reconcile(ctx context.Context) (wake time.Time, err error) {
	start := time.Now()
	timer := c.election.phases.start() // nil where no term runs
	c.latency.spans.begin(start)
	defer func() { timer.log(c.log(), err); c.latency.spans.end(time.Now()) }()
	if c.reload {
		if err := c.loadStates(ctx); err != nil {
			return time.Time{}, err
		}
		timer.done("load")
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
	obs, err := c.observed(ctx, pol, following && !c.settled(ctx), false)
	if err != nil {
		return time.Time{}, err
	}
	c.resolveStates(obs)
	timer.done("observe")
	c.latency.spans.observed = time.Now()
	if timer != nil {
		timer.observed(c.obs.lastCost())
	}
	r := newRound(obs.At, obs, c.states())
	phases := c.phases()
	defer func() { phases.ended(r); c.unsettled = max(c.unsettled, r.written) }() // r as it ends
	r.notePressure(pressureSince)
	r.notePressure(obs.NewPressure)
	if r, err = phases.recover(ctx, r, pol, following); err != nil {
		timer.count(r)
		return time.Time{}, err
	}
	timer.done("recover")
	c.latency.spans.recovered = time.Now()
	snap := c.planRound(ctx, r, pol, eng)
	timer.done("plan")
	c.latency.spans.planned = time.Now()
	phases.act(ctx, r, pol)
	timer.done("act")
	// New work blocked while this round ran waits for its end: what of
	// publishing can wait, waits for the next round instead (publishdefer.go).
	r.pressed = c.pressurePending()
	c.drains.planned = r.alive
	c.latency.prune(r)
	c.latency.noteWaits(r)
	phases.publish(ctx, r, pol)
	wake = c.roundEnded(r, snap, pol, start)
	timer.done("publish")
	timer.count(r)
	return wake, nil
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
	for k, st := range c.states() {
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
