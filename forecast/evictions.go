package forecast

import (
	"slices"
	"time"
)

// A drained eviction counts toward the eviction cap and the lifetime
// bound as the controller counts it: from its decision, under the
// decision's time (the controller's snapshot shows it pending then:
// JobState.pendingEvictions, controller/state.go), and once the grace
// ends and the victims stop, under the stop's time (finishDrain's
// countEviction, JobState.preempted(r.now), controller/act.go): it leaves
// the cap's hour an hour after the stop. Victims that finished their work
// within the grace were not evicted: finishDrain counts nothing for a
// group's drain whose victims all completed, and the pending time goes.
// (A drain already in the snapshot keeps its decision's time: the
// snapshot does not say which of the job's times is its own.)

// endedDrain is a draining allocation whose run ended in this step:
// stopped as its grace ended, or completed within it.
type endedDrain struct {
	a       ralloc
	stopped bool
}

// stopEvictions ends the pending evictions of the drains whose
// allocations ended in this step (endRuns): one stopped, the drain counts
// from its stop, once however many of its allocations stop; all of them
// completed, it no longer counts, unless the job is a gang, whose
// whole-job drain finishDrain counts whatever its allocations did.
func (r *replay) stopEvictions(ended []endedDrain) {
	for _, e := range ended {
		if e.stopped {
			r.moveEviction(e.a, e.a.drainEnd)
		}
	}
	for _, e := range ended {
		switch {
		case e.stopped || r.stillDrains(e.a):
		case e.a.a.Job.Gang:
			r.moveEviction(e.a, e.a.drainEnd)
		default:
			r.moveEviction(e.a, time.Time{})
		}
	}
}

// stillDrains reports whether another allocation of a's drain runs on.
func (r *replay) stillDrains(a ralloc) bool {
	return slices.ContainsFunc(r.allocs, func(o ralloc) bool {
		return o.a.Job.Ref == a.a.Job.Ref && o.drainDecided.Equal(a.drainDecided)
	})
}

// moveEviction moves a's drain's pending time to t, or drops it (t zero);
// nothing when it was moved already.
func (r *replay) moveEviction(a ralloc, t time.Time) {
	j := r.jobs[a.a.Job.Ref]
	if j == nil || a.drainDecided.IsZero() {
		return
	}
	i := slices.Index(j.preemptions, a.drainDecided)
	if i < 0 {
		return
	}
	// The times may be the snapshot's own slice: changed on a copy.
	p := slices.Clone(j.preemptions)
	if t.IsZero() {
		j.preemptions = slices.Delete(p, i, i+1)
		j.total--
		return
	}
	p[i] = t
	slices.SortFunc(p, func(x, y time.Time) int { return x.Compare(y) })
	j.preemptions = p
}
