package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// This file carries out the pool guard's decisions (poolguard.go): a job
// in the controller's node pool is held as any hold is (its intent in the
// job's state first, then every group scaled to 0, which stops its
// allocations wherever they run), and nothing resumes it. syncHolds lets
// an owner's change win over a hold; the guard runs after it, so a job its
// owner scaled up, or registered again in the same pool, is held again in
// the same round. Only a job its owner submitted to another pool runs
// again.

// poolHolds carries out the pool guard's holds through the actor, which
// writes each one's intent first.
type poolHolds struct {
	*actor
}

// admitGuarded puts the skipped jobs the round must see into its
// observation (admitSkipped); called on every observation of a round.
func (ac *poolHolds) admitGuarded(obs *Observation) {
	if len(ac.cfg().ControllerPools) == 0 {
		return
	}
	admitSkipped(obs, ac.cfg().ControllerPools, ac.cfg().StateNamespace, func(k jobKey) bool { return ac.states()[k] != nil })
}

// guardPools holds every job the pool guard refuses, and ends the pool
// holds of jobs it no longer refuses.
func (ac *poolHolds) guardPools(ctx context.Context, r *round) {
	if len(ac.cfg().ControllerPools) == 0 {
		return
	}
	refused := map[jobKey]bool{}
	for _, rf := range poolRefusals(r.obs, ac.cfg().ControllerPools, ac.cfg().StateNamespace) {
		refused[rf.Job] = true
		if len(rf.Hold) == 0 {
			continue // held already: nothing of it runs
		}
		if err := ac.refusePool(ctx, r, rf); err != nil && !refusedOrBackedOff(err) {
			ac.log().Error("hold a job in the controller's node pool", "job", rf.Job, "pool", rf.Pool, "error", err)
			r.failed++
		}
	}
	for _, st := range ac.sortedStates() {
		if !refused[st.key()] {
			ac.releasePoolHold(ctx, r, st)
		}
	}
}

// refusePool holds every group of a refused job with a count above 0.
func (ac *poolHolds) refusePool(ctx context.Context, r *round, rf poolRefusal) error {
	k := rf.Job
	job := r.obs.Jobs[k]
	if job == nil {
		return fmt.Errorf("hold %s: job not in the round's view", k)
	}
	st := ac.state(k)
	for _, g := range rf.Hold {
		n := poolHeldCount(job, g)
		st.hold(g, n, n, ruleControllerPool, r.now, job.ModifyIndex)
		st.keepScaling(g, job.Groups[g].Scaling)
	}
	ac.log().Warn("job in the controller's node pool: holding it", "job", k, "pool", rf.Pool, "groups", rf.Hold)
	st.note(StatusHeld, rf.Reason, r.now)
	pol, _ := ac.engineNow()
	r.pending[k] = noticeFor(pol, job, policy.NotifyHold, "hold", "", 0, rf.Reason, r.now)
	ac.notices.attachNotice(r, st)
	if err := ac.save(ctx, st); err != nil {
		return err
	}
	d := Decision{At: r.now, Kind: string(engine.Hold), Job: k.String(), Rule: ruleControllerPool, Reason: rf.Reason.Message}
	var errs []error
	for _, g := range rf.Hold {
		// Every allocation, running or not: unlike a hold for capacity,
		// which takes back only what Nomad has not placed yet.
		err := ac.scale(ctx, r, k, g, 0, "Steward holds "+plural(poolHeldCount(job, g), "allocation")+": "+rf.Reason.Message, scaleMeta(rf.Reason))
		if err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", g, err))
			continue
		}
		r.acted++
	}
	err := errors.Join(errs...)
	if err != nil {
		d.Error = err.Error()
	}
	ac.remember(d)
	return err
}

// releasePoolHold ends the pool holds of a job the guard no longer
// refuses: its owner submitted it to another node pool (or, in "all", the
// controller's pools have no node left). Nothing is resumed: its owner's
// registration set its counts, which syncHolds has let win already; what
// is left is the record, which must not go on saying it is held.
func (ac *poolHolds) releasePoolHold(ctx context.Context, r *round, st *JobState) {
	job := r.obs.Jobs[st.key()]
	if job == nil || job.Stopped {
		return // purged, out of sight or stopped: syncHolds decides
	}
	ended := false
	for g, h := range st.Held {
		if h.Rule == ruleControllerPool {
			// Held at a count its owner kept (0): theirs now.
			delete(st.Held, g)
			ended = true
		}
	}
	// syncHolds ended the holds already (the owner's count won): the
	// record still says held for the pool, once.
	told := st.Rule != ruleControllerPool || st.Status == StatusRunning || st.heldCount() > 0
	if !ended && told {
		return
	}
	pool := job.NodePool
	if pool == "" {
		pool = "default"
	}
	msg := fmt.Sprintf("its owner submitted it to node pool %s: Steward no longer holds it for the controller's node pool", pool)
	status := StatusRunning
	if st.heldCount() > 0 {
		status = StatusHeld
	}
	st.note(status, engine.Reason{Rule: ruleControllerPool, Message: msg}, r.now)
	ac.log().Info("job out of the controller's node pool: pool hold ended", "job", st.key(), "pool", pool)
	if err := ac.save(ctx, st); err != nil {
		ac.log().Error("save job state", "job", st.key(), "error", err)
		r.failed++
	}
}
