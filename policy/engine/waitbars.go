package engine

import "slices"

// Potentials for wait promotions. A job promoted for waiting takes no work
// of its tier's priority from its own tenant, nor from tenants that run no
// more of its tier (ownswap.go). The level potentials and the bounds count
// that work all the same, so for such a beneficiary they promise nodes
// that its rules then refuse, one unit at a time: the node-first search
// read its 128 best nodes by bound, found none, and fell back to trying
// every node of the pool (on the 10,000-node fleet benchmark, 270,000
// node tries a plan, nine in ten of them for wait promotions, and half
// the plan's time).
//
// So each kind of wait promotion (level, tier, tenant, entitlement) gets a
// potential of its own that leaves out the work its bar surely refuses,
// built on its first search and kept up with the nodes the plan changes.
// It is still an upper bound on what the beneficiary may gather on a node
// (it keeps whatever the bar might let through: idle and backfill work, a
// reclaim's victims in other tenants), so the search tries the same nodes
// that can complete an allocation, and finds the same one; it just never
// tries the others.

// barKind is what a wait-promoted beneficiary's potential depends on: its
// level and tier; entitled, its tenant (whose own work the bar refuses,
// other tenants' a reclaim may take); otherwise what its tenant runs of
// the tier (the bar refuses the work of every tenant that runs no more),
// so that the tenants that run alike share one.
type barKind struct {
	level, tier int
	entitled    bool
	tenant      int // entitled only; -1 otherwise
	held        int // not entitled only; -1 otherwise
}

// is reports whether k and o are the same kind: ==, field by field, and
// inlined (== on the struct called the compiler's equality function, once
// for each kind barPotentialFor passes: 80,000 calls in three fleet plans).
func (k *barKind) is(o *barKind) bool {
	return k.level == o.level && k.tier == o.tier && k.held == o.held && k.tenant == o.tenant && k.entitled == o.entitled
}

// barPotential is one kind's potential: per node, its free GPUs plus the
// GPUs of its untaken units counted at the kind's level that the bar does
// not surely refuse.
type barPotential struct {
	kind   barKind
	base   int32  // the tier's own priority
	barred []bool // [tenant] whose work of priority base the bar refuses
	cap    *capacity
	seen   int // ix.settled[:seen] are reflected in cap, refused and heaps
	// refused counts, per node, the untaken units outside chains that the
	// bar surely refuses, at any level. Where there are none, the kind's
	// bound for any g is the level's (bound): on the fleet benchmark
	// most of the nodes an own order files.
	refused []int32
	// heaps, [pool][g], are the kind's own node order (nodeorder.go) for
	// the pools and GPU counts where the level's order failed it: the
	// nodes whose potential fits g, by their bound over the units the bar
	// does not surely refuse. nil until then.
	heaps [][]*lbHeap
	// built lists those orders, for settleNode: it visited every pool
	// below the highest with an order, and every GPU count of each
	// (0.6 M instructions a fleet plan), to mark a few.
	built []builtOrder
}

// builtOrder is one of a kind's own node orders and its pool.
type builtOrder struct {
	pool int32
	h    *lbHeap
}

// barPotentialFor returns the potential of b's kind when a wait
// promotion's bar applies to b, building it on first use; nil otherwise.
// Call after settle.
//
// b's kind is found once for each value of b.entitled (kindOf) and kept
// in b: it depends on that, on b's tier, tenant, priority and job, which
// do not change while b is served, and on the tenants' tier figures as
// the plan starts (tierHeld); asked afresh, each of b's searches compared
// it with every kind the plan had built (0.5 M instructions a fleet plan).
func (ix *nodeIndex) barPotentialFor(b *bene) *barPotential {
	if b.kindIx != ix {
		b.kindIx, b.kindAt = ix, [2]int{}
	}
	at := &b.kindAt[boolIdx(b.entitled)]
	if *at == 0 {
		*at = ix.kindOf(b) + 1
	}
	if *at < 0 {
		return nil
	}
	bp := &ix.bars[*at-1]
	for _, n := range ix.settled[bp.seen:] {
		bp.settleNode(ix, n)
	}
	bp.seen = len(ix.settled)
	return bp
}

