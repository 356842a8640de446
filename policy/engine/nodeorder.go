package engine

import "slices"

// Node order: the node-first search (potential.go) must examine every node
// whose lower bound does not exceed the best worst-victim found so far.
// Scanning all nodes for that costs O(nodes) per search, and with thousands
// of whole-node demands in one plan that dominated planning time. So, per
// node pool and GPU count, the engine keeps the nodes that could gather
// that many GPUs in a binary min-heap by lower bound, and reads it in
// ascending order, stopping at the first bound that cannot win: a search
// then costs O(k log k) for the k nodes it looks at, usually a handful.
//
// Heaps are built on a pool and GPU count's first search. When one of a
// node's bounds changes, bound() marks the node stale in the heaps of its
// pools for that count, and a heap moves its stale nodes to their bounds
// only when a search next reads it: a node's bounds change many times
// between the searches of one pool and count (every placement on it, for
// every count), and most heaps are read seldom. Moving every node on every
// change cost about 4 ms of a 10,000-node plan. (Ties between equal
// bounds may then be read in another order; the search's pick does not
// depend on it: it keeps the best worst victim by key and unit, and reads
// every node of a bound it has not beaten.)

// lbEntry is a node with its lower bound; in the reading queue, a heap
// index with the bound found there.
type lbEntry struct {
	lb uint64
	n  int32
}

// lbHeap is a min-heap of nodes by lower bound for one pool and GPU count,
// indexed so that a node's entry can move when its bound changes.
type lbHeap struct {
	e   []lbEntry
	pos []int32 // [node] index in e, -1 when absent (noBound or another pool)
	// stale holds the nodes whose bound changed since the heap last moved
	// them (isStale: [node] listed there).
	stale   []int32
	isStale []bool
}

// mark records that node n's bound changed; fresh moves it.
func (h *lbHeap) mark(n int32) {
	if !h.isStale[n] {
		h.isStale[n] = true
		h.stale = append(h.stale, n)
	}
}

// fresh moves every stale node to its bound now, boundOf(n).
func (h *lbHeap) fresh(boundOf func(n int32) uint64) {
	for _, n := range h.stale {
		h.isStale[n] = false
		h.set(n, boundOf(n))
	}
	h.stale = h.stale[:0]
}

// freshAt is fresh for a level's heap, whose bounds are lbs[n*stride]:
// the same moves in the same order, without a call through a closure for
// each of the 30,000 nodes a fleet plan moves.
func (h *lbHeap) freshAt(lbs []uint64, stride int) {
	isStale := h.isStale
	for _, n := range h.stale {
		isStale[n] = false
		h.set(n, lbs[int(n)*stride])
	}
	h.stale = h.stale[:0]
}

// nodeOrder holds the heaps, [pool][g], nil until first needed, and the
// queue ascend reads them with.
type nodeOrder struct {
	heaps [][]*lbHeap
	queue []lbEntry
	// members[s]: set s's nodes in node order, listed (listed[s]) on the
	// first build of one of its heaps; the lists' memory is the scratch's.
	members [][]int32
	listed  []bool
	// changed: the counts whose bounds bound() changed (refile's scratch).
	changed []int
	scans   int // searches that fell back to an unordered scan (for tests)
	// kindOrdered counts searches that read a wait promotion's own order
	// (waitbars.go; for tests).
	kindOrdered int
	// counts: what the wait promotions' searches cost (for tests and
	// TestFleetSearchCounts).
	counts searchCounts
}

// searchCounts are a plan's wait promotion searches and what they read:
// deterministic figures to compare versions by where timings drift.
type searchCounts struct {
	searches   int // wait promotions' node searches
	levelReads int // nodes they read in the level's order
	ownReads   int // nodes they read in their kind's own order
	tries      int // nodes they tried (walked)
	builds     int // kinds' own orders built
	filed      int // nodes filed in own orders when built
	bounds     int // kind bounds computed (bound), building or keeping own orders
	// levelBounds: of bounds, those read from the level's (the bar
	// refuses none of the node's units), not walked.
	levelBounds int
	// derived: kinds counted from a kind of nearly the same tenants
	// (waitbars.go, kindNear), not from the level's potential.
	derived int
}

// heap returns the heap of nodes in pool for g GPUs, building it if
// needed, with its stale nodes moved.
func (ix *nodeIndex) heap(pool int32, g int) *lbHeap {
	m := ix.m
	o := &ix.order
	if o.heaps == nil {
		o.heaps = make([][]*lbHeap, len(m.pl.in))
	}
	if o.heaps[pool] == nil {
		o.heaps[pool] = make([]*lbHeap, m.maxGPUs+1)
	}
	h := o.heaps[pool][g]
	if h == nil {
		h = ix.buildHeap(pool, g)
		o.heaps[pool][g] = h
	}
	if len(h.stale) > 0 {
		h.freshAt(ix.lb[g:], m.maxGPUs+1)
	}
	return h
}

