package nomadmodel

import (
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// GPUs freed for a beneficiary stay its own, read back as
// Snapshot.Earmarks, until they lapse, as the controller keeps them
// (controller/earmarks.go): the free GPUs a preemption counted on beside
// its victims' until the victims' grace is over and MarkTTL more; the
// GPUs victims gave back until MarkTTL after the last drain for the same
// beneficiary ends. Marks of work that no longer waits are dropped after
// each round (dropMarks).

// MarkTTL is how long GPUs given back stay a beneficiary's once its
// victims have stopped, as the controller's markTTL: the round after
// they stop resumes it and Nomad places it at once; past this, something
// the engine cannot see keeps it off them.
const MarkTTL = time.Minute

// mark is GPUs on a node set aside for a waiting group, until until.
type mark struct {
	engine.Earmark
	until time.Time
}

// markBeside keeps the free GPUs each preemption of the plan counted on
// beside its victims' (Plan.Earmarks) for its beneficiary, as the
// controller's markBeside: until the first such action's grace is over
// and MarkTTL more.
func (c *Cluster) markBeside(plan *engine.Plan, now time.Time) {
	for _, m := range plan.Earmarks {
		for _, a := range plan.Actions {
			if (a.Kind == engine.Preempt || a.Kind == engine.IdleStop) && a.For != nil && *a.For == m.For {
				c.marks = append(c.marks, mark{Earmark: m, until: now.Add(SignalDelay + a.Grace + MarkTTL)})
				break
			}
		}
	}
}

// extendMarks keeps the GPUs already set aside for bene and not lapsed at
// now until MarkTTL after a new drain for it that ends at end: it is
// released only when the last of its victims stops.
func (c *Cluster) extendMarks(bene engine.JobRef, now, end time.Time) {
	until := end.Add(MarkTTL)
	for i := range c.marks {
		if m := &c.marks[i]; m.For == bene && now.Before(m.until) && m.until.Before(until) {
			m.until = until
		}
	}
}

// lastDrainFor is when the last drain for bene other than d ends, now
// when it is later (or bene is nil).
func (c *Cluster) lastDrainFor(bene *engine.JobRef, d *drain, now time.Time) time.Time {
	last := now
	for _, o := range c.drains {
		if o != d && bene != nil && o.forJob != nil && *o.forJob == *bene && o.end.After(last) {
			last = o.end
		}
	}
	return last
}