// count takes tenant t's refusable units of the kind's priority out of
// the kind's potential and into its refused counts (sign 1), or puts them
// back (sign -1).
func (bp *barPotential) count(ix *nodeIndex, t int, sign int32) {
	// The slices read into locals: the loop's stores through bp and ix
	// made the compiler load their headers again for every unit.
	units, free, refused, level := ix.refusable.flat, bp.cap.free, bp.refused, bp.kind.level
	for _, at := range ix.refusable.of(bp.base, t) {
		nu := &units[at.flat]
		if nu.taken {
			continue
		}
		if int(nu.lvl) <= level {
			free[at.n] -= sign * nu.gpus
		}
		if !nu.chained {
			refused[at.n] += sign
		}
	}
}

// kindNear is the kind bp is cheapest to count from, nil where counting
// from the level's potential is as cheap: one of the same level and tier
// priority, not entitled (an entitled kind's bar refuses its own tenant
// only), whose barred tenants differ from bp's by fewer refusable units,
// with its nodes settled since it last was (a node's potential walks its
// units, about 6 units' counting each: pendingCost), than bp's barred
// tenants have.
func (ix *nodeIndex) kindNear(bp *barPotential) *barPotential {
	if bp.kind.entitled {
		return nil
	}
	var best *barPotential
	cost := 0
	for t, barred := range bp.barred {
		if barred {
			cost += ix.refusable.units(bp.base, t)
		}
	}
	for i := range ix.bars {
		o := &ix.bars[i]
		if o.kind.entitled || o.kind.level != bp.kind.level || o.base != bp.base {
			continue
		}
		c := pendingCost * (len(ix.settled) - o.seen)
		for t, barred := range bp.barred {
			if barred != o.barred[t] {
				c += ix.refusable.units(bp.base, t)
			}
		}
		if c < cost {
			best, cost = o, c
		}
	}
	return best
}

// pendingCost is what counting a node's potential afresh costs, in
// refusable units counted (kindNear).
const pendingCost = 6

// boolSign is 1 for true, -1 for false.
func boolSign(v bool) int32 {
	if v {
		return 1
	}
	return -1
}

// boolIdx is 1 for true, 0 for false.
func boolIdx(v bool) int {
	if v {
		return 1
	}
	return 0
}

// kindOf is the index in ix.bars of b's kind, built on first use, or -2
// when no wait promotion's bar applies to b.
func (ix *nodeIndex) kindOf(b *bene) int {
	m := ix.m
	base := m.e.tiers[b.tier].priority
	if b.prio <= base || m.promotedForPreemptions(&b.d.Job) {
		return -2 // no bar (waitPromotionBars)
	}
	held := m.tierHeld(b.tenant, b.tier)
	k := barKind{level: ix.levelFor(b), tier: b.tier, entitled: b.entitled, tenant: -1, held: -1}
	if b.entitled {
		k.tenant = b.tenant
	} else {
		k.held = held
	}
	for i := range ix.bars {
		if ix.bars[i].kind.is(&k) {
			return i
		}
	}
	bp := barPotential{kind: k, base: int32(base), barred: make([]bool, len(m.tenants))}
	for t := range bp.barred {
		bp.barred[t] = t == b.tenant || held >= m.tierHeld(t, b.tier)
	}
	ix.refusable.build(ix)
	bp.refused = make([]int32, len(m.nodes))
	bp.cap = newLazyCapacity(&m.pl, m.maxGPUs)
	if src := ix.kindNear(&bp); src != nil {
		// A kind of the same level and priority whose bar refuses
		// nearly the same tenants (held orders them: a tenant refused at
		// one held is refused at every greater held): its figures, less
		// the units of the tenants only bp refuses, plus those of the
		// tenants only src refuses, and counted afresh on the nodes
		// settled since src last was, where its figures are behind
		// (settling src first did the same work and marked its orders,
		// often never read again). The same figures as the level's
		// potential less every refused tenant's units
		// (TestDerivedKindMatchesBuilt), from a few tenants' units: the
		// fleet plan's 18 kinds refuse 88 tenants' work in all; with 11
		// of them counted so, 48 tenants' units are counted.
		bp.cap.fill(src.cap.free)
		copy(bp.refused, src.refused)
		ix.order.counts.derived++
		for t, barred := range bp.barred {
			if barred != src.barred[t] {
				bp.count(ix, t, boolSign(barred))
			}
		}
		free, refused := bp.cap.free, bp.refused
		for _, n := range ix.settled[src.seen:] {
			free[n], refused[n] = bp.potential(ix, n)
		}
	} else {
		// The level's potential less what the bar refuses: the same
		// figure potential gives, from the refusable units alone rather
		// than from every unit of every node.
		bp.cap.fill(ix.pot[k.level].free)
		for t, barred := range bp.barred {
			if barred && (!k.entitled || t == k.tenant) { // else not refused (refuses)
				bp.count(ix, t, 1)
			}
		}
	}
	bp.seen = len(ix.settled)
	ix.bars = append(ix.bars, bp)
	return len(ix.bars) - 1
}

