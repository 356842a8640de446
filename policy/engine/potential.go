package engine

import (
	"slices"
)

// Potential: for large allocations (a whole node's GPUs), the best-first
// walk over all candidates would pass thousands of victims before one node
// gathers enough. Instead the engine keeps, per priority level, every
// node's potential (free GPUs plus GPUs of preemptible work at or below that
// level) in the same lazy buckets as free capacity, and examines only the
// nodes whose potential fits. It reads them in order of a lower bound on
// their worst needed victim (nodeorder.go) and stops at the first node
// that cannot beat the best found: a handful of nodes per search, not all.
//
// Level 0 counts free GPUs plus idle work (a victim for anyone);
// level i adds work of priority at most levels[i-1].

// walkBudget is how many candidates the best-first walk passes before the
// engine switches to the node-first search.
const walkBudget = 256

func (ix *nodeIndex) buildPotential() {
	m := ix.m
	for _, ui := range ix.cands[0].units {
		// A handful of distinct priorities among thousands of units: look
		// before adding rather than sort them all.
		if u := &m.units[ui]; u.idle != idlePressure && !slices.Contains(ix.levels, u.prio) {
			ix.levels = append(ix.levels, u.prio)
		}
	}
	slices.Sort(ix.levels)
	pot := make([][]int32, len(ix.levels)+1)
	for k := range pot {
		pot[k] = slices.Clone(ix.cap.free)
	}
	// Every node's preemptible units, best victims first, carved out of
	// one array: count them per node, then fill.
	count, total := grow(m.sc.count, len(m.nodes)), 0
	clear(count)
	m.sc.count = count
	for _, ui := range ix.cands[0].units {
		m.nodesOf(&m.units[ui], func(n int32, _ int) { count[n]++; total++ })
	}
	all := slices.Grow(m.sc.nodeUnits[:0], total)
	m.sc.nodeUnits = all
	ix.nodeUnits = grow(m.sc.perNode, len(m.nodes))
	for n, c := range count {
		ix.nodeUnits[n], all = all[len(all):len(all):len(all)+c], all[:len(all)+c]
	}
	m.sc.nodeUnits = all // every node's, end to end (waitbars.go reads them so)
	for _, ui := range ix.cands[0].units {
		u := &m.units[ui]
		lvl := ix.levelOf(u)
		m.nodesOf(u, func(n int32, g int) {
			ix.nodeUnits[n] = append(ix.nodeUnits[n], nodeUnit{key: u.key, ui: ui, gpus: int32(g), lvl: int32(lvl), taken: u.taken,
				tenant: int32(u.tenant), tierPrio: int32(m.e.tiers[u.tier].priority), exempt: u.idle == idlePressure || u.backfill,
				chained: u.chain >= 0})
			for k := lvl; k < len(pot); k++ {
				pot[k][n] += int32(g)
			}
		})
	}
	ix.lb = grow(m.sc.lb, len(m.nodes)*(m.maxGPUs+1)) // bound sets every entry
	for n := range m.nodes {
		ix.bound(int32(n))
	}
	maxPot := m.maxGPUs
	ix.pot = make([]*capacity, len(pot))
	for k := range pot {
		ix.pot[k] = newLazyCapacity(&m.pl, maxPot)
		ix.pot[k].fill(pot[k])
	}
	ix.dirty.marked = make([]bool, len(m.nodes))
	ix.dirty.levels = make([]int32, len(pot))
}

// nodeUnit is a preemptible unit as one node sees it: what the node-first
// search and the bounds read, kept beside the node's other units rather
// than in the (large, scattered) unit itself.
//
// Its fields are laid out so that it takes 32 bytes, not the 40 it took
// with a bool last (TestNodeUnitSize): the searches and bounds read the
// lists of thousands of nodes a plan (100,000 units on the fleet
// benchmark), and two now fill a 64-byte cache line where 40-byte ones
// straddled lines.
type nodeUnit struct {
	key   uint64
	ui    int32
	gpus  int32 // on this node
	lvl   int32 // levelOf(units[ui])
	taken bool  // mirrors units[ui].taken (see setTaken)
	// What a wait promotion's potential reads (waitbars.go): whether the
	// unit is idle (under pressure) or backfill work, which rules before
	// the bar may give, its tenant, and its tier's priority.
	exempt bool
	// chained: the unit is in a chain (chains.go), whose search may take
	// another unit of its group in its place, so no bar judges it here.
	chained  bool
	tenant   int32
	tierPrio int32
}

