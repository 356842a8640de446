package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// swapHeap is lbHeap's moves as they were, by swapping an entry with its
// parent or smaller child: the reference the hole-carrying up and down
// must match entry for entry, so that every node order, ties included,
// reads as before.
type swapHeap struct {
	e   []lbEntry
	pos []int32
}

func (h *swapHeap) swap(i, j int) {
	h.e[i], h.e[j] = h.e[j], h.e[i]
	h.pos[h.e[i].n], h.pos[h.e[j].n] = int32(i), int32(j)
}

func (h *swapHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.e[p].lb <= h.e[i].lb {
			return
		}
		h.swap(p, i)
		i = p
	}
}

func (h *swapHeap) down(i int) {
	for {
		m := i
		if l := 2*i + 1; l < len(h.e) && h.e[l].lb < h.e[m].lb {
			m = l
		}
		if r := 2*i + 2; r < len(h.e) && h.e[r].lb < h.e[m].lb {
			m = r
		}
		if m == i {
			return
		}
		h.swap(m, i)
		i = m
	}
}

func (h *swapHeap) set(n int32, lb uint64) {
	i := int(h.pos[n])
	switch {
	case i < 0 && lb == noBound:
	case i < 0:
		h.pos[n] = int32(len(h.e))
		h.e = append(h.e, lbEntry{lb, n})
		h.up(len(h.e) - 1)
	case lb == noBound:
		last := len(h.e) - 1
		h.swap(i, last)
		h.e = h.e[:last]
		h.pos[n] = -1
		if i < last {
			h.down(i)
			h.up(i)
		}
	default:
		old := h.e[i].lb
		h.e[i].lb = lb
		if lb < old {
			h.up(i)
		} else {
			h.down(i)
		}
	}
}

// TestHeapMovesAsSwaps runs one sequence of bound changes through lbHeap
// and through swapHeap and compares the two after each.
func TestHeapMovesAsSwaps(t *testing.T) {
	const nodes = 300
	for _, c := range []struct {
		name   string
		bounds int    // distinct bounds: few make many ties
		gone   uint64 // one in gone changes removes the node (noBound)
	}{
		{"many ties, few removals", 4, 50},
		{"distinct bounds", 1 << 40, 50},
		{"many removals and returns", 16, 3},
		{"no removals", 64, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(c.bounds)))
			h := &lbHeap{pos: make([]int32, nodes), isStale: make([]bool, nodes)}
			ref := &swapHeap{pos: make([]int32, nodes)}
			for n := range nodes {
				h.pos[n], ref.pos[n] = -1, -1
			}
			for step := range 20000 {
				n := int32(r.IntN(nodes))
				lb := uint64(r.IntN(c.bounds))
				if c.gone > 0 && r.Uint64N(c.gone) == 0 {
					lb = noBound
				}
				h.set(n, lb)
				ref.set(n, lb)
				if !slices.Equal(h.e, ref.e) || !slices.Equal(h.pos, ref.pos) {
					t.Fatalf("step %d (node %d to %d): the heap differs from the swaps'", step, n, lb)
				}
			}
		})
	}
}

// swapSiftUp and swapSiftDown are ascend's queue moves as they were, by
// swapping: the reference siftUp and siftDown must match entry for entry,
// so that the searches read nodes in the same order, ties included.
func swapSiftUp(e []lbEntry, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if e[p].lb <= e[i].lb {
			return
		}
		e[p], e[i] = e[i], e[p]
		i = p
	}
}

func swapSiftDown(e []lbEntry, i int) {
	for {
		m := i
		if l := 2*i + 1; l < len(e) && e[l].lb < e[m].lb {
			m = l
		}
		if r := 2*i + 2; r < len(e) && e[r].lb < e[m].lb {
			m = r
		}
		if m == i {
			return
		}
		e[m], e[i] = e[i], e[m]
		i = m
	}
}

// TestQueueSiftsAsSwaps pushes and pops random entries through siftUp and
// siftDown, as ascend does, and through the swapping reference, and
// compares the two queues after each step.
func TestQueueSiftsAsSwaps(t *testing.T) {
	for _, c := range []struct {
		name   string
		bounds int // distinct keys: few make many ties
		push   int // of 10 steps, how many push (the rest pop)
	}{
		{"many ties, growing", 3, 7},
		{"distinct keys, growing", 1 << 40, 7},
		{"many ties, steady", 4, 5},
		{"distinct keys, shrinking", 1 << 30, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, uint64(c.bounds)))
			var q, ref []lbEntry
			for step := range 20000 {
				if len(q) == 0 || r.IntN(10) < c.push {
					e := lbEntry{uint64(r.IntN(c.bounds)), int32(step)}
					q, ref = append(q, e), append(ref, e)
					siftUp(q, len(q)-1)
					swapSiftUp(ref, len(ref)-1)
				} else {
					last := len(q) - 1
					q[0], ref[0] = q[last], ref[last]
					q, ref = q[:last], ref[:last]
					siftDown(q, 0) // on an empty queue too, as ascend does
					swapSiftDown(ref, 0)
				}
				if !slices.Equal(q, ref) {
					t.Fatalf("step %d: the queue differs from the swaps'", step)
				}
			}
		})
	}
}
