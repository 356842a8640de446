package nomadmodel

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Apply carries out one action at now as the controller makes Nomad do
// it (controller/act.go):
//
//   - Preempt, IdleStop: a drain (drain.go). With a checkpoint signal
//     and a grace the victims run on, draining, until SignalDelay and
//     the grace have passed (Advance); without, they stop now. A preempted
//     or requeued group is then held; an idle stop without requeue lowers
//     the count for good.
//   - Hold: the group's count lowered by what Nomad has not placed, at
//     most a.Count: a hold never stops running work.
//   - Resume: the count raised by a.Count held allocations, ahead of
//     Nomad's queue when a.Ahead; nothing while victims still drain for
//     the job and a.AfterVictims (the round that stops them resumes it).
//   - Move: the job's node pool.
//   - Promote, SetPriority: the job's priority; Promoted for a Promote
//     only.
func (c *Cluster) Apply(a engine.Action, now time.Time) error {
	switch a.Kind {
	case engine.Preempt, engine.IdleStop:
		return c.startDrain(a, now)
	case engine.Hold:
		g, err := c.actionGroup(a)
		if err != nil {
			return err
		}
		n := min(max(a.Count, 0), c.queued(g))
		g.Count -= n
		g.Held += n
	case engine.Resume:
		if a.AfterVictims && c.drainingFor(a.Job) {
			return nil
		}
		g, err := c.actionGroup(a)
		if err != nil {
			return err
		}
		n := min(max(a.Count, 0), g.Held)
		if n == 0 {
			return nil
		}
		g.Held -= n
		g.Count += n
		g.ahead = a.Ahead
		if g.Held == 0 {
			g.Requeued, g.OwnerResumed = false, false
		}
	case engine.Move:
		if len(c.jobGroups(a.Job)) == 0 {
			return fmt.Errorf("nomadmodel: %s: no such job", a)
		}
		for _, g := range c.jobGroups(a.Job) {
			g.NodePool = a.NodePool
		}
	case engine.Promote, engine.SetPriority:
		if len(c.jobGroups(a.Job)) == 0 {
			return fmt.Errorf("nomadmodel: %s: no such job", a)
		}
		c.setJob(a.Job, func(j *engine.Job) {
			j.Priority, j.Promoted = a.Priority, a.Kind == engine.Promote
		})
	default:
		return fmt.Errorf("nomadmodel: action of unknown kind: %s", a)
	}
	return nil
}

func (c *Cluster) actionGroup(a engine.Action) (*Group, error) {
	g := c.group(a.Job, a.Group)
	if g == nil {
		return nil, fmt.Errorf("nomadmodel: %s: no group %s/%s", a, a.Job, a.Group)
	}
	return g, nil
}

// Round is one controller round at now: drains due finish, the engine
// plans on the snapshot, the plan is carried out, and Nomad places its
// queue. It returns the plan.
func (c *Cluster) Round(e *engine.Engine, now time.Time) (*engine.Plan, error) {
	c.Advance(now)
	plan := e.Plan(c.Snapshot(), now)
	for _, a := range plan.Actions {
		if err := c.Apply(a, now); err != nil {
			return plan, err
		}
	}
	c.marks = append(c.marks, plan.Earmarks...)
	for _, u := range plan.Unmarked {
		c.marks = slices.DeleteFunc(c.marks, func(m engine.Earmark) bool { return m.NodeID == u.NodeID && m.For == u.For })
	}
	c.Place(now)
	c.dropMarks()
	return plan, nil
}
