package nomadmodel

import (
	"slices"

	"github.com/gpu-steward/steward/policy/engine"
)

// demand is g's shape as a waiting demand, with no count.
func (c *Cluster) demand(g *Group) engine.Demand {
	return engine.Demand{Job: c.withPending(g.Job), Group: g.Name, GPUsPerAlloc: g.GPUsPerAlloc, Since: g.Since,
		NodePool: g.NodePool, Devices: g.Devices, Nodes: g.Nodes, Preempted: g.Preempted}
}

// Snapshot is the cluster as the controller reads it for the engine:
// running and draining allocations, each group's queued and held work,
// and the GPUs set aside for beneficiaries.
func (c *Cluster) Snapshot() *engine.Snapshot {
	s := &engine.Snapshot{Nodes: slices.Clone(c.nodes)}
	for _, m := range c.marks {
		s.Earmarks = append(s.Earmarks, m.Earmark)
	}
	for _, al := range c.allocs {
		a := al.a
		a.Job = c.withPending(al.group.Job)
		a.GPUIDs = slices.Clone(a.GPUIDs)
		s.Allocs = append(s.Allocs, a)
	}
	for _, g := range c.groups {
		if q := c.queued(g); q > 0 {
			d := c.demand(g)
			d.Count = q
			s.Waiting = append(s.Waiting, d)
		}
		if g.Held > 0 {
			d := c.demand(g)
			d.Count, d.Held = g.Held, true
			d.Requeued, d.OwnerResumed = g.Requeued, g.Requeued && g.OwnerResumed
			s.Waiting = append(s.Waiting, d)
		}
	}
	return s
}