// buildHeap files every node of pool that can gather g GPUs.
func (ix *nodeIndex) buildHeap(pool int32, g int) *lbHeap {
	m := ix.m
	h := m.sc.newHeap(len(m.nodes))
	stride := m.maxGPUs + 1
	// Filed by fileBounds (the whole cluster) or fileMembers (a set's
	// nodes, listed once a plan), leaves with their slices in registers:
	// written in place, a write to pos or e could, as far as the compiler
	// knows, change ix.lb's or h.e's header, so it reloaded and checked
	// them per node. A set's heap reads only its own nodes: a pass over
	// every node, testing each node's cell, cost 3 M instructions a fleet
	// plan.
	pos := h.pos[:len(m.nodes)]
	fillAbsent(pos)
	e := grow(h.e, len(pos))
	if pool == 0 {
		h.e = e[:fileBounds(e, pos, ix.lb[g:], stride)]
	} else {
		h.e = e[:fileMembers(e, pos, ix.lb[g:], stride, ix.setNodes(pool))]
	}
	for i := len(h.e)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	return h
}

// fileBounds writes into e, in node order, each node whose bound (lbs[n*
// stride]) is not noBound, setting its position in pos; it returns how
// many it filed. e and pos hold a place for every node.
func fileBounds(e []lbEntry, pos []int32, lbs []uint64, stride int) int {
	j := 0
	for n := range pos {
		if lb := lbs[n*stride]; lb != noBound {
			pos[n] = int32(j)
			e[j] = lbEntry{lb, int32(n)}
			j++
		}
	}
	return j
}

// fileMembers is fileBounds over a set's nodes (in node order, so the
// same nodes in the same order as a pass over every node that tested
// each for the set): a fleet plan builds some 20 heaps, most of a pool or
// a device class, and the pass over every node cost 3 M instructions.
func fileMembers(e []lbEntry, pos []int32, lbs []uint64, stride int, nodes []int32) int {
	j := 0
	for _, n := range nodes {
		if lb := lbs[int(n)*stride]; lb != noBound {
			pos[n] = int32(j)
			e[j] = lbEntry{lb, n}
			j++
		}
	}
	return j
}

// setNodes is set s's nodes in node order, listed on its first use in
// a plan.
func (ix *nodeIndex) setNodes(s int32) []int32 {
	o := &ix.order
	if o.members == nil {
		o.members = ix.m.sc.members[:0]
	}
	if int(s) >= len(o.members) {
		k := int(s) + 1
		o.members = slices.Grow(o.members, k-len(o.members))[:k] // the scratch's lists kept
		o.listed = append(o.listed, make([]bool, k-len(o.listed))...)
	}
	if !o.listed[s] {
		o.listed[s] = true
		o.members[s] = listMembers(o.members[s][:0], ix.m.pl.in[s], ix.m.pl.cellOf)
	}
	return o.members[s]
}

// listMembers appends to list, in node order, each node whose cell
// (cellOf) is in the set (in).
func listMembers(list []int32, in []bool, cellOf []int32) []int32 {
	for n, c := range cellOf {
		if in[c] {
			list = append(list, int32(n))
		}
	}
	return list
}

// refile records that node n's bounds for the counts gs changed (heap
// moves it). It reads n's sets once for all of them, not once a count:
// a settled node changes about three counts, and the sets' look-ups cost
// 4 M instructions a fleet plan. Each heap still hears of its nodes in
// the order they changed, so it moves them as before.
func (ix *nodeIndex) refile(n int32, gs []int) {
	if ix.order.heaps == nil || len(gs) == 0 {
		return // no search yet
	}
	for _, s := range ix.m.pl.setsOf(n) {
		if hs := ix.order.heaps[s]; hs != nil {
			for _, g := range gs {
				if hs[g] != nil {
					hs[g].mark(n)
				}
			}
		}
	}
}

// minBound is the smallest bound for g GPUs of any node in pool, noBound
// when none can gather g: no walk completes a node with a better victim.
func (ix *nodeIndex) minBound(pool int32, g int) uint64 {
	if h := ix.heap(pool, g); len(h.e) > 0 {
		return h.e[0].lb
	}
	return noBound
}

// floorNow is a floor no higher than minBound(pool, g), read without
// moving the heap's stale nodes (ok false where the heap is not built):
// the smaller of its root's bound and its stale nodes' bounds. A node not
// stale is in the heap at its bound, at or above the root's; a stale
// node's bound is read afresh (ix.lb is up to date after settle). It is
// minBound's figure unless the root itself is stale.
//
// The walk asks it before its first unit (findVictims), where asking
// minBound would move the stale nodes sooner than a walk that completes a
// node early does, and the heap could end in another arrangement.
func (ix *nodeIndex) floorNow(pool int32, g int) (uint64, bool) {
	hs := ix.order.heaps
	if int(pool) >= len(hs) || hs[pool] == nil || g >= len(hs[pool]) || hs[pool][g] == nil {
		return 0, false
	}
	h := hs[pool][g]
	floor := noBound
	if len(h.e) > 0 {
		floor = h.e[0].lb
	}
	stride := ix.m.maxGPUs + 1
	for _, n := range h.stale {
		floor = min(floor, ix.lb[int(n)*stride+g])
	}
	return floor, true
}