// potential is node n's potential for the kind: free GPUs, plus untaken
// units at or below its level, less those the bar surely refuses; and how
// many untaken units outside chains the bar surely refuses (refused).
func (bp *barPotential) potential(ix *nodeIndex, n int32) (pot, refused int32) {
	pot = ix.cap.free[n]
	units := ix.nodeUnits[n]
	for i := range units {
		switch nu := &units[i]; { // by pointer: ranging by value copied each unit
		case nu.taken:
		case !bp.refuses(nu):
			if int(nu.lvl) <= bp.kind.level {
				pot += nu.gpus
			}
		case !nu.chained:
			refused++
		}
	}
	return pot, refused
}

// refuses reports whether the bar surely keeps a beneficiary of the kind
// from nu: work of the tier's priority of a barred tenant, unless a rule
// before the bar may give it (idle or backfill work; a reclaim, which an
// entitled beneficiary may make from another tenant). See ledger.ruleFor.
func (bp *barPotential) refuses(nu *nodeUnit) bool {
	if nu.tierPrio != bp.base || nu.exempt || !bp.barred[nu.tenant] {
		return false
	}
	return !bp.kind.entitled || int(nu.tenant) == bp.kind.tenant // else perhaps a reclaim
}

// settleNode brings node n's potential, and its place in the kind's
// node orders, up to date.
func (bp *barPotential) settleNode(ix *nodeIndex, n int32) {
	p, refused := bp.potential(ix, n)
	if p != bp.cap.free[n] {
		bp.cap.add(n, p-bp.cap.free[n])
	}
	bp.refused[n] = refused
	for _, o := range bp.built {
		if ix.cap.nodeIn(n, o.pool) {
			o.h.mark(n) // moved when next read (ordered)
		}
	}
}

// ordered returns the kind's own node order for pool and g, its stale
// nodes moved, nil when it has none (see order). Call after
// barPotentialFor, which brings the kind's potential up to date.
func (bp *barPotential) ordered(ix *nodeIndex, pool int32, g int) *lbHeap {
	if int(pool) >= len(bp.heaps) || bp.heaps[pool] == nil {
		return nil
	}
	h := bp.heaps[pool][g]
	if h != nil && len(h.stale) > 0 {
		h.fresh(func(n int32) uint64 { return bp.bound(ix, n, g) })
	}
	return h
}

// order builds the kind's own node order for pool and g. The search asks
// for it once the level's order failed the kind there: that order counts
// work the bar refuses, so it puts first nodes the beneficiary cannot
// complete, and the search read 128 of them in vain and then scanned the
// pool (it now reads barLevelSorted). Where it failed once it failed
// again: on the fleet benchmark, 38
// pools and GPU counts of wait promotions failed 590 searches a plan, all
// but 38 of them after the first (one model: 18 and 722). Building an
// order for every kind, pool and count (155 a plan) cost more than it won.
//
// level is the level's order for pool and g, up to date: the kind's nodes
// are among its nodes (the kind's potential and bounds count fewer units
// than the level's), so only those are visited, not every node.
func (bp *barPotential) order(ix *nodeIndex, pool int32, g int, level *lbHeap) *lbHeap {
	m := ix.m
	for int(pool) >= len(bp.heaps) {
		bp.heaps = append(bp.heaps, nil)
	}
	if bp.heaps[pool] == nil {
		bp.heaps[pool] = make([]*lbHeap, m.maxGPUs+1)
	}
	h := m.sc.newHeap(len(m.nodes))
	fillAbsent(h.pos[:len(m.nodes)])
	ix.order.counts.builds++
	ix.order.counts.filed += len(level.e)
	free := bp.cap.free
	for _, le := range level.e {
		if free[le.n] < int32(g) {
			// bound's own first test, asked here without the call:
			// most of the level's nodes fall short of the kind's
			// potential (it leaves out the work the bar refuses).
			ix.order.counts.bounds++
			continue
		}
		lb := le.lb // the level's order is up to date: bound's read, without the call
		if bp.refused[le.n] == 0 {
			ix.order.counts.bounds++
			ix.order.counts.levelBounds++
		} else {
			lb = bp.bound(ix, le.n, g)
		}
		if lb != noBound {
			h.pos[le.n] = int32(len(h.e))
			h.e = append(h.e, lbEntry{lb, le.n})
		}
	}
	for i := len(h.e)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	bp.heaps[pool][g] = h
	bp.built = append(bp.built, builtOrder{pool, h})
	return h
}

