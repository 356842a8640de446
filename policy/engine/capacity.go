package engine

// capacity tracks free GPUs per node and finds the best-fitting node for an
// allocation in O(max GPUs per node): nodes sit in buckets by free count,
// per set of nodes a demand may use (placement.go). Entries go stale when
// a node's free count changes; they are dropped lazily when seen, so
// updates are O(1).
type capacity struct {
	free    []int32 // per node
	pl      *placement
	buckets [][][]int32 // [set][free] → stack of node indices
	seen    []uint32    // [node] generation of the last each() that saw it
	gen     uint32
	maxGPUs int
	// lazy: a set's buckets are built on its first each(), not at fill;
	// until then pushes skip it. For the potentials (one capacity per
	// level), whose sets are mostly never searched: every node in every
	// set at every level was the bulk of building them.
	lazy bool
}

func newCapacity(pl *placement, maxGPUs int) *capacity {
	c := &capacity{
		free:    make([]int32, len(pl.cellOf)),
		pl:      pl,
		buckets: make([][][]int32, len(pl.in)),
		maxGPUs: maxGPUs,
	}
	for p := range c.buckets {
		c.buckets[p] = make([][]int32, maxGPUs+1)
	}
	return c
}

// newLazyCapacity is a capacity whose sets are built on first use (each).
func newLazyCapacity(pl *placement, maxGPUs int) *capacity {
	return &capacity{free: make([]int32, len(pl.cellOf)), pl: pl, buckets: make([][][]int32, len(pl.in)),
		maxGPUs: maxGPUs, lazy: true}
}

// fill records the initial free counts. Nodes are pushed in reverse so that
// the lowest-indexed node is found first (stacks pop from the end).
func (c *capacity) fill(free []int32) {
	copy(c.free, free)
	if c.lazy {
		return
	}
	for n := len(free) - 1; n >= 0; n-- {
		c.push(int32(n))
	}
}

func (c *capacity) push(n int32) {
	f := c.free[n]
	if f <= 0 {
		return
	}
	for _, s := range c.pl.setsOf(n) {
		if b := c.buckets[s]; b != nil {
			b[f] = append(b[f], n)
		}
	}
}

// built returns set s's buckets, building them from the free counts now
// if the capacity is lazy and has not yet.
func (c *capacity) built(s int32) [][]int32 {
	if c.buckets[s] == nil {
		c.buckets[s] = c.bucketsFor(s)
	}
	return c.buckets[s]
}

// bucketsFor files the nodes of set s by their free GPUs now, the lowest
// index on top of each stack.
func (c *capacity) bucketsFor(s int32) [][]int32 {
	b := make([][]int32, c.maxGPUs+1)
	for n := len(c.free) - 1; n >= 0; n-- {
		if f := c.free[n]; f > 0 && int(f) < len(b) && c.pl.has(s, int32(n)) {
			b[f] = append(b[f], int32(n))
		}
	}
	return b
}

// add changes a node's free GPUs by delta.
func (c *capacity) add(n int32, delta int32) {
	c.free[n] += delta
	c.push(n)
}

// bestFit returns the node in set pool (0: any) with the fewest free GPUs that
// still has at least g free.
func (c *capacity) bestFit(pool int32, g int) (int32, bool) {
	b := c.buckets[pool]
	for f := g; f < len(b); f++ {
		stack := b[f]
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			if c.free[n] == int32(f) {
				b[f] = stack
				return n, true
			}
			stack = stack[:len(stack)-1]
		}
		b[f] = stack
	}
	return 0, false
}

// each calls fn once for every node in pool with at least g free. Stale
// entries are skipped, and a bucket is compacted only once most of it is
// stale, so that repeated searches do not copy large buckets.
func (c *capacity) each(pool int32, g int, fn func(n int32)) {
	if c.seen == nil {
		c.seen = make([]uint32, len(c.free))
	}
	c.gen++
	b := c.built(pool)
	for f := g; f < len(b); f++ {
		stale := 0
		for _, n := range b[f] {
			if c.free[n] != int32(f) || c.seen[n] == c.gen {
				stale++ // stale, or pushed twice while its count went down and up
				continue
			}
			c.seen[n] = c.gen
			fn(n)
		}
		if stale > len(b[f])/2 {
			c.gen++
			live := b[f][:0]
			for _, n := range b[f] {
				if c.free[n] == int32(f) && c.seen[n] != c.gen {
					c.seen[n] = c.gen
					live = append(live, n)
				}
			}
			b[f] = live
		}
	}
}

// addSet files the nodes of set s, a set made after fill, by their free
// GPUs now, as fill does.
func (c *capacity) addSet(s int32) {
	if c.lazy {
		c.buckets = append(c.buckets, nil)
		return
	}
	c.buckets = append(c.buckets, c.bucketsFor(s))
}

// nodeIn reports whether node n is in set pool (0: any).
func (c *capacity) nodeIn(n int32, pool int32) bool { return c.pl.has(pool, n) }
