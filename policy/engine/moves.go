package engine

import (
	"slices"
	"time"
)

// honourMoves applies the moves tenants made in their own waiting work
// (Demand.QueueAt, steward queue move) to order, the demands' indices
// sorted by class, then time. The demands of one tenant with one class
// code keep exactly the places they hold in order; only which of them
// stands in which place changes, by the time each ranks at (QueueAt when
// moved, else Since; ties keep the order they had). So a move reorders a
// tenant's own work and nothing else: every other tenant's demand, and
// the order between tenants (tier, reservation, priority, share), stay
// where they were. When no demand is moved, order is returned untouched:
// plans are the same as before moves existed.
func honourMoves(out []pending, order []int32, codes []uint64) []int32 {
	moved := false
	for i := range out {
		if !out[i].d.QueueAt.IsZero() {
			moved = true
			break
		}
	}
	if !moved {
		return order
	}
	type group struct {
		code   uint64
		tenant int
	}
	// The places of each group that holds a moved demand, in order.
	places := map[group][]int{}
	for at, p := range order {
		g := group{codes[p], out[p].tenant}
		places[g] = append(places[g], at)
	}
	rank := func(p int32) time.Time {
		if d := out[p].d; !d.QueueAt.IsZero() {
			return d.QueueAt
		}
		return out[p].d.Since
	}
	result := slices.Clone(order)
	for _, at := range places {
		members := make([]int32, len(at))
		anyMoved := false
		for i, a := range at {
			members[i] = order[a]
			anyMoved = anyMoved || !out[order[a]].d.QueueAt.IsZero()
		}
		if !anyMoved {
			continue
		}
		slices.SortStableFunc(members, func(a, b int32) int { return rank(a).Compare(rank(b)) })
		for i, a := range at {
			result[a] = members[i]
		}
	}
	return result
}