// bound is node n's lower bound on the worst victim of g GPUs for the
// kind, as nodeIndex.bound but over the units the bar does not surely
// refuse (a chain's are all counted: its search may take another unit of
// the group); noBound too where the kind's potential is short of g, as
// the search would not try the node. Where the bar refuses none of n's
// units, the walk is nodeIndex.bound's, so its bound is read, not walked
// again (ix.lb is up to date: the searches settle before they read).
func (bp *barPotential) bound(ix *nodeIndex, n int32, g int) uint64 {
	ix.order.counts.bounds++
	if bp.cap.free[n] < int32(g) {
		return noBound
	}
	if bp.refused[n] == 0 {
		ix.order.counts.levelBounds++
		return ix.lb[int(n)*(ix.m.maxGPUs+1)+g]
	}
	have := int(ix.cap.free[n])
	if have >= g {
		return 0 // free GPUs alone suffice
	}
	units := ix.nodeUnits[n] // read once, not for each unit
	for i := range units {
		if nu := &units[i]; !nu.taken && (nu.chained || !bp.refuses(nu)) {
			if have += int(nu.gpus); have >= g {
				return nu.key
			}
		}
	}
	return noBound
}

// refusable indexes the units a bar may refuse (neither idle under
// pressure nor backfill) by their tier's priority and tenant, so that a
// kind's potential is built from the level's by visiting only the units
// of its tier's priority and barred tenants. Built on a plan's first wait
// promotion search, from the nodes' unit lists.
type refusable struct {
	prios   []int32      // the tiers' distinct priorities; row r is prios[r]
	start   []int32      // [r*tenants+t]: first of (prios[r], t) in at; one more at the end
	at      []nodeUnitAt // per (priority, tenant), in node order
	flat    []nodeUnit   // every node's units, end to end (nodeIndex.nodeUnits)
	tenants int
	built   bool
}

// nodeUnitAt is a unit's node and its place in refusable.flat.
type nodeUnitAt struct{ n, flat int32 }

// build counts the refusable units per (priority, tenant), then files them.
func (r *refusable) build(ix *nodeIndex) {
	if r.built {
		return
	}
	r.built = true
	m := ix.m
	r.flat = m.sc.nodeUnits
	r.tenants = len(m.tenants)
	r.prios = r.prios[:0]
	for _, t := range m.e.tiers {
		if !slices.Contains(r.prios, int32(t.priority)) {
			r.prios = append(r.prios, int32(t.priority))
		}
	}
	r.start = grow(r.start, len(r.prios)*r.tenants+1)
	clear(r.start)
	// Each unit's row, found once, not searched for twice (build: 2.9 M
	// instructions a fleet plan, now 1.8 M); a node's units are often of
	// one tier, so the last priority's row is kept.
	rows := grow(m.sc.refusableRows, len(r.flat))
	m.sc.refusableRows = rows
	lastPrio, lastRow := int32(0), -1
	for i := range r.flat {
		if nu := &r.flat[i]; !nu.exempt {
			if lastRow < 0 || nu.tierPrio != lastPrio {
				lastPrio, lastRow = nu.tierPrio, r.row(nu.tierPrio)
			}
			rows[i] = int32(lastRow)
			r.start[lastRow*r.tenants+int(nu.tenant)+1]++
		}
	}
	for k := 1; k < len(r.start); k++ {
		r.start[k] += r.start[k-1]
	}
	r.at = grow(m.sc.refusable, int(r.start[len(r.start)-1]))
	next := slices.Clone(r.start[:len(r.start)-1])
	flat := int32(0)
	for n, units := range ix.nodeUnits {
		for i := range units {
			if nu := &units[i]; !nu.exempt {
				k := int(rows[flat])*r.tenants + int(nu.tenant)
				r.at[next[k]] = nodeUnitAt{int32(n), flat}
				next[k]++
			}
			flat++
		}
	}
}

func (r *refusable) row(prio int32) int { return slices.Index(r.prios, prio) }

// units is how many refusable units tenant t has at tier priority prio.
func (r *refusable) units(prio int32, t int) int { return len(r.of(prio, t)) }

// of is where the refusable units of tenant t at tier priority prio lie.
func (r *refusable) of(prio int32, t int) []nodeUnitAt {
	row := r.row(prio)
	if row < 0 {
		return nil
	}
	k := row*r.tenants + t
	return r.at[r.start[k]:r.start[k+1]]
}
