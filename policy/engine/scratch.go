package engine

import (
	"slices"
	"sync"
)

// scratch is the largest memory a plan works in and does not return: the
// units, the claims buildUnits checks GPU IDs with, the candidate lists
// of every node set, the nodes' unit lists and bounds, the node-order
// heaps, the victim walk's per-node lists, the sorts' buffers and the
// actions (copied out, exactly as long, when the plan ends). The simulator plans a million times a run, and a
// 10,000-node plan allocated 34 MB, most of it these: allocating them anew
// each plan cost the zeroing of fresh memory and the garbage collector's
// work (a fifth of a plan's CPU). A plan takes a scratch from its engine's
// pool and gives it back, emptied of anything that points into its
// snapshot, when it is done.
//
// Nothing here carries over from one plan into the next: every buffer is
// taken at length 0 (or overwritten in full) before it is read, so a plan
// is the same, byte for byte, whichever scratch it got.
type scratch struct {
	walk walkScratch

	units   []unit
	free    []int32
	claimed [][]gpuClaim
	claims  []gpuClaim
	gangs   map[JobRef]int

	keys    []candKey
	keysTmp []candKey
	cands   []candidates
	radix   [2][]candKey // radixSort's buffers for the demands' orders
	times   []timeKey
	// timesSorted: sortTimes' result before it is copied back.
	timesSorted []timeKey
	actions     []Action

	count     []int
	nodeUnits []nodeUnit
	perNode   [][]nodeUnit
	lb        []uint64
	heaps     []*lbHeap
	members   [][]int32 // the node order's set lists (setNodes)
	refusable []nodeUnitAt
	// refusableRows: refusable.build's row per unit (in nodeUnits' order).
	refusableRows []int32
}

// scratchPool holds an engine's scratches between plans. sync.Pool drops
// them at garbage collections, so an engine that plans rarely (the
// controller, every 30 s or so) keeps no memory for it.
type scratchPool struct{ p sync.Pool }

func (sp *scratchPool) get() *scratch {
	if sc, ok := sp.p.Get().(*scratch); ok {
		return sc
	}
	return &scratch{gangs: map[JobRef]int{}}
}

// put gives a plan's scratch back to the pool: what the plan grew is kept
// for the next, and whatever points into this plan's snapshot (job
// references in the gang index) is cleared so that the pool holds no
// snapshot alive. The state must not be used after.
func (sp *scratchPool) put(st *state) {
	sc := st.sc
	if sc == nil {
		return
	}
	st.sc = nil
	clear(sc.gangs)
	sc.units = st.units[:0]
	sc.cands = st.cands
	sc.walk = st.walk
	sc.nodeUnits, sc.perNode, sc.lb = sc.nodeUnits[:0], st.nodeUnits[:0], st.lb[:0]
	if st.refusable.at != nil {
		sc.refusable = st.refusable.at[:0]
	}
	for _, bp := range st.bars {
		for _, hs := range bp.heaps {
			for _, h := range hs {
				if h != nil {
					sc.heaps = append(sc.heaps, h)
				}
			}
		}
	}
	sc.members = st.order.members[:0]
	for _, hs := range st.order.heaps {
		for _, h := range hs {
			if h != nil {
				sc.heaps = append(sc.heaps, h)
			}
		}
	}
	sp.p.Put(sc)
}

// candidates returns the candidate lists for sets sets, each empty with
// the room it had (the first, every candidate's, room for n), from the
// scratch.
func (sc *scratch) candidates(sets, n int) []candidates {
	cs := grow(sc.cands, sets)
	for i := range cs {
		cs[i].units, cs[i].keys = cs[i].units[:0], cs[i].keys[:0]
	}
	cs[0].units, cs[0].keys = slices.Grow(cs[0].units, n), slices.Grow(cs[0].keys, n)
	return cs
}

// ownActions returns the plan's own copy of the actions it wrote into the
// scratch's buffer, exactly as long (nil for none, as a plan that never
// appended has), and keeps the buffer, emptied of the plan's strings, for
// the next plan. A fleet plan writes 18,000 actions of 250 bytes: grown by
// doubling, they cost twice their size in fresh memory each plan.
func (sc *scratch) ownActions(buf []Action) []Action {
	var own []Action
	if len(buf) > 0 {
		own = make([]Action, len(buf))
		copy(own, buf)
	}
	clear(buf)
	sc.actions = buf[:0]
	return own
}

// grow returns s at length n, its old contents left as they are (callers
// overwrite them), reallocated only when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// fillAbsent sets every position in pos to -1 (no entry), copying the
// filled front over the rest, doubling it each time: a few memmoves, not
// a store per node. A fleet plan empties some 90 heaps of 10,000
// positions, and the plain loop cost 5 M instructions a plan.
func fillAbsent(pos []int32) {
	if len(pos) == 0 {
		return
	}
	pos[0] = -1
	for k := 1; k < len(pos); k *= 2 {
		copy(pos[k:], pos[:k])
	}
}

// newHeap is an empty heap with room for a position per node, from the
// scratch when it has one.
func (sc *scratch) newHeap(nodes int) *lbHeap {
	if k := len(sc.heaps); k > 0 {
		h := sc.heaps[k-1]
		sc.heaps = sc.heaps[:k-1]
		h.e, h.pos, h.stale = h.e[:0], grow(h.pos, nodes), h.stale[:0]
		h.isStale = grow(h.isStale, nodes)
		clear(h.isStale)
		return h
	}
	return &lbHeap{pos: make([]int32, nodes), isStale: make([]bool, nodes)}
}
