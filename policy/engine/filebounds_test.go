package engine

import (
	"slices"
	"testing"
)

// TestFileBoundsFilesAsTheLoopDid: fileBounds (the whole cluster) and
// fileMembers over the set's listMembers (a pool) file the nodes
// buildHeap's loop filed, in the same order and positions: every node
// whose bound for the count is not noBound and, for a pool other than the
// whole cluster, whose cell is in the pool.
func TestFileBoundsFilesAsTheLoopDid(t *testing.T) {
	const stride = 3 // counts 0..2
	// lb[n*stride+g]: node 0..4, count 0..2.
	lb := []uint64{
		1, 5, noBound, // node 0
		2, noBound, noBound, // node 1
		3, 7, 9, // node 2
		4, 4, noBound, // node 3
		5, 1, 2, // node 4
	}
	cellOf := []int32{0, 1, 0, 1, 1}
	tests := []struct {
		name string
		g    int
		in   []bool // nil: the whole cluster (pool 0)
		want []lbEntry
	}{
		{"whole cluster, every node can", 0, nil, []lbEntry{{1, 0}, {2, 1}, {3, 2}, {4, 3}, {5, 4}}},
		{"whole cluster, some cannot", 1, nil, []lbEntry{{5, 0}, {7, 2}, {4, 3}, {1, 4}}},
		{"a pool of cell 1", 1, []bool{false, true}, []lbEntry{{4, 3}, {1, 4}}},
		{"a pool of cell 0, the last count", 2, []bool{true, false}, []lbEntry{{9, 2}}},
		{"a pool no node of which can", 2, []bool{false, false}, nil},
		{"a pool of both cells, the nodes in order", 1, []bool{true, true}, []lbEntry{{5, 0}, {7, 2}, {4, 3}, {1, 4}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := len(cellOf)
			e, pos := make([]lbEntry, n), make([]int32, n)
			fillAbsent(pos)
			var got []lbEntry
			if tc.in == nil {
				got = e[:fileBounds(e, pos, lb[tc.g:], stride)]
			} else {
				got = e[:fileMembers(e, pos, lb[tc.g:], stride, listMembers(nil, tc.in, cellOf))]
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("filed %v, want %v", got, tc.want)
			}
			for i, x := range got {
				if pos[x.n] != int32(i) {
					t.Errorf("node %d at %d, pos says %d", x.n, i, pos[x.n])
				}
			}
			for node := range pos {
				if pos[node] >= 0 && got[pos[node]].n != int32(node) {
					t.Errorf("node %d: pos %d holds node %d", node, pos[node], got[pos[node]].n)
				}
			}
			if filed := slices.IndexFunc(pos, func(p int32) bool { return p >= 0 }) >= 0; filed != (len(got) > 0) {
				t.Errorf("positions set %v with %d filed", pos, len(got))
			}
		})
	}
}
