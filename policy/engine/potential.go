package engine

import (
	"slices"
)

// Potential: for large allocations (a whole node's GPUs), the best-first
// walk over all candidates would pass thousands of victims before one node
// gathers enough. Instead the engine keeps, per priority level, every
// node's potential (free GPUs plus GPUs of preemptible work at or below that
// level) in the same lazy buckets as free capacity, and examines only the
// nodes whose potential fits.
//
// Level 0 counts free GPUs plus idle work (a victim for anyone);
// level i adds work of priority at most levels[i-1].

// walkBudget is how many candidates the best-first walk passes before the
// engine switches to the node-first search.
const walkBudget = 256

func (st *state) buildPotential() {
	for _, ui := range st.cands[0].units {
		if u := &st.units[ui]; !u.isAlwaysVictim() {
			st.levels = append(st.levels, u.prio)
		}
	}
	slices.Sort(st.levels)
	st.levels = slices.Compact(st.levels)
	pot := make([][]int32, len(st.levels)+1)
	for k := range pot {
		pot[k] = slices.Clone(st.cap.free)
	}
	st.nodeUnits = make([][]int32, len(st.nodes))
	for _, ui := range st.cands[0].units {
		u := &st.units[ui]
		lvl := st.levelOf(u)
		u.nodesOf(func(n int32, g int) {
			st.nodeUnits[n] = append(st.nodeUnits[n], ui)
			for k := lvl; k < len(pot); k++ {
				pot[k][n] += int32(g)
			}
		})
	}
	st.lb = make([]uint64, len(st.nodes)*(st.maxGPUs+1))
	for n := range st.nodes {
		st.bound(int32(n))
	}
	maxPot := st.maxGPUs
	st.pot = make([]*capacity, len(pot))
	for k := range pot {
		st.pot[k] = newCapacity(st.poolOf, len(st.pools), maxPot)
		st.pot[k].fill(pot[k])
	}
}

// isAlwaysVictim: idle work in pressure mode gives way to anyone. (Backfill
// gives way only to a pool's owners, which outrank it anyway.)
func (u *unit) isAlwaysVictim() bool {
	return u.idle.ok && u.idle.rule.Mode == "pressure"
}

// levelOf is the first level that counts a unit.
func (st *state) levelOf(u *unit) int {
	if u.isAlwaysVictim() {
		return 0
	}
	i, _ := slices.BinarySearch(st.levels, u.prio)
	return i + 1
}

// levelFor is the level that holds every victim b may take.
func (st *state) levelFor(b *bene) int {
	if b.entitled {
		return len(st.levels)
	}
	i, _ := slices.BinarySearch(st.levels, b.prio) // levels below b.prio
	return i
}

// movePotential records that GPUs of a unit at level lvl on node n turned
// free (delta > 0: taken) or back (delta < 0): levels that count the unit
// see no change; levels below it see free GPUs change.
func (st *state) movePotential(n int32, lvl int, delta int32) {
	if st.pot == nil {
		return
	}
	st.bound(n)
	for k := 0; k < lvl && k < len(st.pot); k++ {
		st.pot[k].add(n, delta)
	}
}

// placePotential records g GPUs placed on (delta < 0) or freed from node n.
func (st *state) placePotential(n int32, delta int32) {
	st.bound(n)
	for _, p := range st.pot {
		p.add(n, delta)
	}
}

// bound recomputes node n's lower bounds: for each g, the key of the unit
// at which free GPUs plus every preemptible unit, best first, reach g. No
// beneficiary can complete g GPUs on n with a better worst victim.
func (st *state) bound(n int32) {
	row := st.lb[int(n)*(st.maxGPUs+1) : (int(n)+1)*(st.maxGPUs+1)]
	have := int(st.cap.free[n])
	g := 0
	for ; g <= have && g < len(row); g++ {
		row[g] = 0
	}
	for _, ui := range st.nodeUnits[n] {
		u := &st.units[ui]
		if u.taken {
			continue
		}
		have += st.gpusOn(u, n)
		for ; g <= have && g < len(row); g++ {
			row[g] = u.key
		}
	}
	for ; g < len(row); g++ {
		row[g] = ^uint64(0)
	}
}

// searchNodes examines every node whose potential fits one allocation of b
// and returns the one whose worst victim is best, as the walk would have.
func (st *state) searchNodes(b *bene, allowYoung bool) (int32, []victim, bool) {
	w := &st.walk
	w.reset(len(st.nodes))
	var best int32 = -1
	var bestKey uint64
	var bestUI int32
	stride := st.maxGPUs + 1
	st.pot[st.levelFor(b)].each(b.pool, b.g, func(n int32) {
		if best >= 0 && st.lb[int(n)*stride+b.g] > bestKey {
			return // cannot beat the best node found
		}
		w.touch(n)
		for _, ui := range st.nodeUnits[n] {
			u := &st.units[ui]
			if best >= 0 && (u.key > bestKey || (u.key == bestKey && ui > bestUI)) {
				return // every further victim here is worse than the best node's
			}
			if u.taken {
				continue
			}
			if st.addVictim(ui, b, n, allowYoung) {
				if best < 0 || u.key < bestKey || (u.key == bestKey && ui < bestUI) {
					best, bestKey, bestUI = n, u.key, ui
				}
				return
			}
		}
	})
	if best < 0 {
		return 0, nil, false
	}
	return best, st.prune(best, b.g), true
}
