package controller

import (
	"github.com/hashicorp/nomad/api"

	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// This file carries the engine's actions out in Nomad. Every action first
// writes its intent to the job's state variable and only then calls Nomad,
// so a controller that dies between the two finds the intent on restart
// and finishes it (syncHolds, finishDrains).

// execute carries out one planned action. It returns whether Nomad was
// asked to change anything.
func (ac *actor) execute(ctx context.Context, r *round, a engine.Action) error {
	k := jobKey{a.Job.Namespace, a.Job.ID}
	job := r.obs.Jobs[k]
	if job == nil {
		return fmt.Errorf("%s %s: job not found", a.Kind, k)
	}
	st := ac.state(k)
	switch a.Kind {
	case engine.SetPriority, engine.Promote:
		return ac.actPriority(ctx, r, st, a)
	case engine.Preempt, engine.IdleStop:
		return ac.actDrain(ctx, r, st, job, a)
	case engine.Move:
		return ac.actMove(ctx, r, st, a)
	case engine.Hold:
		if _, ok := job.Groups[a.Group]; !ok {
			return fmt.Errorf("hold %s group %s: no such group", k, a.Group)
		}
		// A hold never stops running work: it takes back only what Nomad
		// has not placed.
		return ac.holdBack(ctx, r, st, job, a.Group, a.Count, a.Reason)
	case engine.Resume:
		return ac.actResume(ctx, r, st, job, a)
	}
	return fmt.Errorf("unknown action kind %q", a.Kind)
}

// actPriority sets the job's priority (a promotion, or its tier's).
func (ac *actor) actPriority(ctx context.Context, r *round, st *JobState, a engine.Action) error {
	note := func() {
		st.Promoted = a.Kind == engine.Promote
		st.note(statusFor(a.Kind, st), a.Reason, r.now)
	}
	err := ac.reRegister(ctx, r, st, a, note, func(jobIndex uint64) (uint64, error) {
		return ac.nomad().SetPriority(ctx, a.Job.Namespace, a.Job.ID, a.Priority, a.Reason.Message, jobIndex)
	})
	if err != nil {
		return err
	}
	// This round's records say the new priority (writeRecordWith).
	if r.priorities == nil {
		r.priorities = map[jobKey]int{}
	}
	r.priorities[jobKey{a.Job.Namespace, a.Job.ID}] = a.Priority
	return nil
}

// reRegister carries out a decision that re-registers the job (a
// priority, a move): note writes it into the job's state, which is saved
// with its notice before call, conditional on the job's modify index,
// asks Nomad for it; a refused call takes the note back (undoNote). The
// job's new index is Steward's own change: a later write in this round is
// conditional on it, and a held group is not the owner's to take back
// (syncHolds).
func (ac *actor) reRegister(ctx context.Context, r *round, st *JobState, a engine.Action, note func(),
	call func(jobIndex uint64) (uint64, error)) error {
	k := jobKey{a.Job.Namespace, a.Job.ID}
	if err := r.rerun(k); err != nil {
		return ac.refuseRerun(ctx, r, st, err)
	}
	before := st.noted()
	note()
	ac.notices.attachNotice(r, st)
	if err := ac.save(ctx, st); err != nil {
		return err
	}
	index, err := ac.writes.nomadWrite(r, k, writeOf(a), func() (uint64, error) { return call(r.jobIndex(k)) })
	if err != nil {
		return ac.undoNote(ctx, r, st, before, err)
	}
	r.setJobIndex(k, index)
	for _, h := range st.Held {
		h.Index = index
	}
	return nil
}

// actDrain starts a preemption or an idle stop: its intent recorded, the
// checkpoint signal in a later round (signalDelay), or, without one, the
// victims stopped now (finishDrain).
func (ac *actor) actDrain(ctx context.Context, r *round, st *JobState, job *ObservedJob, a engine.Action) error {
	k := jobKey{a.Job.Namespace, a.Job.ID}
	if err := r.rerun(k, drainGroups(job, a.Group)...); err != nil {
		return ac.refuseRerun(ctx, r, st, err)
	}
	d := &Drain{Group: a.Group, Allocs: shortIDs(a.Allocs), Decided: r.now, Requeue: a.Requeue || a.Kind == engine.Preempt,
		Kind: DrainKind(a.Kind), Rule: string(a.Reason.Rule), Reason: a.Reason.Message}
	if a.Signal != "" && a.Grace > 0 {
		d.Signal, d.Grace = a.Signal, a.Grace
	}
	if a.For != nil {
		d.For, d.ForGroup = a.For.String(), a.ForGroup
		d.On = r.gpusOf(a.Allocs)
	}
	d.MoveTo = a.MoveTo
	d.Unadmitted = a.Kind == engine.Preempt && a.Reason.Rule == engine.RuleLimit && ac.drains.neverAdmitted(a.Allocs)
	if d.For != "" && d.Signal != "" {
		// The beneficiary waits for this drain: a resume of it later
		// in this plan waits too (beneficiaryDraining).
		r.forDraining[d.For] = true
	}
	st.Draining = append(st.Draining, d)
	if d.Signal != "" {
		// Counted now, so that the record says it (with the reason
		// and grace) before any replacement starts and renders it.
		st.Resumes++
	}
	st.keepWork(d.Signal != "", r.ranOf(a.Allocs))
	for _, id := range d.Allocs {
		delete(st.Idle, id) // being stopped: its idle timer has done its work
	}
	r.markBeside(st, a)
	if d.For != "" && d.Signal != "" {
		ac.extendMarks(ctx, st, d.For, r.now, r.now.Add(signalDelay+d.Grace))
	}
	st.note(StatusDraining, a.Reason, r.now)
	ac.notices.attachNotice(r, st)
	if d.Signal == "" {
		// Nothing to wait for: the preemption finishes in this round,
		// and finishDrain's write (the drain, finished, and the hold)
		// is the write-ahead record of its Nomad calls. A second write
		// of the drain alone before it would say nothing a restarted
		// controller needs: until finishDrain's write lands, Nomad has
		// been asked nothing.
		return ac.drains.finishDrain(ctx, r, st, d)
	}
	if err := ac.save(ctx, st); err != nil {
		return err
	}
	ac.crashPoint(stepPreemptRecorded)
	// Record first, signal in a later round: the job's tasks may
	// render the record (reason, grace) into a file their driver
	// reads when the signal arrives.
	pol, _ := ac.engineNow()
	ac.pub.writeRecord(ctx, r, pol, st)
	r.wake(r.now.Add(signalDelay))
	return nil
}

// actMove moves the job to another node pool: Nomad places its waiting
// allocations there. A held group's resume follows in the plan.
func (ac *actor) actMove(ctx context.Context, r *round, st *JobState, a engine.Action) error {
	note := func() { st.note(StatusMoved, a.Reason, r.now) }
	return ac.reRegister(ctx, r, st, a, note, func(jobIndex uint64) (uint64, error) {
		return ac.nomad().MoveJob(ctx, a.Job.Namespace, a.Job.ID, a.NodePool, a.Reason.Message, jobIndex)
	})
}

// actResume releases a held group's allocations to Nomad.
func (ac *actor) actResume(ctx context.Context, r *round, st *JobState, job *ObservedJob, a engine.Action) error {
	k := jobKey{a.Job.Namespace, a.Job.ID}
	if a.AfterVictims && r.beneficiaryDraining(a.Job) {
		// It goes on GPUs its victims are still freeing: resumed
		// now, Nomad would place it on the first GPUs anyone frees.
		// The round that stops them resumes it. (Placed on GPUs
		// free now, it goes at once: its victims' GPUs are then
		// free to the work after it.)
		return nil
	}
	h := st.Held[a.Group]
	_, ok := job.Groups[a.Group]
	if h == nil || !ok || h.Count == 0 {
		return nil // nothing held (a Count 0 entry waits for Nomad to show a resume)
	}
	if r.resumed[k] == nil {
		r.resumed[k] = map[string]bool{}
	}
	r.resumed[k][a.Group] = true
	// The engine's count includes allocations resumed earlier that
	// Nomad has not placed yet: only the rest is scaled up, and a
	// smaller count holds back some of those again.
	n := a.Count - r.inflight[k][a.Group]
	if n < 0 {
		return ac.holdBack(ctx, r, st, job, a.Group, -n, a.Reason)
	}
	n = min(n, h.Count)
	if n == 0 {
		return nil
	}
	if err := r.rerun(k, a.Group); err != nil {
		return ac.refuseRerun(ctx, r, st, err)
	}
	st.release(a.Group, n)
	r.takeDone(st, a.Group) // completed batch work: not part of the count written (round.count)
	status := StatusRunning
	if a.Reason.Rule == engine.RulePrecedence {
		status = StatusMoved // resumed where its pool precedence moved it
	}
	st.note(status, a.Reason, r.now)
	if g := st.Held[a.Group]; g != nil {
		g.Index = job.ModifyIndex
	}
	ac.notices.attachNotice(r, st)
	if err := ac.save(ctx, st); err != nil {
		return err
	}
	ac.crashPoint(stepResumeRecorded)
	if err := ac.resumeScale(ctx, r, k, a, r.count(k, a.Group)+n, n); err != nil {
		return err
	}
	if st.resumed == nil {
		st.resumed = map[string]time.Time{}
	}
	st.resumed[a.Group] = r.now
	return nil
}

// resumeScale scales a held group up to count for a resume of n
// allocations. Work GPUs were set aside for (Action.Ahead) goes ahead of
// Nomad's queue, which would otherwise place queued work of a higher
// priority on them first. That takes a re-registration of the job, which
// Nomad may refuse where a scale is allowed (a job whose Vault or Consul
// blocks need a token the controller does not have): then it is a plain
// scale, as for any other resume, rather than no resume at all.
func (ac *actor) resumeScale(ctx context.Context, r *round, k jobKey, a engine.Action, count, n int) error {
	steward := count // Steward's count, before a system group's (nomadCount)
	count = nomadCount(r.obs.Jobs[k], a.Group, count)
	msg := "Steward resumes " + plural(n, "allocation") + ": " + a.Reason.Message
	if job := r.obs.Jobs[k]; a.Ahead && job != nil {
		if p, write := scalingFor(job, ac.state(k), a.Group, count); write {
			// One re-registration sets the count, the scaling policy
			// and the evaluation's priority.
			if err := ac.writeScaling(ctx, r, k, a.Group, count, p, msg, scaleMeta(a.Reason), evalPriorityAhead); err != nil {
				return err
			}
			r.setCount(k, a.Group, steward)
			return nil
		}
	}
	if a.Ahead && r.anew(k, a.Group, count) {
		if err := ac.leaveDoneOut(ctx, r, k, a.Group, nil, scaleMeta(a.Reason)); err != nil {
			return err
		}
	}
	if a.Ahead {
		index, err := ac.nomad().ScaleAhead(ctx, k.Namespace, k.ID, a.Group, count, r.jobIndex(k))
		if err == nil {
			r.setJobIndex(k, index)
			r.setCount(k, a.Group, steward)
			return nil
		}
		if errors.Is(err, errJobChanged) {
			return err
		}
		ac.log().Warn("resume ahead of Nomad's queue refused; resuming with a plain scale", "job", k, "group", a.Group, "error", err)
	}
	return ac.scale(ctx, r, k, a.Group, steward, msg, scaleMeta(a.Reason))
}

// holdUnadmitted holds back again the allocations resumed earlier but not
// yet placed, in groups the plan did not resume: the engine gave their
// GPUs to other work.
func (ac *actor) holdUnadmitted(ctx context.Context, r *round) {
	for k, groups := range r.inflight {
		job := r.obs.Jobs[k]
		if job == nil {
			continue
		}
		for g, q := range groups {
			if r.resumed[k][g] {
				continue
			}
			why := engine.Reason{Rule: engine.RuleCapacity, Message: "the GPUs it was resumed for went to other work first; held again"}
			for _, w := range r.plan.Waiting {
				if w.Job.Namespace == k.Namespace && w.Job.ID == k.ID && w.Group == g {
					why = w.Reason
				}
			}
			if err := ac.holdBack(ctx, r, ac.state(k), job, g, q, why); err != nil && !errors.Is(err, errRerun) && !refusedOrBackedOff(err) {
				ac.log().Error("hold back", "job", k, "group", g, "error", err)
				r.failed++
			}
		}
	}
}

// ruleCompleted is the rule of a write refused because it would run
// completed batch work again (round.rerun).
const ruleCompleted = "completed"

// refuseRerun records, in the job's record, why Steward leaves a batch job
// as it is (round.rerun), once: the engine decides the same every round.
// It returns err, which the round takes for a refusal, not a failure.
func (ac *actor) refuseRerun(ctx context.Context, r *round, st *JobState, err error) error {
	if st.Reason == err.Error() {
		return err
	}
	ac.log().Info("write refused: it would run completed batch work again", "job", st.key(), "reason", err)
	status := st.Status
	if status == "" {
		status = StatusRunning
	}
	st.note(status, engine.Reason{Rule: ruleCompleted, Message: err.Error()}, r.now)
	if serr := ac.save(ctx, st); serr != nil {
		ac.log().Error("save job state", "job", st.key(), "error", serr)
	}
	return err
}

// holdBack scales a group down by n allocations that are not running yet,
// and records them as held.
func (ac *actor) holdBack(ctx context.Context, r *round, st *JobState, job *ObservedJob, group string, n int, why engine.Reason) error {
	spec := job.Groups[group]
	// A batch group's completed allocations are no part of the count
	// written (round.takeDone).
	count := r.count(st.key(), group)
	target := max(count-n, r.liveAllocs(st.key(), group))
	if n = count - target; n <= 0 {
		return nil
	}
	if ac.writes.backedOff(r.now, st.key(), "scale "+group) {
		// Nomad refused this group's scale recently: nothing is recorded
		// as held that Nomad did not take (backoff.go).
		return fmt.Errorf("hold %s group %s: %w", st.key(), group, errBackedOff)
	}
	if err := r.rerun(st.key(), group); err != nil {
		return ac.refuseRerun(ctx, r, st, err)
	}
	done := r.takeDone(st, group)
	st.hold(group, n, count, string(why.Rule), r.now, job.ModifyIndex).Taken = done
	st.keepScaling(group, spec.Scaling)
	st.note(StatusHeld, why, r.now)
	ac.notices.attachNotice(r, st)
	if err := ac.save(ctx, st); err != nil {
		return err
	}
	ac.crashPoint(stepHoldBackRecord)
	r.acted++
	return ac.scale(ctx, r, st.key(), group, target, "Steward holds "+plural(n, "allocation")+": "+why.Message, scaleMeta(why))
}

// scale sets a group's count, only if the job is still the version the
// decision was made on (its modify index as observed, or as Steward's own
// scale of it earlier in this round left it).
//
// A group with a scaling policy is set together with its policy
// (scaling.go): pinned while Steward holds part of it, its owner's once
// resumed in full.
func (ac *actor) scale(ctx context.Context, r *round, k jobKey, group string, count int, msg string, meta map[string]any) error {
	// The message is the job's scaling event, which its tenant reads: no
	// other namespace's job is named (redact.go).
	pol, _ := ac.engineNow()
	msg = redactJobs(msg, k.Namespace, ac.pub.roundNamespaces(r, pol))
	steward := count // Steward's count, before a system group's (nomadCount)
	count = nomadCount(r.obs.Jobs[k], group, count)
	if job := r.obs.Jobs[k]; job != nil {
		if p, write := scalingFor(job, ac.state(k), group, count); write {
			if !p.Enabled {
				msg += " (its scaling policy is disabled while held)"
			}
			if err := ac.writeScaling(ctx, r, k, group, count, p, msg, meta, 0); err != nil {
				return err
			}
			r.setCount(k, group, steward)
			return nil
		}
	}
	index, err := ac.writes.nomadWrite(r, k, "scale "+group, func() (uint64, error) {
		return ac.nomad().Scale(ctx, k.Namespace, k.ID, group, count, msg, meta, r.jobIndex(k))
	})
	if err != nil {
		return err
	}
	r.setJobIndex(k, index)
	r.setCount(k, group, steward)
	return nil
}

// leaveDoneOut scales a batch group to its count less its completed
// allocations, before a re-registration with a count Nomad already has
// (round.anew): that makes the new job version in which Nomad no longer
// counts them, and the re-registration after it, whose count differs,
// one more. With p, the group's scaling policy, it is a re-registration
// too, with the policy's min lowered to admit the count. The count it
// writes is never below the group's live allocations (the count observed
// is its completed, live and unplaced ones), so nothing running is
// stopped. Not a re-registration that changes something else for the
// sake of a new version: a change to the job's meta (which tasks see in
// their environment) would replace the group's running allocations.
func (ac *actor) leaveDoneOut(ctx context.Context, r *round, k jobKey, group string, p *ScalingPolicy, meta map[string]any) error {
	d := r.done(k, group)
	count := r.obs.Jobs[k].Groups[group].Count - d
	msg := fmt.Sprintf("Steward leaves %s out of group %s's count (a new job version, in which Nomad does not count them)",
		plural(d, "completed allocation"), group)
	index, err := ac.writes.nomadWrite(r, k, "scale "+group, func() (uint64, error) {
		if p != nil {
			q := *p
			q.Min = min(q.Min, int64(count))
			return ac.nomad().ScaleWithPolicy(ctx, k.Namespace, k.ID, group, count, q, msg, meta, r.jobIndex(k), 0)
		}
		return ac.nomad().Scale(ctx, k.Namespace, k.ID, group, count, msg, meta, r.jobIndex(k))
	})
	if err != nil {
		return err
	}
	r.setJobIndex(k, index)
	r.setCount(k, group, count)
	return nil
}

// finishDrain ends a preemption: the victims' job is held (scaled down)
// and the victims stopped, so their GPUs go to the waiting work and not to
// a replacement of the victim.
func (dr *drainer) finishDrain(ctx context.Context, r *round, st *JobState, d *Drain) error {
	k := st.key()
	job := r.obs.Jobs[k]
	d.Finished, d.FinishedAt = true, r.now
	dr.markFreed(r, st, d)
	if job == nil || job.Stopped {
		st.Draining = slices.DeleteFunc(st.Draining, func(x *Drain) bool { return x == d })
		return dr.save(ctx, st)
	}
	reason := engine.Reason{Rule: engine.Rule(d.Rule), Message: d.Reason}
	groups := map[string]int{} // group -> allocations to remove
	if d.Group == "" {
		groups = gpuGroupCounts(job)
	} else {
		// Victims that finished their work by themselves are done, not
		// preempted: their GPUs are free already, and lowering the count
		// for them would stop another allocation, one never signalled.
		d.Completed = r.endedVictims(k, d)
		if n := len(d.Allocs) - d.Completed; n > 0 {
			groups[d.Group] = n
		} else {
			dr.log().Info("preemption's victims completed their work before it stopped them: nothing held", "job", k, "group", d.Group,
				"completed", d.Completed)
			st.note(StatusRunning, completedReason(d, d.Completed), r.now)
			return dr.save(ctx, st)
		}
	}
	// Idle releases count toward the eviction cap too: it is about how
	// often a job is stopped, whatever the reason. Work stopped before it
	// was ever admitted was not evicted. Only a stop that took effect
	// counts (issue 29): one whose scale Nomad refused or failed waits in
	// its hold (Held.Evicts) until Nomad shows the count (syncHolds); counted
	// at once, a job whose scale kept failing reached the cap and was
	// exempt from its tenant's limit for the hour.
	evicts := d.evicts()
	targets := r.holdDrained(st, job, d, groups)
	st.note(d.heldStatus(), reason, r.now)
	if err := dr.save(ctx, st); err != nil {
		return err
	}
	dr.crashPoint(stepHoldRecorded)
	// Part of a group: the lower count alone stops the victims. When a
	// group's count drops, Nomad stops the allocations with the highest
	// indexes in their names (its reconciler's computeStop), and the
	// engine chose those (policy/engine/chains.go). Stopping the victims
	// first (Alloc.Stop) is not safe: each stop queues an evaluation of
	// its own, at once, which, run before the count's, places
	// replacements under the victims' names, and the count's evaluation
	// then stops the highest names: allocations that never had their
	// checkpoint signal. Only victims that are not the top of their
	// group (Nomad named them otherwise, or placed one above them since
	// the plan) are stopped one by one first, as the next best.
	whole := d.Group == "" || targets[d.Group] == 0
	if !whole && !r.victimsOnTop(st, d) {
		dr.stopVictims(ctx, r, k, d)
	}
	names := make([]string, 0, len(targets))
	for g := range targets {
		names = append(names, g)
	}
	sort.Strings(names)
	verb := d.scaleVerb()
	var firstErr error
	for _, g := range names {
		msg := fmt.Sprintf("%s %s: %s", verb, plural(groups[g], "allocation"), d.Reason)
		if err := dr.scale(ctx, r, k, g, targets[g], msg, scaleMeta(reason)); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if evicts && firstErr == nil {
		dr.countEviction(ctx, r, st, targets)
	}
	pol, _ := dr.engineNow()
	dr.metrics.preempted(d, job, pol)
	r.acted++
	return firstErr
}

// gpuGroupCounts are the counts of a job's groups that run GPU work: all
// of a whole gang's allocations.
func gpuGroupCounts(job *ObservedJob) map[string]int {
	groups := map[string]int{}
	for g, spec := range job.Groups {
		if spec.GPUsPerAlloc > 0 && spec.Count > 0 {
			groups[g] = spec.Count
		}
	}
	return groups
}

// countEviction counts a drain's stop toward the job's eviction cap once
// Nomad took its counts (targets), and saves it.
func (dr *drainer) countEviction(ctx context.Context, r *round, st *JobState, targets map[string]int) {
	st.preempted(r.now)
	for g := range targets {
		if h := st.Held[g]; h != nil {
			h.Evicts = time.Time{}
		}
	}
	if err := dr.save(ctx, st); err != nil {
		dr.log().Error("save job state", "job", st.key(), "error", err)
		r.failed++
	}
}

// holdDrained works out, for each group a drain stops n allocations of
// (groups, changed to the number stopped), the count it leaves, and holds
// what a requeue takes back; it returns the counts by group.
func (r *round) holdDrained(st *JobState, job *ObservedJob, d *Drain, groups map[string]int) map[string]int {
	k := st.key()
	evicts := d.evicts()
	targets := map[string]int{}
	for g, n := range groups {
		done := r.takeDone(st, g) // completed batch work: not part of the count written
		count := r.count(k, g)
		n = min(n, count)
		groups[g], targets[g] = n, count-n
		if d.Requeue {
			h := st.hold(g, n, count, d.Rule, r.now, job.ModifyIndex)
			h.Taken = done
			if evicts {
				h.Evicts = r.now
			}
			st.keepScaling(g, job.Groups[g].Scaling)
		}
		if (d.Kind == DrainPreempt || d.Kind == DrainMaintenance) && !d.Unadmitted {
			if st.Interrupted == nil {
				st.Interrupted = map[string]bool{}
			}
			st.Interrupted[g] = true
		}
	}
	return targets
}

// stopVictims stops a drain's victims one by one, ahead of lowering
// their group's count: they are not its highest name indexes
// (finishDrain).
func (dr *drainer) stopVictims(ctx context.Context, r *round, k jobKey, d *Drain) {
	dr.log().Warn("victims are not their group's highest name indexes: stopping them one by one before lowering the count",
		"job", k, "group", d.Group, "allocs", d.Allocs)
	for _, id := range r.aliveOf(k, d.Allocs) {
		index, err := dr.writes.nomadWrite(r, k, "stop", func() (uint64, error) { return dr.nomad().StopAlloc(ctx, k.Namespace, id) })
		if err != nil {
			// finishDrains stops it again while Nomad still runs it.
			if !refusedOrBackedOff(err) {
				dr.log().Warn("stop victim allocation", "job", k, "alloc", id, "error", err)
				r.failed++
			}
			continue
		}
		r.wrote(index)
	}
}

// evicts reports whether the drain counts toward the job's eviction cap:
// a pause, a node's maintenance and work never admitted are not
// evictions.
func (d *Drain) evicts() bool {
	return d.Kind != DrainPause && d.Kind != DrainMaintenance && !d.Unadmitted
}

// heldStatus is the job's status once the drain stops its victims.
func (d *Drain) heldStatus() string {
	switch {
	case d.Unadmitted, d.Kind == DrainMaintenance:
		return StatusHeld
	case d.MoveTo != "":
		return StatusMigrating
	case d.Kind == DrainPause:
		return StatusPaused
	case d.Kind == DrainIdleStop && d.Requeue:
		return StatusHeld
	case !d.Requeue:
		return StatusIdleStop
	}
	return StatusPreempted
}

// scaleVerb is what the drain's scaling event in Nomad says Steward does.
func (d *Drain) scaleVerb() string {
	switch {
	case d.Unadmitted:
		return "Steward holds (over its tenant's limit)"
	case d.Kind == DrainPause:
		return "Steward pauses"
	case d.Kind == DrainMaintenance:
		return "Steward holds (node maintenance)"
	case !d.Requeue:
		return "Steward stops (idle)"
	case d.Kind == DrainIdleStop:
		return "Steward requeues (idle)"
	}
	return "Steward preempts"
}

// neverAdmitted reports whether allocations were placed by Nomad since
// the last plan of this lead term (none of them in it): the plan that stops
// them for a tenant's limit is the first to see them, so they were never
// admitted. Before a first plan nothing is known: admitted.
func (dr *drainer) neverAdmitted(allocs []string) bool {
	if dr.planned == nil || len(allocs) == 0 {
		return false
	}
	for _, id := range allocs {
		if dr.planned[id] {
			return false
		}
	}
	return true
}

// victimsOnTop reports whether a partial preemption's victims that still
// run are the allocations of their group with the highest name indexes,
// above every other that runs but the victims of other preemptions not
// yet finished (signalled too, and stopped by their own lower count):
// then lowering the count stops exactly them.
func (r *round) victimsOnTop(st *JobState, d *Drain) bool {
	k := st.key()
	lowest, highest := -1, -1
	for _, a := range r.obs.Allocs {
		if a.Namespace != k.Namespace || a.JobID != k.ID || a.Group != d.Group {
			continue
		}
		i := engine.NameIndex(a.Name)
		if i < 0 {
			return false // no name to go by
		}
		switch {
		case d.has(a.ID):
			if lowest < 0 || i < lowest {
				lowest = i
			}
		case st.draining(a.ID) == nil:
			highest = max(highest, i)
		}
	}
	return lowest < 0 || lowest > highest
}

// signalDelay is how long after recording a preemption its checkpoint
// signal goes out: time for the job's template to render the record.
const signalDelay = time.Second

// finishDrains moves each preemption on: sends due checkpoint signals,
// finishes those whose grace is over (or whose victims are gone already),
// and forgets finished ones once their victims have stopped.
func (dr *drainer) finishDrains(ctx context.Context, r *round) {
	r.writtenFiles = dr.written.answered()
	// Different jobs' drains at once: one after another, ten victims'
	// checkpoint signals held a round for 5.6 s at 250 nodes (issue 33).
	states := dr.sortedStates()
	inTurns(ctx, len(states), dr.cfg().ActInFlight, nil, nil, func(ctx context.Context, i int) {
		dr.finishDrainsOf(ctx, r, states[i])
	})
}

// finishDrainsOf moves one job's drains on: signals, finishes, stops
// stragglers, forgets the finished.
func (dr *drainer) finishDrainsOf(ctx context.Context, r *round, st *JobState) {
	st.pruneMarks(r.now)
	for _, d := range slices.Clone(st.Draining) {
		alive := len(r.aliveOf(st.key(), d.Allocs))
		switch {
		case d.Finished:
			settled := dr.keepCompletedOut(ctx, r, st, d)
			// Forgotten once its victims are gone and Nomad has stopped
			// what the lowered count leaves over (their replacements,
			// when the stops' own evaluations placed some), or at the
			// latest when stragglers would be given up.
			if alive == 0 && settled && (!r.overCount(st.key(), d.Group) || r.now.Sub(d.FinishedAt) >= victimStopLimit) {
				st.Draining = slices.DeleteFunc(st.Draining, func(x *Drain) bool { return x == d })
			} else if alive > 0 {
				dr.stopStragglers(ctx, r, st, d)
			}
			continue
		case alive > 0 && d.Signal != "" && !d.Signaled.IsZero() && !d.Sent && r.now.Before(d.Deadline):
			// Recorded as signalled, but the signal may never have
			// left (a crash, a failed call), or left and was not
			// saved as sent (that waits for the next write: store.go):
			// send it again, within the grace that runs. Past the
			// grace a signal has no time left to act on.
			dr.signal(ctx, r, st, d)
			continue
		case alive > 0 && d.Signal != "" && d.Signaled.IsZero():
			if due := d.Decided.Add(signalDelay); r.now.Before(due) {
				r.wake(due)
			} else {
				dr.signal(ctx, r, st, d)
			}
			continue
		case alive > 0 && r.now.Before(d.Deadline):
			if !r.checkpointsWritten(st, d) {
				r.wake(d.Deadline)
				continue
			}
			dr.log().Info("checkpoint written: preemption finished before its grace ends", "job", st.key(),
				"for", d.For, "grace_left", d.Deadline.Sub(r.now).Round(time.Second))
		}
		if err := dr.finishDrain(ctx, r, st, d); err != nil && !refusedOrBackedOff(err) {
			dr.log().Error("finish preemption", "job", st.key(), "error", err)
			r.failed++
		}
	}
}

// keepCompletedOut takes out of a finished preemption's hold the victims
// that completed their work by themselves after the plan that stopped
// them was made: a batch task that exited 0 just as its grace ran out,
// while the count that stops it was on its way. Nomad takes such an
// allocation for done work; so does Steward, or it would resume it, and
// the completed work would run again (found by the soak, seed 41:
// vision/batch-51). It reports whether the victims' ends are known: until
// then the finished preemption is kept (at most victimStopLimit).
func (dr *drainer) keepCompletedOut(ctx context.Context, r *round, st *JobState, d *Drain) bool {
	k := st.key()
	job := r.obs.Jobs[k]
	if d.Group == "" || !d.Requeue || d.settled || job == nil || job.Type != api.JobTypeBatch {
		return true
	}
	ended := r.endedVictims(k, d)
	if len(r.aliveOf(k, d.Allocs)) > 0 {
		return true // being stopped still (stopStragglers)
	}
	if ended < len(d.Allocs) {
		// The others are no longer meant to run: stopped, or completed
		// just before the stop reached them (Nomad took the lower count
		// before their client reported the exit), which only their own
		// record tells.
		more, known := dr.victimsCompletedStopped(ctx, k, d, r.obs.Ended)
		if !known && r.now.Sub(d.FinishedAt) < victimStopLimit {
			return false
		}
		ended += more
	}
	d.settled = true
	extra := ended - d.Completed
	h := st.Held[d.Group]
	if extra <= 0 || h == nil {
		return true
	}
	d.Completed = ended
	h.Count, h.Original = max(h.Count-extra, 0), max(h.Original-extra, 0)
	if h.Count == 0 {
		st.note(StatusRunning, completedReason(d, extra), r.now)
	}
	dr.log().Info("preemption's victim completed its work before the stop reached it: not held, never resumed", "job", k,
		"group", d.Group, "completed", extra, "held", h.Count)
	if err := dr.save(ctx, st); err != nil {
		dr.log().Error("save job state", "job", k, "error", err)
		r.failed++
	}
	return true
}

// victimsCompletedStopped reads how a finished preemption's victims that
// Nomad stopped ended (those not in ended, which finished by themselves
// while still meant to run): how many completed their work without being
// killed, and whether every one's end is known (its client reported it).
// One read a victim, once a preemption.
func (dr *drainer) victimsCompletedStopped(ctx context.Context, k jobKey, d *Drain, ended map[string]jobKey) (int, bool) {
	completed, known := 0, true
	for _, short := range d.Allocs {
		if endedIn(ended, k, short) {
			continue
		}
		allocs, err := dr.nomad().AllocsByPrefix(ctx, k.Namespace, short)
		if err != nil {
			dr.log().Warn("read a preemption's victim", "job", k, "alloc", short, "error", err)
			known = false
			continue
		}
		for _, a := range allocs {
			if a.JobID != k.ID || !sameID(short, a.ID) {
				continue
			}
			switch {
			case a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning:
				known = false // its client has not reported its end yet
			case a.ClientStatus == api.AllocClientStatusComplete && !killed(a):
				completed++
			}
		}
	}
	return completed, known
}

// killed reports whether any task of an allocation was killed (stopped),
// rather than exiting by itself.
func killed(a *api.AllocationListStub) bool {
	for _, ts := range a.TaskStates {
		if ts == nil {
			continue
		}
		for _, e := range ts.Events {
			if e != nil && (e.Type == api.TaskKilling || e.Type == api.TaskKilled) {
				return true
			}
		}
	}
	return false
}

// completedReason is a job's record when the victims of its preemption
// completed their work before the stop reached them.
func completedReason(d *Drain, n int) engine.Reason {
	return engine.Reason{Rule: engine.Rule(d.Rule), Message: fmt.Sprintf("%s of group %s completed its work during its checkpoint grace: done, not preempted (%s)",
		plural(n, "allocation"), d.Group, d.Reason)}
}

// doneSkew is how much earlier than the recorded signal a task's
// checkpoint-done time may be and still answer it: the time comes from the
// client's clock, the signal's from the controller's. (Its driver answers
// only a request it forwarded, so an earlier time is a skewed clock, not an
// old answer, unless the allocation was signalled before.)
const doneSkew = 2 * time.Second

// checkpointsWritten reports whether every victim of a signalled drain that
// Nomad still runs has said, for each task that took the signal, that the
// checkpoint it asked for is written (STEWARD_CHECKPOINT_DONE): the rest
// of its grace would only run work the checkpoint does not hold, while the
// work it frees GPUs for waits. Then the drain finishes now.
func (r *round) checkpointsWritten(st *JobState, d *Drain) bool {
	if d.Signal == "" || !d.Sent || d.Signaled.IsZero() {
		return false
	}
	job := r.obs.Jobs[st.key()]
	if job == nil {
		return false
	}
	since := d.Signaled.Add(-doneSkew)
	for _, a := range r.obs.Allocs {
		if !d.has(a.ID) || !ownedBy(&a, st.key()) {
			continue
		}
		signalled := 0
		for _, task := range job.Groups[a.Group].SignalTasks {
			if !slices.Contains(a.RunningTasks, task) {
				continue // not signalled (not running then), or gone since
			}
			signalled++
			if at, ok := r.doneAt(&a, task); !ok || at.Before(since) {
				return false
			}
		}
		if signalled == 0 {
			return false
		}
	}
	return true
}

// doneAt is when a task last said that its checkpoint is written: by its
// checkpoint-written file (any driver) or its steward-exec driver's
// events, the later of the two.
func (r *round) doneAt(a *ObservedAlloc, task string) (time.Time, bool) {
	at, ok := a.CheckpointDone[task]
	if f, fok := r.writtenFiles[a.ID][task]; fok && (!ok || f.After(at)) {
		at, ok = f, true
	}
	return at, ok
}

// victimStopRetry is how long after finishing a preemption a victim that
// Nomad still runs is stopped again; victimStopLimit is when the
// preemption is given up, so that the engine plans on what really runs.
const (
	victimStopRetry = 5 * time.Second
	victimStopLimit = 2 * time.Minute
)

// stopStragglers handles a finished preemption whose victims Nomad still
// runs (a failed stop): they are stopped again, and after victimStopLimit
// the preemption is dropped, its victims count as running again, and the
// engine re-plans, instead of their GPUs counting as free for ever. When
// every victim's stop is Nomad's to carry out already, it waits for Nomad
// (awaitPendingStops).
func (dr *drainer) stopStragglers(ctx context.Context, r *round, st *JobState, d *Drain) {
	if d.FinishedAt.IsZero() {
		d.FinishedAt = r.now
	}
	since := r.now.Sub(d.FinishedAt)
	stragglers := dr.stragglers(r, st, d)
	if len(stragglers) == 0 {
		dr.awaitPendingStops(r, st, d, since)
		return
	}
	if since >= victimStopLimit {
		dr.log().Error("victims still run long after their preemption finished: giving it up so the next plan sees them",
			"job", st.key(), "allocs", d.Allocs, "since", since)
		st.Draining = slices.DeleteFunc(st.Draining, func(x *Drain) bool { return x == d })
		dr.metrics.givenUp.WithLabelValues(givenUpVictimsRun).Inc()
		r.failed++
		return
	}
	last := later(d.FinishedAt, d.stoppedAgain)
	if r.now.Sub(last) < victimStopRetry {
		r.wake(last.Add(victimStopRetry))
		return
	}
	d.stoppedAgain = r.now
	for _, id := range stragglers {
		if index, err := dr.writes.nomadWrite(r, st.key(), "stop", func() (uint64, error) { return dr.nomad().StopAlloc(ctx, st.Namespace, id) }); err != nil {
			if !refusedOrBackedOff(err) {
				dr.log().Warn("stop victim allocation again", "job", st.key(), "alloc", id, "error", err)
				r.failed++
			}
		} else {
			dr.log().Info("stopped a victim Nomad still ran", "job", st.key(), "alloc", id)
			r.wrote(index)
			r.acted++
		}
	}
	r.wake(r.now.Add(victimStopRetry))
}

// pacePendingStops starts the pacing of a loaded state's finished
// preemptions at now, as if their victims had just been stopped again.
// When they last were is this process's alone (Drain.stoppedAgain): a new
// leader would otherwise stop every victim Nomad still runs in its first
// round, although the leader before it may have done so a second before
// it died: 39 stops at 250 nodes (140 in an earlier run), each one more
// write and evaluation on a loaded server, all of them between the new
// leader and its first completed round. A victim
// whose stop really failed is stopped at the pace the dead leader kept
// (victimStopRetry), and the preemption is given up at victimStopLimit,
// counted from when it finished, as before.
func (st *JobState) pacePendingStops(now time.Time) {
	for _, d := range st.Draining {
		if d.Finished {
			d.stoppedAgain = now
		}
	}
}

// stragglers are a finished drain's victims that Nomad still runs and has
// not been asked to stop: a victim stopped with StopAlloc whose request
// Nomad holds (StopRequested), or one of a group Nomad shows scaled to no
// allocation, is stopped by Nomad when it evaluates the job; stopping it
// again would only queue another evaluation behind the rest.
func (dr *drainer) stragglers(r *round, st *JobState, d *Drain) []string {
	job := r.obs.Jobs[st.key()]
	var out []string
	for _, id := range r.aliveOf(st.key(), d.Allocs) {
		a := r.alloc(id)
		if a == nil || a.StopRequested || job != nil && job.Groups[a.Group].Count == 0 {
			continue
		}
		out = append(out, id)
	}
	return out
}

// signal sends a drain's checkpoint signal and starts its grace (on a
// resend, the grace keeps running from the first time). Only the tasks
// that take the checkpoint signal get it (GroupSpec.SignalTasks): a
// sidecar that the signal would kill is left alone.
func (dr *drainer) signal(ctx context.Context, r *round, st *JobState, d *Drain) {
	if d.Signaled.IsZero() {
		// Not saved by itself (store.go): the decision's write already
		// says that the victims are to be signalled, and a controller
		// that takes over from here signals them again with a whole
		// grace. One state write fewer per preemption (issue 33).
		d.Signaled, d.Deadline = r.now, r.now.Add(d.Grace)
		dr.marksOutlastGrace(ctx, st, d, r.now)
		dr.crashPoint(stepSignalRecorded)
	}
	job := r.obs.Jobs[st.key()]
	failed, refused, starting, sent := 0, 0, 0, 0
	for _, a := range r.obs.Allocs {
		if !d.has(a.ID) || !ownedBy(&a, st.key()) || job == nil {
			continue
		}
		for _, task := range job.Groups[a.Group].SignalTasks {
			if !slices.Contains(a.RunningTasks, task) {
				// A victim placed moments ago whose task has not started
				// yet, or whose start this controller has not seen yet
				// (found by the soak: a trainer resumed and preempted
				// within a second was killed at the end of its grace with
				// no signal, the signal having been "sent" to nobody). It
				// gets the signal once it runs, within the grace; past the
				// grace, a task that never started has no work to save.
				if (a.ClientStatus == "pending" || a.ClientStatus == "running") && r.now.Before(d.Deadline) {
					starting++
				}
				continue
			}
			sent++
			_, err := dr.writes.nomadWrite(r, st.key(), "signal", func() (uint64, error) {
				return 0, dr.nomad().Signal(ctx, st.Namespace, a.ID, task, d.Signal)
			})
			switch {
			case refusedOrBackedOff(err):
				refused++ // in the job's record; the grace runs on
			case err != nil:
				dr.log().Warn("checkpoint signal failed", "job", st.key(), "alloc", a.ID, "task", task, "error", err)
				failed++
			}
		}
	}
	if failed > 0 || refused > 0 {
		// Sent stays false: the next round sends it again, within the
		// grace that already runs.
		if failed > 0 {
			r.failed++
		}
		r.wake(r.now.Add(2 * time.Second))
		return
	}
	if starting > 0 {
		// Sent stays false: the next round sends it again, to every
		// victim (one that took it already checkpoints once more).
		r.wake(r.now.Add(time.Second))
		return
	}
	d.Sent = true // saved with the job's next write (store.go)
	if sent == 0 {
		dr.log().Info("checkpoint signal not sent: no victim's task runs to take it", "job", st.key(), "signal", d.Signal)
		r.wake(d.Deadline)
		return
	}
	dr.log().Info("checkpoint signal sent", "job", st.key(), "signal", d.Signal, "grace", d.Grace)
	r.acted++
	r.wake(d.Deadline)
}

// syncHolds keeps each held group scaled down to what Steward holds. A
// controller that died between recording a hold and scaling finds the
// mismatch here; a job whose owner changed it since wins over the hold.
func (ac *actor) syncHolds(ctx context.Context, r *round) {
	for _, st := range ac.sortedStates() {
		k := st.key()
		job := r.obs.Jobs[k]
		if job == nil {
			ac.unlistedJob(ctx, r, k)
			continue
		}
		if job.Stopped {
			// Stopped by its owner: nothing is held any more.
			if len(st.Held) > 0 || len(st.Draining) > 0 || st.Paused {
				ac.log().Info("job stopped by its owner: Steward forgets its holds", "job", k)
				st.Held, st.Draining, st.Paused = nil, nil, false
				st.Status = ""
				_ = ac.save(ctx, st)
			}
			continue
		}
		for g, h := range st.Held {
			ac.syncHold(ctx, r, st, job, g, h)
		}
	}
}

// unlistedJob is a job with a state that Nomad does not list: purged, or
// out of the token's sight. Only a job Nomad says does not exist is
// forgotten.
func (ac *actor) unlistedJob(ctx context.Context, r *round, k jobKey) {
	exists, err := ac.nomad().JobExists(ctx, k.Namespace, k.ID)
	switch {
	case err != nil:
		ac.log().Warn("job not listed and cannot be read", "job", k, "error", err)
		return
	case !exists:
		ac.log().Info("job purged: Steward forgets it", "job", k)
		if err := ac.forget(ctx, k); err != nil {
			ac.log().Error("forget purged job", "job", k, "error", err)
			r.failed++
		}
		return
	default:
		// Out of sight but there (a token that lost read-job
		// there?): its holds stay, or it would be stranded.
		ac.log().Warn("job exists but is not listed: keeping its state", "job", k)
		return
	}
}

// syncHold brings one held group in step with what Nomad shows: a hold
// or resume Nomad applied is kept or forgotten, one recorded but not
// applied (a failed call, a restart) is applied again, and a count its
// owner changed meanwhile wins.
func (ac *actor) syncHold(ctx context.Context, r *round, st *JobState, job *ObservedJob, g string, h *Held) {
	k := st.key()
	spec, ok := job.Groups[g]
	if !ok {
		delete(st.Held, g)
		_ = ac.save(ctx, st)
		return
	}
	want := h.Original - h.Count
	applied := countApplied(job, g, want)
	if applied {
		// Applied: the completed allocations its write left out
		// are an older version's now, which Nomad ignores.
		h.Taken = 0
		if !h.Evicts.IsZero() {
			// A preemption whose scale was not taken when
			// decided (finishDrain) took effect: it counts now.
			st.preempted(h.Evicts)
			slices.SortFunc(st.Preemptions, func(a, b time.Time) int { return a.Compare(b) })
			h.Evicts = time.Time{}
			_ = ac.save(ctx, st)
		}
	}
	switch {
	case applied && h.Count == 0:
		// Resumed in full, and Nomad shows it: forgotten once
		// its scaling policy is its owner's again.
		if ac.syncScaling(ctx, r, st, job, g, h, want) {
			delete(st.Held, g)
		}
	case applied:
		h.Index = job.ModifyIndex // in step; saved with the round
		ac.syncScaling(ctx, r, st, job, g, h, want)
	case job.ModifyIndex == h.Index:
		if err := r.rerun(k, g); err != nil {
			ac.log().Warn("hold recorded but not applied: not finished", "job", k, "group", g, "error", err)
			return
		}
		// Batch work completed since the write was recorded
		// leaves the count too (round.takeDone).
		if extra := r.done(k, g) - h.Taken; extra > 0 {
			h.Original, h.Taken = max(h.Original-extra, 0), h.Taken+extra
			h.Count = min(h.Count, h.Original)
			want = h.Original - h.Count
			_ = ac.save(ctx, st)
		}
		r.tookDone(k, g)
		what := "a hold"
		if spec.Count < want {
			what = "a resume"
		}
		ac.log().Info("finishing "+what+" that was recorded but not applied", "job", k, "group", g, "count", want)
		if err := ac.scale(ctx, r, k, g, want, fmt.Sprintf("Steward sets group %s to %s (decided earlier, not applied then: a failed call or a restart)", g, plural(want, "allocation")),
			map[string]any{"steward.rule": h.Rule}); refusedOrBackedOff(err) {
			return // in the job's record; tried again after its backoff
		} else if err != nil {
			ac.log().Error("reapply hold", "job", k, "group", g, "error", err)
			r.failed++
		} else {
			r.acted++
		}
	default:
		ac.log().Info("job changed by its owner while held: the owner's count wins", "job", k, "group", g,
			"count", spec.Count, "held_to", want)
		ac.unpinScaling(ctx, r, k, job, g, h)
		delete(st.Held, g)
	}
}

func scaleMeta(r engine.Reason) map[string]any {
	return map[string]any{"steward.rule": string(r.Rule)}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func statusFor(k engine.Kind, st *JobState) string {
	if k == engine.Promote {
		return StatusPromoted
	}
	if st.Status != "" {
		return st.Status
	}
	return StatusRunning
}

// noted is a job's latest decision as its record shows it.
type noted struct {
	status, rule, reason string
	updated              time.Time
	promoted             bool
	outbox               int
}

func (s *JobState) noted() noted {
	return noted{s.Status, s.Rule, s.Reason, s.Updated, s.Promoted, len(s.Outbox)}
}

// undoNote takes back the decision noted for a write Nomad refused (or
// that waits out a refusal's backoff), and its webhook message: the
// record keeps the decision that stands, and the refusal goes into
// steward_write_error (backoff.go). Any other error is a failure, retried
// as before.
func (ac *actor) undoNote(ctx context.Context, r *round, st *JobState, before noted, err error) error {
	if !refusedOrBackedOff(err) {
		return err
	}
	st.Status, st.Rule, st.Reason, st.Updated, st.Promoted = before.status, before.rule, before.reason, before.updated, before.promoted
	if len(st.Outbox) > before.outbox {
		st.Outbox = st.Outbox[:before.outbox]
	}
	delete(r.attached, st.key())
	if serr := ac.save(ctx, st); serr != nil {
		ac.log().Error("save job state", "job", st.key(), "error", serr)
	}
	return err
}

// note records the latest decision about a job.
func (s *JobState) note(status string, r engine.Reason, now time.Time) {
	s.Status, s.Rule, s.Reason, s.Updated = status, string(r.Rule), r.Message, now
}
