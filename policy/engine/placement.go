package engine

import "unsafe"

// placement says which nodes each waiting demand may use. A node sits in
// one cell: its node pool and its GPU device class (Node.Device). A set is
// a union of cells:
//
//   - set 0 is every node;
//   - sets 1..len(st.pools)-1 are the nodes of one node pool, numbered as
//     st.pools numbers the pools (so a pool index is its set index);
//   - when the cluster has several device classes, one set per cell (a
//     victim migrates within its own: migration.go);
//   - then one set per node pool and device request that waiting demands
//     ask for (Demand.Devices), unless the request accepts every class.
//
// The searches (capacity, candidates, node order, potentials) keep their
// lists per set, so a demand only ever looks at nodes whose GPUs it can use:
// it never preempts work on GPUs it could not run on. With one device class
// (every snapshot that does not tell models apart) there are no sets beyond
// the pools, and planning is what it was before device classes.
type placement struct {
	cellOf   []int32   // [node] its cell
	cellSets [][]int32 // [cell] the sets that hold it, 0 first
	in       [][]bool  // [set][cell]
	setPool  []int32   // [set] its node pool (0: any)
	// setAll[set]: the set accepts every device class, so reasons need
	// not name one.
	setAll []bool

	cellPool  []int32 // [cell] its node pool
	cellClass []int32 // [cell] its device class
	cellHome  []int32 // [cell] the set of its pool's nodes of its class
	cellIdx   map[[2]int32]int32

	classes  []string // device classes, in order of first node
	models   []string // [class] the model of its first node, for reasons
	classIdx map[string]int32
	setIdx   map[setKey]int32

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

type setKey struct {
	pool int32
	mask string // a byte per class, 1 where accepted; "" for all
}

type internKey struct {
	first *string
	n     int
	pool  int32
}

// buildPlacement files nodes into cells and builds the sets every node
// pool, cell and waiting demand needs: before the searches are built.
func (st *state) buildPlacement() {
	pl := &st.pl
	pl.classIdx = map[string]int32{}
	pl.cellIdx = map[[2]int32]int32{}
	pl.setIdx = map[setKey]int32{}
	pl.cellOf = make([]int32, len(st.nodes))
	for n, node := range st.nodes {
		c, ok := pl.classIdx[node.Device]
		if !ok {
			c = int32(len(pl.classes))
			pl.classIdx[node.Device] = c
			pl.classes = append(pl.classes, node.Device)
			pl.models = append(pl.models, node.Model)
		}
		key := [2]int32{st.poolOf[n], c}
		cell, ok := pl.cellIdx[key]
		if !ok {
			cell = int32(len(pl.cellPool))
			pl.cellIdx[key] = cell
			pl.cellPool = append(pl.cellPool, key[0])
			pl.cellClass = append(pl.cellClass, key[1])
		}
		pl.cellOf[n] = cell
	}
	for p := range st.pools {
		pl.set(setKey{pool: int32(p)})
	}
	pl.cellHome = make([]int32, len(pl.cellPool))
	for cell := range pl.cellPool {
		pl.cellHome[cell] = pl.cellPool[cell]
		if len(pl.classes) > 1 {
			pl.cellHome[cell] = pl.set(setKey{pool: pl.cellPool[cell], mask: pl.oneClass(pl.cellClass[cell])})
		}
	}
	pl.empty = pl.set(setKey{pool: -1})
	pl.demandSet = make([]int32, len(st.s.Waiting))
	for w := range st.s.Waiting {
		pl.demandSet[w] = st.resolveSet(&st.s.Waiting[w])
	}
	pl.cellSets = make([][]int32, len(pl.cellPool))
	for s := range pl.in {
		for cell, in := range pl.in[s] {
			if in {
				pl.cellSets[cell] = append(pl.cellSets[cell], int32(s))
			}
		}
	}
}

// resolveSet is the set of nodes demand d may use.
func (st *state) resolveSet(d *Demand) int32 {
	pl := &st.pl
	var pool int32
	if d.NodePool != "" && d.NodePool != "all" {
		p, known := st.poolIdx[d.NodePool]
		if !known {
			return pl.empty
		}
		pool = p
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
	mask := make([]byte, len(pl.classes))
	accepted := 0
	for _, dev := range d.Devices {
		if c, ok := pl.classIdx[dev]; ok && mask[c] == 0 {
			mask[c] = 1
			accepted++
		}
	}
	s := pl.empty
	switch {
	case accepted == len(pl.classes):
		s = pool
	case accepted > 0:
		s = pl.set(setKey{pool: pool, mask: string(mask)})
	}
	if !pl.any(s) {
		s = pl.empty
	}
	if ik.first != nil {
		if pl.interned == nil {
			pl.interned = map[internKey]int32{}
		}
		pl.interned[ik] = s
	}
	return s
}

// set returns the index of the set key names, adding it.
func (pl *placement) set(k setKey) int32 {
	if s, ok := pl.setIdx[k]; ok {
		return s
	}
	s := int32(len(pl.in))
	pl.setIdx[k] = s
	in := make([]bool, len(pl.cellPool))
	for cell := range in {
		in[cell] = (k.pool == 0 || pl.cellPool[cell] == k.pool) && (k.mask == "" || k.mask[pl.cellClass[cell]] == 1)
	}
	pl.in = append(pl.in, in)
	pl.setPool = append(pl.setPool, k.pool)
	pl.setAll = append(pl.setAll, k.mask == "")
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

func (pl *placement) oneClass(c int32) string {
	mask := make([]byte, len(pl.classes))
	mask[c] = 1
	return string(mask)
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
