package engine

import "unsafe"

// placement says which nodes each waiting demand may use. A node sits in
// one cell: its node pool and its GPU device class (Node.Device), or, for a
// node some demand is pinned to (Demand.Nodes), a cell of its own. A set is
// a union of cells, named by its mask (a byte per cell, 1 where it holds
// the cell):
//
//   - set 0 is every node;
//   - sets 1..len(st.pools)-1 are the nodes of one node pool, numbered as
//     st.pools numbers the pools (so a pool index is its set index);
//   - when the cluster has several device classes, one set per cell (a
//     victim migrates within its own: migration.go);
//   - then the sets waiting demands need: a node pool's (or every) nodes
//     whose device class the demand's request accepts (Demand.Devices),
//     and, as the plan goes, those sets less the policy pools where the
//     demand's tenant is at its pool limit, or within the one pool where
//     it reclaims its pool reserve (quota.go). Sets made during the plan
//     join the searches then (addSet).
//
// The searches (capacity, candidates, node order, potentials) keep their
// lists per set, so a demand only ever looks at nodes whose GPUs it can use:
// it never preempts work on GPUs it could not run on. With one device class
// and no pool quotas (every snapshot that does not tell models apart) there
// are no sets beyond the pools, and planning is what it was before.
type placement struct {
	cellOf   []int32   // [node] its cell
	cellSets [][]int32 // [cell] the sets that hold it, 0 first
	in       [][]bool  // [set][cell]

	cellPool  []int32 // [cell] its node pool
	cellClass []int32 // [cell] its device class
	cellHome  []int32 // [cell] the set of its pool's nodes of its class
	cellIdx   map[[3]int32]int32

	classes []string // device classes, in order of first node
	models  []string // [class] the model of its first node, for reasons
	// classUnits is the units of one device of each class (units.go);
	// whole: every class's devices are whole GPUs.
	classUnits []int
	whole      bool
	classIdx   map[string]int32
	setIdx     map[string]int32 // mask → set

	// demandSet[w] is the set of Snapshot.Waiting[w]: the empty set when
	// no node may run it (none in its node pool, or none there with a
	// device class its request accepts). It is served as any demand is
	// (limits and reserves still hold or admit it), finds no node, and
	// capacityReason says why.
	demandSet []int32
	empty     int32 // the empty set
	// interned maps a Devices slice (by its first element's address) and
	// pool to a set: callers that share one slice among demands asking
	// alike spare the plan a lookup per class name and demand.
	interned map[internKey]int32
}

type internKey struct {
	first *string
	n     int
	pool  int32
}

// buildPlacement files nodes into cells and builds the sets every node
// pool, cell and waiting demand needs: before the searches are built.
func (m *model) buildPlacement() {
	pl := &m.pl
	pl.classIdx = map[string]int32{}
	pl.cellIdx = map[[3]int32]int32{}
	pinned := map[string]bool{}
	for w := range m.s.Waiting {
		for _, id := range m.s.Waiting[w].Nodes {
			pinned[id] = true
		}
	}
	pl.setIdx = map[string]int32{}
	pl.fileNodes(m.nodes, m.poolOf, pinned)
	pl.whole = true
	for _, u := range pl.classUnits {
		pl.whole = pl.whole && u == gpuUnit
	}
	cells := len(pl.cellPool)
	all := make([]byte, cells)
	for cell := range all {
		all[cell] = 1
	}
	pl.set(string(all)) // 0
	for p := 1; p < len(m.pools); p++ {
		// Every pool gets its index, even one with no node (a policy
		// pool's): it is then a copy of the empty set.
		pl.add(pl.mask(func(cell int) bool { return pl.cellPool[cell] == int32(p) }))
	}
	pl.cellHome = make([]int32, cells)
	for cell := range pl.cellPool {
		pl.cellHome[cell] = pl.cellPool[cell]
		if len(pl.classes) > 1 {
			pl.cellHome[cell] = pl.set(pl.mask(func(c int) bool {
				return pl.cellPool[c] == pl.cellPool[cell] && pl.cellClass[c] == pl.cellClass[cell]
			}))
		}
	}
	pl.empty = pl.set(string(make([]byte, cells)))
	pl.demandSet = make([]int32, len(m.s.Waiting))
	for w := range m.s.Waiting {
		pl.demandSet[w] = m.resolveSet(&m.s.Waiting[w])
	}
	pl.cellSets = make([][]int32, cells)
	for s := range pl.in {
		for cell, in := range pl.in[s] {
			if in {
				pl.cellSets[cell] = append(pl.cellSets[cell], int32(s))
			}
		}
	}
}