// setTaken mirrors a unit's taken flag into node n's list.
func (ix *nodeIndex) setTaken(n int32, ui int32, taken bool) {
	if ix.nodeUnits == nil {
		return
	}
	for i := range ix.nodeUnits[n] {
		if nu := &ix.nodeUnits[n][i]; nu.ui == ui {
			nu.taken = taken
			return
		}
	}
}

// levelOf is the first level that counts a unit. Idle work in pressure
// mode gives way to anyone: level 0. (Backfill gives way only to a pool's
// owners, which outrank it anyway.)
func (ix *nodeIndex) levelOf(u *unit) int {
	if u.idle == idlePressure {
		return 0
	}
	i, _ := slices.BinarySearch(ix.levels, u.prio)
	return i + 1
}

// levelFor is the level that holds every victim b may take.
func (ix *nodeIndex) levelFor(b *bene) int {
	if b.entitled {
		return len(ix.levels)
	}
	i, _ := slices.BinarySearch(ix.levels, b.prio) // levels below b.prio
	return i
}

// dirtyNodes are nodes whose free GPUs or taken units changed since their
// potentials and bounds were last brought up to date. A placement that
// preempts changes a node several times (each victim, then the
// allocation): the search structures follow once, when next read.
type dirtyNodes struct {
	nodes  []int32
	marked []bool  // [node]
	levels []int32 // settleNode's scratch: GPUs per level
}

// touched records that node n's free GPUs or taken units changed.
func (ix *nodeIndex) touched(n int32) {
	if ix.pot == nil || ix.dirty.marked[n] {
		return
	}
	ix.dirty.marked[n] = true
	ix.dirty.nodes = append(ix.dirty.nodes, n)
}

// settle brings the potentials and bounds of changed nodes up to date. The
// searches call it before they read them.
func (ix *nodeIndex) settle() {
	for _, n := range ix.dirty.nodes {
		ix.dirty.marked[n] = false
		ix.settleNode(n)
	}
	if len(ix.bars) > 0 {
		ix.settled = append(ix.settled, ix.dirty.nodes...) // for barPotentialFor
	}
	ix.dirty.nodes = ix.dirty.nodes[:0]
}

// settleNode recomputes node n's potential at every level (its free GPUs
// plus those of its untaken units counted at that level) and its bounds.
func (ix *nodeIndex) settleNode(n int32) {
	add := ix.dirty.levels
	clear(add)
	for _, nu := range ix.nodeUnits[n] {
		if !nu.taken {
			add[nu.lvl] += nu.gpus
		}
	}
	pot := ix.cap.free[n]
	for k, p := range ix.pot {
		if pot += add[k]; p.free[n] != pot {
			p.add(n, pot-p.free[n])
		}
	}
	ix.bound(n)
}

// noBound marks a node that cannot gather g GPUs whatever it preempts.
const noBound = ^uint64(0)

// bound recomputes node n's lower bounds: for each g, the key of the unit
// at which free GPUs plus every preemptible unit, best first, reach g. No
// beneficiary can complete g GPUs on n with a better worst victim. Bounds
// that change are refiled in the node order.
func (ix *nodeIndex) bound(n int32) {
	m := ix.m
	row := ix.lb[int(n)*(m.maxGPUs+1) : (int(n)+1)*(m.maxGPUs+1)]
	units := ix.nodeUnits[n]
	have, next := int(ix.cap.free[n]), 0
	var lb uint64 // free GPUs alone suffice
	changed := ix.order.changed[:0]
	for g := range row {
		for g > have {
			if next == len(units) {
				lb = noBound
				break
			}
			nu := &units[next]
			next++
			if !nu.taken {
				have += int(nu.gpus)
				lb = nu.key
			}
		}
		if row[g] != lb {
			row[g] = lb
			changed = append(changed, g)
		}
	}
	ix.order.changed = changed
	ix.refile(n, changed)
}

// searchSorted is how many nodes a search reads in bound order before it
// concludes that few nodes can serve the beneficiary and scans the rest
// unordered: reading in order costs a logarithm per node, and a search
// that finds nothing must read every node anyway.
const searchSorted = 128

// barLevelSorted is how many nodes a wait promotion reads in its level's
// order before it reads on in its kind's own order (waitbars.go, order):
// the level's order counts work the bar refuses, so past its first few
// nodes it seldom serves the kind, and the kind's order, once built,
// serves the kind's later searches there too. On the fleet benchmark
// (TestFleetSearchCounts; instructions a plan under callgrind) 128 read
// 57,687 nodes in the level's orders and tried 19,581 a plan, 32 read
// 11,168 and try 7,354, for 67 orders built rather than 38: 2 % fewer
// instructions; 64 and 48 did about as well, 16 a little worse, 4 worse
// than 128.
const barLevelSorted = 32

