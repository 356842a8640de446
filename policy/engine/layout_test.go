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

// TestUnitWalkFieldsFirst: the fields of a unit the victim walk reads of
// every unit it passes (findVictims, addVictim, victimRule, capped,
// nodesOf) lie within its first 64 bytes, so that a unit at a line's start
// costs one cache line and one 32 bytes into a line two. With taken last
// and the node first, every unit passed cost two.
func TestUnitWalkFieldsFirst(t *testing.T) {
	var u unit
	for _, tc := range []struct {
		name     string
		off, len uintptr
	}{
		{"taken", unsafe.Offsetof(u.taken), unsafe.Sizeof(u.taken)},
		{"idle", unsafe.Offsetof(u.idle), unsafe.Sizeof(u.idle)},
		{"backfill", unsafe.Offsetof(u.backfill), unsafe.Sizeof(u.backfill)},
		{"gang", unsafe.Offsetof(u.gang), unsafe.Sizeof(u.gang)},
		{"node", unsafe.Offsetof(u.node), unsafe.Sizeof(u.node)},
		{"chain", unsafe.Offsetof(u.chain), unsafe.Sizeof(u.chain)},
		{"recent", unsafe.Offsetof(u.recent), unsafe.Sizeof(u.recent)},
		{"age", unsafe.Offsetof(u.age), unsafe.Sizeof(u.age)},
		{"tenant", unsafe.Offsetof(u.tenant), unsafe.Sizeof(u.tenant)},
		{"tier", unsafe.Offsetof(u.tier), unsafe.Sizeof(u.tier)},
		{"prio", unsafe.Offsetof(u.prio), unsafe.Sizeof(u.prio)},
		{"gpus", unsafe.Offsetof(u.gpus), unsafe.Sizeof(u.gpus)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if end := tc.off + tc.len; end > 64 {
				t.Errorf("unit.%s ends at byte %d, want within the first 64", tc.name, end)
			}
		})
	}
	if got := unsafe.Sizeof(u); got != 96 {
		t.Errorf("unit takes %d bytes, want 96", got)
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
