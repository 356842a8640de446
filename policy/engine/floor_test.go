package engine

import "testing"

// TestFloorNowBoundsMinBound holds floorNow, which the walk asks before its
// first unit without moving the node order, to minBound's figure through
// whole plans: never above the smallest bound of any node in the pool (a
// floor above it would hand a walk that completes a node to searchNodes),
// and equal to it unless the heap's root is stale. Every built heap is
// read before each demand is served, stale nodes and all.
func TestFloorNowBoundsMinBound(t *testing.T) {
	var checked, withStale, exactStale int
	eachSearchDemand(12, func(seed, i int, st *state, _ pending) {
		stride := st.maxGPUs + 1
		st.settle()
		for pool, hs := range st.order.heaps {
			for g, h := range hs {
				if h == nil {
					continue
				}
				got, ok := st.floorNow(int32(pool), g)
				want := noBound // the smallest bound of any node in the pool, afresh
				for n := range st.nodes {
					if st.cap.nodeIn(int32(n), int32(pool)) {
						want = min(want, st.lb[n*stride+g])
					}
				}
				rootStale := len(h.e) > 0 && h.isStale[h.e[0].n]
				switch {
				case !ok:
					t.Fatalf("seed %d, demand %d, pool %d, %d GPUs: a built heap read as not built", seed, i, pool, g)
				case got > want:
					t.Fatalf("seed %d, demand %d, pool %d, %d GPUs: floor %d above the smallest bound %d", seed, i, pool, g, got, want)
				case got != want && !rootStale:
					t.Fatalf("seed %d, demand %d, pool %d, %d GPUs: floor %d, smallest bound %d, root not stale", seed, i, pool, g, got, want)
				}
				checked++
				if len(h.stale) > 0 {
					withStale++
					if got == want {
						exactStale++
					}
				}
			}
		}
	})
	t.Logf("%d floors read, %d with stale nodes (%d of them exact)", checked, withStale, exactStale)
	if checked < 1000 || withStale < 100 {
		t.Errorf("too few floors read: %d, %d with stale nodes", checked, withStale)
	}
	if _, ok := (&nodeIndex{}).floorNow(0, 1); ok {
		t.Errorf("a heap never built read as built")
	}
}