// nodePick is the best node found so far: its worst victim (key, unit)
// and other nodes where that same unit (a gang's) completes the allocation.
type nodePick struct {
	n    int32
	key  uint64
	ui   int32
	ok   bool
	ties []int32
}

// searchNodes examines every node whose potential fits one allocation of b
// and returns the one whose worst victim is best, as the walk would have
// (between nodes where the same gang is that victim, the first in the
// gang's order, as the walk would). Nodes are read in order of their lower
// bound, so the search stops at the first node that cannot beat the best
// found. A demand promoted for waiting reads its own potential
// (waitbars.go). TestSearchMatchesBruteForce holds it to that definition.
func (st *state) searchNodes(b *bene, allowYoung bool) (int32, []victim, bool) {
	if b.g > st.maxGPUs {
		return 0, nil, false // larger than any node
	}
	st.settle()
	w := &st.walk
	w.reset(len(st.nodes))
	pot := st.pot[st.levelFor(b)]
	p := &st.pick
	*p = nodePick{ties: p.ties[:0]}
	h := st.heap(b.pool, b.g)
	bp := st.barPotentialFor(b)
	c := &st.order.counts
	reads := &c.levelReads
	limit := searchSorted
	if bp != nil {
		c.searches++
		pot = bp.cap // a wait promotion's: it leaves out nodes b cannot complete
		limit = barLevelSorted
		if kh := bp.ordered(&st.nodeIndex, b.pool, b.g); kh != nil {
			h = kh // and orders them by the work b may take (waitbars.go)
			st.order.kindOrdered++
			reads, limit = &c.ownReads, searchSorted
		}
	}
	read, scan := 0, false
	visit := func(n int32, lb uint64) bool {
		if p.ok && lb > p.key {
			return false // no node from here on can beat the best
		}
		if read++; read > limit {
			scan = true
			return false
		}
		if bp != nil {
			*reads++
		}
		if pot.free[n] >= int32(b.g) && !w.walked(n) {
			st.tryNode(p, n, b, bp, allowYoung)
		}
		return true
	}
	st.ascend(h, visit)
	if scan && bp != nil && bp.ordered(&st.nodeIndex, b.pool, b.g) == nil {
		// The level's order failed the kind here: read on in the kind's
		// own order, built now (it serves the kind's next searches here
		// too), rather than scan the pool. The pick is the same: both
		// try every node that can still beat the best.
		read, scan, limit = 0, false, searchSorted
		reads = &c.ownReads
		st.ascend(bp.order(&st.nodeIndex, b.pool, b.g, h), visit)
	}
	if scan {
		st.order.scans++
		stride := st.maxGPUs + 1
		pot.each(b.pool, b.g, func(n int32) {
			if w.walked(n) || p.ok && st.lb[int(n)*stride+b.g] > p.key {
				return // walked already, or cannot beat the best
			}
			st.tryNode(p, n, b, bp, allowYoung)
		})
	}
	if !p.ok {
		return 0, nil, false
	}
	if len(p.ties) > 0 {
		p.n = st.firstInSpread(p.ui, p.n, p.ties)
	}
	return p.n, st.prune(b, p.n), true
}

// tryNode walks node n's units best first, as far as they can still beat
// the best node, and records n if they complete one allocation of b. A
// wait promotion (bp not nil) passes over the units its bar surely
// refuses without asking addVictim, which would refuse them with no other
// effect: most of the units its searches meet (on the fleet benchmark,
// about 9 in 10).
func (st *state) tryNode(p *nodePick, n int32, b *bene, bp *barPotential, allowYoung bool) {
	st.walk.touch(n)
	if bp != nil {
		st.order.counts.tries++
	}
	for _, nu := range st.nodeUnits[n] {
		if p.ok && (nu.key > p.key || (nu.key == p.key && nu.ui > p.ui)) {
			return // every further victim here is worse than the best node's
		}
		if nu.taken || bp != nil && !nu.chained && bp.refuses(&nu) {
			continue
		}
		if st.addVictim(nu.ui, b, n, allowYoung) {
			if p.ok && nu.key == p.key && nu.ui == p.ui {
				p.ties = append(p.ties, n)
			} else {
				p.n, p.key, p.ui, p.ok = n, nu.key, nu.ui, true
				p.ties = p.ties[:0]
			}
			return
		}
	}
}

// firstInSpread breaks a tie between nodes whose worst victim is the same
// gang: the walk would have taken the first of them in the gang's order.
func (c *cluster) firstInSpread(ui int32, n int32, ties []int32) int32 {
	for _, ng := range c.gangs[c.units[ui].gang].spread {
		if ng.node == n || slices.Contains(ties, ng.node) {
			return ng.node
		}
	}
	return n
}
