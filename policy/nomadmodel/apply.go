package nomadmodel

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Apply carries out one action at now as the controller makes Nomad do
// it (controller/act.go), by Carry, on the model's lists:
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
	return Carry(modelState{c: c, now: now}, &a, now)
}

// modelState is the model's Cluster as a State at now.
type modelState struct {
	c   *Cluster
	now time.Time
}

func (m modelState) Stop(a *engine.Action, s Stop) error { return m.c.startDrain(a, s) }

func (m modelState) Hold(a *engine.Action, h Hold) error {
	g, err := m.c.actionGroup(*a)
	if err != nil {
		return err
	}
	n := min(h.Count, m.c.queued(g))
	g.Count -= n
	g.Held += n
	return nil
}

func (m modelState) Resume(a *engine.Action, r Resume) error {
	if r.Wait && m.c.drainingFor(a.Job) {
		return nil
	}
	g, err := m.c.actionGroup(*a)
	if err != nil {
		return err
	}
	n := min(r.Count, g.Held)
	if n == 0 {
		return nil
	}
	g.Held -= n
	g.Count += n
	g.ahead = r.Ahead
	if g.Held == 0 {
		g.Requeued, g.OwnerResumed = false, false
	}
	return nil
}

func (m modelState) Move(a *engine.Action, pool string) error {
	if len(m.c.jobGroups(a.Job)) == 0 {
		return fmt.Errorf("nomadmodel: %s: no such job", a)
	}
	for _, g := range m.c.jobGroups(a.Job) {
		g.NodePool = pool
	}
	return nil
}

func (m modelState) SetPriority(a *engine.Action, priority int, promoted bool) error {
	if len(m.c.jobGroups(a.Job)) == 0 {
		return fmt.Errorf("nomadmodel: %s: no such job", a)
	}
	m.c.setJob(a.Job, func(j *engine.Job) { j.Priority, j.Promoted = priority, promoted })
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
	return plan, c.CarryOut(plan, now)
}

// CarryOut is the rest of a round once the engine planned at now: each
// action applied, the GPUs the plan sets aside kept for their
// beneficiaries (and those it gives to urgent work forgotten) between
// rounds, as the controller keeps them (Snapshot.Earmarks), and Nomad
// placing its queue.
func (c *Cluster) CarryOut(plan *engine.Plan, now time.Time) error {
	for _, a := range plan.Actions {
		if err := c.Apply(a, now); err != nil {
			return err
		}
	}
	c.markBeside(plan, now)
	for _, u := range plan.Unmarked {
		c.marks = slices.DeleteFunc(c.marks, func(m mark) bool { return m.NodeID == u.NodeID && m.For == u.For })
	}
	c.Place(now)
	c.dropMarks()
	return nil
}
