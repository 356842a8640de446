package engine

import (
	"slices"
	"testing"
	"unsafe"
)

// TestNodeUnitSize holds nodeUnit to 32 bytes: the searches and bounds
// read every node's unit list, and a bool moved last pads it to 40.
func TestNodeUnitSize(t *testing.T) {
	if got := unsafe.Sizeof(nodeUnit{}); got != 32 {
		t.Errorf("nodeUnit takes %d bytes, want 32 (order its fields by size)", got)
	}
}

// TestWalkNodeSize: a walk's figures for a node take 64 bytes, a cache
// line's size: addVictim reads and writes them for each victim it lists.
func TestWalkNodeSize(t *testing.T) {
	if got := unsafe.Sizeof(walkNode{}); got != 64 {
		t.Errorf("walkNode takes %d bytes, want 64", got)
	}
}

// TestFillAbsent: every position is -1 whatever the length, the front
// copied over the rest in doubling steps, and nothing past the slice.
func TestFillAbsent(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
	}{
		{"empty", 0},
		{"one", 1},
		{"two", 2},
		{"three, the last copy short", 3},
		{"a power of two", 8},
		{"one past a power of two", 9},
		{"the fleet's nodes", 10000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]int32, tc.n+1)
			for i := range buf {
				buf[i] = int32(i + 7)
			}
			fillAbsent(buf[:tc.n])
			if i := slices.IndexFunc(buf[:tc.n], func(p int32) bool { return p != -1 }); i >= 0 {
				t.Fatalf("pos[%d] = %d, want -1", i, buf[i])
			}
			if buf[tc.n] != int32(tc.n+7) {
				t.Errorf("wrote past the slice: %d", buf[tc.n])
			}
		})
	}
}