// fileNodes files every node into its cell: its pool (poolOf), its
// device class, and itself alone when a demand is pinned to it (pinned:
// node IDs).
func (pl *placement) fileNodes(nodes []*Node, poolOf []int32, pinned map[string]bool) {
	pl.cellOf = make([]int32, len(nodes))
	// A fleet has a handful of classes and cells and lists like nodes
	// together: the node before's answers spare most of the lookups.
	c, lastDev, lastKey, cell := int32(-1), "", [3]int32{-1, -1, -1}, int32(-1)
	for n, node := range nodes {
		if c < 0 || node.Device != lastDev {
			var ok bool
			c, ok = pl.classIdx[node.Device]
			if !ok {
				c = int32(len(pl.classes))
				pl.classIdx[node.Device] = c
				pl.classes = append(pl.classes, node.Device)
				pl.models = append(pl.models, node.Model)
				pl.classUnits = append(pl.classUnits, unitsOf(node.Share))
			}
			lastDev = node.Device
		}
		key := [3]int32{poolOf[n], c, -1}
		if len(pinned) > 0 && pinned[node.ID] {
			key[2] = int32(n)
		}
		if key != lastKey {
			var ok bool
			cell, ok = pl.cellIdx[key]
			if !ok {
				cell = int32(len(pl.cellPool))
				pl.cellIdx[key] = cell
				pl.cellPool = append(pl.cellPool, key[0])
				pl.cellClass = append(pl.cellClass, key[1])
			}
			lastKey = key
		}
		pl.cellOf[n] = cell
	}
}

// resolveSet is the set of nodes demand d may use.
func (c *cluster) resolveSet(d *Demand) int32 {
	pl := &c.pl
	var pool int32
	if d.NodePool != "" && d.NodePool != "all" {
		p, known := c.poolIdx[d.NodePool]
		if !known {
			return pl.empty
		}
		pool = p
	}
	if d.Nodes != nil {
		return c.pinnedSet(d, pool)
	}
	if d.Devices == nil {
		return pool
	}
	var ik internKey
	if len(d.Devices) > 0 {
		ik = internKey{first: unsafe.SliceData(d.Devices), n: len(d.Devices), pool: pool}
		if s, ok := pl.interned[ik]; ok {
			return s
		}
	}
	accept := pl.accepts(d)
	accepted := 0
	for _, ok := range accept {
		if ok {
			accepted++
		}
	}
	s := pl.empty
	switch {
	case accepted == len(pl.classes):
		s = pool
	case accepted > 0:
		s = pl.set(pl.mask(func(cell int) bool {
			return (pool == 0 || pl.cellPool[cell] == pool) && accept[pl.cellClass[cell]]
		}))
	}
	if ik.first != nil {
		if pl.interned == nil {
			pl.interned = map[internKey]int32{}
		}
		pl.interned[ik] = s
	}
	return s
}

// pinnedSet is the set of a demand pinned to nodes (Demand.Nodes): those
// of its pool whose device class its request accepts. Each such node has
// a cell of its own (buildPlacement).
func (c *cluster) pinnedSet(d *Demand, pool int32) int32 {
	pl := &c.pl
	accept := pl.accepts(d)
	mine := make(map[int32]bool, len(d.Nodes))
	for _, id := range d.Nodes {
		if n, ok := c.nodeIDs[id]; ok {
			mine[pl.cellOf[n]] = true
		}
	}
	return pl.set(pl.mask(func(cell int) bool {
		return mine[int32(cell)] && (pool == 0 || pl.cellPool[cell] == pool) && (accept == nil || accept[pl.cellClass[cell]])
	}))
}

