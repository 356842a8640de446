package nomadmodel

import (
	"cmp"
	"slices"
	"time"
)

// queueOrder is the order in which Nomad's scheduler takes queued work:
// work the controller asked ahead of the queue first (a re-registration
// with a higher evaluation priority), then by priority, then by how long
// it waited, then by job and group (a stable order for ties).
func queueOrder(a, b *Group) int {
	if a.ahead != b.ahead {
		if a.ahead {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(b.Job.Priority, a.Job.Priority); c != 0 {
		return c
	}
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Job.Ref.String(), b.Job.Ref.String()); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// Place is Nomad placing its queue at now, without preemption (Steward
// runs with Nomad's off): each group in queue order, each allocation by
// BestFit on the nodes it fits; a gang's queued allocations all or none.
// It returns the allocations placed.
func (c *Cluster) Place(now time.Time) []string {
	var order []*Group
	for _, g := range c.groups {
		if c.queued(g) > 0 {
			order = append(order, g)
		}
	}
	slices.SortStableFunc(order, queueOrder)
	free := make([]int, len(c.nodes))
	for n := range c.nodes {
		free[n] = c.free(n)
	}
	var placed []string
	for _, g := range order {
		d := c.demand(g)
		fits := func(n int) bool { return Fits(&d, &c.nodes[n]) }
		want := c.queued(g)
		var nodes []int
		for range want {
			n := BestFitWhere(free, g.GPUsPerAlloc, fits)
			if n < 0 {
				break
			}
			free[n] -= g.GPUsPerAlloc
			nodes = append(nodes, n)
		}
		if g.Job.Gang && len(nodes) < want {
			for _, n := range nodes {
				free[n] += g.GPUsPerAlloc // all or nothing: given back
			}
			continue
		}
		for _, n := range nodes {
			placed = append(placed, c.start(g, n, now))
		}
	}
	return placed
}