// ascend calls fn for each node in h in ascending order of its bound until
// fn returns false. It leaves h as it is: a small second heap holds the
// indices next in line (the children of those already read).
func (ix *nodeIndex) ascend(h *lbHeap, fn func(n int32, lb uint64) bool) {
	q := ix.order.queue[:0]
	if len(h.e) > 0 {
		q = append(q, lbEntry{h.e[0].lb, 0})
	}
	for len(q) > 0 {
		i := int(q[0].n)
		last := len(q) - 1
		q[0] = q[last]
		q = q[:last]
		siftDown(q, 0)
		if !fn(h.e[i].n, h.e[i].lb) {
			break
		}
		for c := 2*i + 1; c <= 2*i+2 && c < len(h.e); c++ {
			q = append(q, lbEntry{h.e[c].lb, int32(c)})
			siftUp(q, len(q)-1)
		}
	}
	ix.order.queue = q
}

// set moves node n to bound lb, adding or removing it as needed. It reads
// the heap's slices into locals once, as up and down do: each write to pos
// made the compiler reload h.e and check its bounds again.
func (h *lbHeap) set(n int32, lb uint64) {
	e, pos := h.e, h.pos
	i := int(pos[n])
	switch {
	case i < 0 && lb == noBound:
	case i < 0:
		pos[n] = int32(len(e))
		h.e = append(e, lbEntry{lb, n})
		h.up(len(h.e) - 1)
	case lb == noBound:
		// The last entry takes n's place (a swap, then n cut off).
		last := len(e) - 1
		x := e[last]
		e[last] = e[i]
		h.e = e[:last]
		pos[n] = -1
		if i < last {
			// x goes up or down, never both: below its new parent it is
			// below n's children too (down would not move it); else up
			// would not.
			e[i] = x // up or down files it, position too
			if p := (i - 1) / 2; i > 0 && x.lb < e[p].lb {
				h.up(i)
			} else {
				h.down(i)
			}
		}
	default:
		old := e[i].lb
		e[i].lb = lb
		if lb < old {
			h.up(i)
		} else {
			h.down(i)
		}
	}
}

// up and down move entry i as swapping it with its parent or smaller child
// would, but carry it in a hole and write each moved entry and position
// once: the heaps' moves are most of the victim search's upkeep (a fleet
// plan moves 30,000 nodes). They compare as the swaps did, so every heap
// ends in the same arrangement.
//
// Both read the heap's slices into locals first: a write to pos could, as
// far as the compiler knows, change h.e's header, so it reloaded h.e and
// checked its bounds again after every write (down was 13.9 M instructions
// of a fleet plan).
func (h *lbHeap) up(i int) {
	e, pos := h.e, h.pos
	x := e[i]
	for i > 0 {
		p := (i - 1) / 2
		if e[p].lb <= x.lb {
			break
		}
		e[i] = e[p]
		pos[e[i].n] = int32(i)
		i = p
	}
	e[i] = x
	pos[x.n] = int32(i)
}

func (h *lbHeap) down(i int) {
	e, pos := h.e, h.pos
	x := e[i]
	n := uint(len(e))
	for {
		// The smaller child (the left on a tie) is read once into c and
		// moves up if below x: the entry the swaps' pick of the smallest
		// of x, left and right (ties to x, then left) moves. The
		// children's indexes are unsigned and tested against n, so the
		// compiler drops their bounds checks (10.5 → 9.0 M instructions
		// of a fleet plan).
		l := 2*uint(i) + 1
		if l >= n {
			break
		}
		c, m := e[l], l
		if r := l + 1; r < n && e[r].lb < c.lb {
			c, m = e[r], r
		}
		if c.lb >= x.lb {
			break
		}
		e[i] = c
		pos[c.n] = int32(i)
		i = int(m)
	}
	e[i] = x
	pos[x.n] = int32(i)
}

// siftUp and siftDown keep ascend's queue, a plain heap, in order. Like
// lbHeap's up and down they carry the moving entry in a hole and compare
// as swapping would, so the queue reads in the same order: the wait
// promotions' searches read 58,000 nodes a fleet plan, and the swaps'
// siftDown cost more than ascend itself (12.6 M instructions against
// 10.6 M; 9.7 M in a hole).
func siftUp(e []lbEntry, i int) {
	x := e[i]
	for i > 0 {
		p := (i - 1) / 2
		if e[p].lb <= x.lb {
			break
		}
		e[i] = e[p]
		i = p
	}
	e[i] = x
}

func siftDown(e []lbEntry, i int) {
	n := uint(len(e))
	if uint(i) >= n {
		return // ascend popped the last
	}
	x := e[i]
	for {
		l := 2*uint(i) + 1
		if l >= n {
			break
		}
		c, m := e[l], l
		if r := l + 1; r < n && e[r].lb < c.lb {
			c, m = e[r], r
		}
		if c.lb >= x.lb {
			break
		}
		e[i] = c
		i = int(m)
	}
	e[i] = x
}
