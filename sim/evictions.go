package sim

import (
	"slices"
	"time"
)

// A drained preemption counts toward the eviction cap and the lifetime
// bound as the controller counts it. From its decision it is pending: the
// controller's snapshot shows it among the job's preemptions at the time it
// was decided (controller/snapshot.go, JobState.pendingEvictions in
// controller/state.go), so the engine spares the job from then on. When the
// grace ends and the victims stop, finishDrain records it at the stop
// (controller/act.go: countEviction, JobState.preempted(r.now)): it leaves
// the cap's hour an hour after the stop, not after the decision. Victims
// that finished their work within the grace are not evicted: finishDrain
// counts nothing for a group's (not a gang's) drain whose victims all
// completed (r.endedVictims), and the pending time goes with the drain.

// evictStopped ends a pending drained eviction of j as its grace ends:
// stopped, it counts from now; completed (not stopped), it no longer
// counts unless j is a gang, whose whole-job drain finishDrain counts
// whatever its allocations did.
func (s *simulator) evictStopped(j *simJob, stopped bool) {
	if j.evictDecided.IsZero() {
		return
	}
	i := slices.Index(j.preemptTimes, j.evictDecided)
	j.evictDecided = time.Time{}
	if i < 0 {
		return
	}
	if !stopped && j.spec.Allocs <= 1 {
		j.preemptTimes = slices.Delete(j.preemptTimes, i, i+1)
		return
	}
	j.preemptTimes[i] = epoch.Add(s.now)
	slices.SortFunc(j.preemptTimes, func(a, b time.Time) int { return a.Compare(b) })
	s.wakeForEvictionCap(j)
}