// accepts says, per device class, whether d's device request accepts it;
// nil when it accepts any GPU.
func (pl *placement) accepts(d *Demand) []bool {
	if d.Devices == nil {
		return nil
	}
	accept := make([]bool, len(pl.classes))
	for _, dev := range d.Devices {
		if c, ok := pl.classIdx[dev]; ok {
			accept[c] = true
		}
	}
	return accept
}

// acceptsAll reports whether d's device request accepts every device
// class of the cluster: reasons need not say what it asks for.
func (pl *placement) acceptsAll(d *Demand) bool {
	for _, ok := range pl.accepts(d) {
		if !ok {
			return false
		}
	}
	return true
}

// mask is the mask of the cells for which in is true.
func (pl *placement) mask(in func(cell int) bool) string {
	m := make([]byte, len(pl.cellPool))
	for cell := range m {
		if in(cell) {
			m[cell] = 1
		}
	}
	return string(m)
}

// set returns the set of the cells in mask, adding it. Sets added after
// buildPlacement must join the searches: see state.setOf.
func (pl *placement) set(mask string) int32 {
	if s, ok := pl.setIdx[mask]; ok {
		return s
	}
	s := pl.add(mask)
	pl.setIdx[mask] = s
	return s
}

// add adds the set of the cells in mask, whether or not one exists (a
// node pool's set keeps its index even when another set holds the same
// cells).
func (pl *placement) add(mask string) int32 {
	in := make([]bool, len(mask))
	for cell := range in {
		in[cell] = mask[cell] == 1
	}
	pl.in = append(pl.in, in)
	s := int32(len(pl.in) - 1)
	if _, ok := pl.setIdx[mask]; !ok {
		pl.setIdx[mask] = s
	}
	return s
}

// any reports whether set s holds some cell.
func (pl *placement) any(s int32) bool {
	for _, in := range pl.in[s] {
		if in {
			return true
		}
	}
	return false
}

// has reports whether node n is in set s.
func (pl *placement) has(s, n int32) bool { return s == 0 || pl.in[s][pl.cellOf[n]] }

// setsOf returns the sets node n is in, 0 first.
func (pl *placement) setsOf(n int32) []int32 { return pl.cellSets[pl.cellOf[n]] }

// homeSet is the set a unit on node n may move to: the nodes of its node
// pool with its device class.
func (pl *placement) homeSet(n int32) int32 { return pl.cellHome[pl.cellOf[n]] }

// modelOf is the GPU model of node n for reasons: "" when the cluster has
// one device class (nothing to tell apart) or the node's is unknown.
func (pl *placement) modelOf(n int32) string {
	if len(pl.classes) <= 1 {
		return ""
	}
	return pl.models[pl.cellClass[pl.cellOf[n]]]
}

// setOf returns the set of the cells in mask, adding it and filing it in
// the searches when the plan has not seen it yet: its free-GPU buckets,
// candidates and potentials, as buildUnits built them for the others.
func (ix *nodeIndex) setOf(mask string) int32 {
	pl := &ix.m.pl
	if s, ok := pl.setIdx[mask]; ok {
		return s
	}
	s := pl.set(mask)
	for cell, in := range pl.in[s] {
		if in {
			pl.cellSets[cell] = append(pl.cellSets[cell], s)
		}
	}
	ix.cap.addSet(s)
	for _, p := range ix.pot {
		p.addSet(s)
	}
	for i := range ix.bars {
		ix.bars[i].cap.addSet(s) // else its next change on a node of s indexes past its sets
	}
	if ix.order.heaps != nil {
		ix.order.heaps = append(ix.order.heaps, nil)
	}
	ix.cands = append(ix.cands, ix.candidatesIn(s))
	return s
}
