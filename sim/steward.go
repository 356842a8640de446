package sim

import (
	"fmt"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// settleSteward is Steward on Nomad with Nomad's own preemption off: the
// engine plans on the cluster as it is now, the plan is applied the way
// the controller applies it, and then Nomad places its queue (work the
// engine admitted, resumed work, and beneficiaries whose victims are
// gone) without preemption.
//
// The engine sees a new job before Nomad places it (the arrival and the
// plan share an instant), so a job over its tenant's limit is held rather
// than placed and then taken back.
func (s *simulator) settleSteward() error {
	// A new job Nomad cannot place is planned for at once: the controller
	// hears of Nomad's blocked evaluation within milliseconds and plans
	// then. Other changes wait for the plan interval.
	blocked := len(s.arrived) > 0 && !s.arrivalsJustFit()
	if blocked {
		s.wantPlan = true
	}
	s.arrived = s.arrived[:0]
	urgent := s.drainEnded || blocked
	s.drainEnded = false
	if s.wantPlan && !urgent && s.plans > 0 && s.now < s.lastPlan+s.cfg.PlanInterval {
		// Too soon after the last plan: plan when the interval is over
		// (a forced plan stays forced until then).
		if !s.deferred {
			s.deferred = true
			s.schedule(event{at: s.lastPlan + s.cfg.PlanInterval, kind: evWake, wake: eventWake{kind: wakeDeferred}})
		}
		s.wantPlan = false
	}
	planned := s.wantPlan && (len(s.queue) > 0 || len(s.heldList) > 0 || s.forcePlan)
	if planned {
		s.lastPlan = s.now
		plan := s.eng.Plan(s.snapshot(), epoch.Add(s.now))
		s.plans++
		s.skipped += len(plan.Skipped)
		if fairDebugPlan != nil {
			fairDebugPlan(s, plan)
		}
		for i := range plan.Actions {
			a := &plan.Actions[i]
			if s.watch != nil {
				s.watch(*a)
			}
			if err := s.apply(a); err != nil {
				return err
			}
		}
		s.m.holds.plan(s, plan)
		s.keepMarks(plan.Earmarks)
		s.dropMarks(plan.Unmarked)
		s.forcePlan = false
	}
	s.wantPlan = false
	s.placeQueued()
	if planned {
		s.wakeForFairShare()
	}
	return nil
}

// arrivalsJustFit reports whether the plan after arrivals alone can be
// skipped: when the new jobs and the work Nomad already has queued (which
// the engine admitted) fit together in free GPUs no one else was promised, and keep their tenants within their limits, the engine would
// admit them without a word, and its plan for held work cannot differ
// from the last one (time-based rules have wake-ups of their own). Nomad
// then places them.
func (s *simulator) arrivalsJustFit() bool {
	// GPUs being drained or given back for a beneficiary are its own: an
	// arrival fits only beside them.
	room := s.scratch
	copy(room, s.cl.free)
	for _, m := range s.marks {
		if s.now < m.until && s.jobs[m.bene].state.waiting() {
			room[m.node] = max(0, room[m.node]-m.gpus)
		}
	}
	for _, ji := range s.arrived {
		j := &s.jobs[ji]
		ten := s.m.tenants[j.tenant]
		if ten.Limit != policy.Unlimited && s.m.tenantUse[j.tenant]+s.m.tenantWaiting[j.tenant] > ten.Limit {
			return false
		}
	}
	for _, ji := range s.queue {
		j := &s.jobs[ji]
		for range j.spec.Allocs {
			n := s.cl.bestFitOf(room, j.spec.GPUs, j.model)
			if n < 0 {
				return false
			}
			room[n] -= j.spec.GPUs
		}
	}
	return true
}

// snapshot is the cluster as the controller would read it from Nomad.
func (s *simulator) snapshot() *engine.Snapshot {
	snap := &s.snap
	snap.Allocs = snap.Allocs[:0]
	snap.Waiting = snap.Waiting[:0]
	for _, ji := range s.active {
		j := &s.jobs[ji]
		job := s.engineJob(j)
		usage := s.usage(j)
		for _, a := range j.allocs {
			snap.Allocs = append(snap.Allocs, engine.Alloc{
				ID: a.id, Job: job, Group: "main", NodeID: s.cl.nodeIDs[a.node], GPUIDs: a.gpuIDs,
				StartedAt: epoch.Add(j.startedAt), Usage: usage, Draining: j.state == draining,
				For: s.drainFor(j), ForGroup: "main",
			})
		}
	}
	snap.Earmarks = s.earmarks(snap.Earmarks[:0])
	waiting := [][]int32{s.queue, s.heldList}
	for _, list := range waiting {
		for _, ji := range list {
			j := &s.jobs[ji]
			snap.Waiting = append(snap.Waiting, j.demand)
			d := &snap.Waiting[len(snap.Waiting)-1]
			d.Job = s.engineJob(j)
			d.Since, d.Held = epoch.Add(j.waitSince), j.state == held
			d.Requeued = j.state == held && j.idleStoppedAt >= 0
			// It ran before and was not released by an idle rule: it was
			// preempted mid-run, as the controller records it.
			d.Preempted = j.runs > 0 && j.idleStoppedAt < 0
		}
	}
	snap.WaitingOrder = s.waitingOrder(waiting)
	if s.m.fair.halfLife > 0 {
		// The decayed usage as of now: the event loop advanced the
		// metrics to s.now before this plan.
		if snap.Usage == nil {
			snap.Usage = make(map[string]float64, len(s.m.tenants))
		}
		for t, u := range s.m.fair.usage {
			snap.Usage[s.m.tenants[t].Name] = u
		}
	}
	return snap
}

// devicesOf is the device classes job j may use: nil for any.
func (s *simulator) devicesOf(j *simJob) []string {
	switch {
	case j.model >= 0:
		return s.modelDevices[j.model]
	case j.model == noModel:
		return []string{j.spec.Model}
	}
	return nil
}

func (s *simulator) engineJob(j *simJob) engine.Job {
	// The simulator keeps every stop's time, so the lifetime count is
	// their number (the controller keeps a count beside recent times).
	job := j.demand.Job // its reference, tier and shape
	job.Priority, job.Promoted = j.priority, j.priority != j.tierPrio
	job.Preemptions, job.PreemptionsTotal = j.preemptTimes, len(j.preemptTimes)
	return job
}

// usage is what the device plugin would report for a run: busy since it
// started, or idle since its idle tail began (one sample at the start of
// the idle stretch and one now).
func (s *simulator) usage(j *simJob) []engine.Sample {
	now := epoch.Add(s.now)
	if j.idleFrom < 0 {
		j.samples[0] = engine.Sample{At: now, Util: BusyUtil}
		return j.samples[:1]
	}
	j.samples[0] = engine.Sample{At: epoch.Add(j.idleFrom), Util: IdleUtil}
	j.samples[1] = engine.Sample{At: now, Util: IdleUtil}
	return j.samples[:2]
}

// apply carries out one action as the controller would: what it does is
// the one model of Nomad's (nomadmodel.Carry), carried out on the
// simulator's jobs and GPU owners (simNomad).
func (s *simulator) apply(a *engine.Action) error {
	return nomadmodel.Carry((*simNomad)(s), a, epoch.Add(s.now))
}

// simNomad is the simulator as the state Nomad is in (nomadmodel.State).
// A simulator job is one group placed all or none: a hold takes back the
// whole of a queued job, a resume releases the whole of a held one, and a
// stop stops all its allocations.
type simNomad simulator

func (n *simNomad) job(a *engine.Action) (int32, *simJob, error) {
	s := (*simulator)(n)
	ji, ok := s.byRef[a.Job]
	if !ok {
		return -1, nil, fmt.Errorf("engine acted on unknown job %s: %s", a.Job, a)
	}
	return ji, &s.jobs[ji], nil
}

func (n *simNomad) SetPriority(a *engine.Action, priority int, promoted bool) error {
	s := (*simulator)(n)
	ji, _, err := n.job(a)
	if err != nil {
		return err
	}
	s.setPriority(ji, priority)
	if promoted {
		s.m.promotion()
	}
	return nil
}

func (n *simNomad) Hold(a *engine.Action, h nomadmodel.Hold) error {
	s := (*simulator)(n)
	ji, j, err := n.job(a)
	if err != nil {
		return err
	}
	j.holdRule = string(a.Reason.Rule)
	if j.state == queued {
		s.dequeue(ji)
		s.setState(ji, held)
	}
	// Held while its victims checkpoint, it resumes as the last of
	// them stops, as the controller resumes it: ahead of Nomad's
	// queue, onto the GPUs they gave back.
	j.ahead = h.Draining
	if h.Draining {
		j.parked = true
	}
	return nil
}

func (n *simNomad) Resume(a *engine.Action, r nomadmodel.Resume) error {
	s := (*simulator)(n)
	ji, j, err := n.job(a)
	if err != nil {
		return err
	}
	if j.state == held {
		j.ahead = r.Ahead
	}
	if j.state == held && r.Wait && s.parkBeneficiary(ji) {
		return nil
	}
	j.parked = false // placed on GPUs free now: released at once
	if j.state == held {
		s.setState(ji, queued)
		s.enqueue(ji)
	}
	return nil
}

func (n *simNomad) Move(a *engine.Action, _ string) error {
	return fmt.Errorf("the simulator's nodes are all in one node pool: it cannot move a job: %s", a)
}

func (n *simNomad) Stop(a *engine.Action, st nomadmodel.Stop) error {
	s := (*simulator)(n)
	ji, j, err := n.job(a)
	if err != nil {
		return err
	}
	verb := "preempts"
	if !st.Preempted {
		verb = "idle-stops"
	}
	if j.state != running {
		return fmt.Errorf("engine %s %s, which is not running: %s", verb, a.Job, a)
	}
	if st.Drain && !st.Preempted {
		// The engine's idle stops send no checkpoint signal (an idle
		// job has no unsaved work).
		return fmt.Errorf("engine %s %s with a checkpoint signal, which the simulator does not model: %s", verb, a.Job, a)
	}
	// An idle job has no unsaved work: its busy part ended before it
	// went idle. What it still had to run is idle time.
	owed := j.spec.RunTime - s.workDone(j)
	if st.Preempted {
		s.preempted(j)
		s.m.preemptionRule(string(a.Reason.Rule))
		if a.MoveTo != "" {
			s.m.migration()
		}
		s.watchBeneficiary(ji, *a)
	} else {
		j.preemptTimes = append(j.preemptTimes, st.Decided)
	}
	if st.Drain {
		// Counted from now, under the decision's time, until the stop
		// (evictStopped): the controller's way (sim/evictions.go).
		j.evictDecided = j.preemptTimes[len(j.preemptTimes)-1]
	} else {
		s.wakeForEvictionCap(j)
	}
	if st.Drain {
		// The signal goes out a signal delay after the decision, and the
		// grace runs from it. The job checkpoints when the signal comes,
		// if the grace leaves it time to write the checkpoint; it keeps
		// running (work the checkpoint does not hold) and stops when the
		// grace is over (evGraceEnd), held.
		j.drainCheckpoint = st.Grace >= s.cfg.CheckpointCost
		j.signalAt = st.SignalAt.Sub(epoch)
		j.drainFor = -1
		if st.For != nil {
			if bi, ok := s.byRef[*st.For]; ok {
				j.drainFor = bi
			}
		}
		s.setState(ji, draining)
		j.drainEnd = st.End.Sub(epoch)
		if s.cfg.CheckpointDone && j.drainCheckpoint {
			// It says when the checkpoint is written: stopped then.
			j.drainEnd = j.signalAt + min(st.Grace, s.cfg.CheckpointCost+s.cfg.doneNotice())
		}
		s.extendMarks(j.drainFor, j.drainEnd)
		s.schedule(event{at: j.drainEnd, kind: evGraceEnd, job: ji, gen: j.gen})
		return nil
	}
	if st.For != nil {
		// Its GPUs go to the work it was stopped for, set aside for it.
		if bi, ok := s.byRef[*st.For]; ok {
			j.drainFor = bi
			s.markFreed(j)
		}
	}
	if st.Preempted {
		s.stopRun(ji, keepPeriodic) // no checkpoint: its last periodic one
	} else {
		s.stopRun(ji, keepAll)
		s.m.idleStop()
	}
	if !st.Requeue {
		s.m.reclaimed(j.gpus(), owed)
		s.setState(ji, stopped)
		s.m.stoppedForGood(j, s.now)
		return nil
	}
	if !st.Preempted {
		j.idleStoppedAt, j.idleOwed = s.now, owed
	}
	j.waitSince = s.now
	s.setState(ji, held)
	s.wakeForPromotion(j)
	return nil
}

func (s *simulator) setPriority(ji int32, p int) {
	j := &s.jobs[ji]
	if j.priority == p {
		return
	}
	switch j.state {
	case queued:
		s.dequeue(ji)
		j.priority = p
		s.enqueue(ji)
		return
	case running, draining:
		s.prioRun[j.priority]--
		s.prioRun[p]++
	}
	j.priority = p
}

// parkBeneficiary keeps a job the engine resumes out of Nomad's queue
// while victims still drain for it, as the controller does
// (beneficiaryDraining): released now, Nomad would place it on the first
// GPUs anyone frees, which may be GPUs freed for other work. It joins the
// queue when its last victim stops (unparkBeneficiary).
func (s *simulator) parkBeneficiary(ji int32) bool {
	s.jobs[ji].parked = s.victimsDraining(ji)
	return s.jobs[ji].parked
}

// unparkBeneficiary queues a parked job once no victim drains for it.
func (s *simulator) unparkBeneficiary(ji int32) {
	if ji < 0 || !s.jobs[ji].parked || s.victimsDraining(ji) {
		return
	}
	j := &s.jobs[ji]
	j.parked = false
	if j.state == held {
		s.setState(ji, queued)
		s.enqueue(ji)
	}
}

// victimsDraining reports whether some job drains for ji.
func (s *simulator) victimsDraining(ji int32) bool {
	for _, ai := range s.active {
		if a := &s.jobs[ai]; a.state == draining && a.drainFor == ji {
			return true
		}
	}
	return false
}
