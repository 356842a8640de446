package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCarveKeepsListsApart checks prune's lists carved from one block:
// each is empty with the room asked for, filling one to its room leaves
// the others as they were, and an append beyond its room allocates anew
// rather than write into the next list's part.
func TestCarveKeepsListsApart(t *testing.T) {
	cases := []struct {
		name  string
		rooms []int
	}{
		{"small lists in one block", []int{3, 1, 4, 1, 5}},
		{"an empty list between", []int{2, 0, 2}},
		{"a list larger than a block", []int{2, prunedBlock + 7, 3}},
		{"lists that fill a block and start the next", []int{prunedBlock - 2, 3, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ix nodeIndex
			lists := make([][]victim, len(c.rooms))
			for i, k := range c.rooms {
				l := ix.carve(k)
				if len(l) != 0 || cap(l) != k {
					t.Fatalf("list %d: len %d cap %d, want 0 and %d", i, len(l), cap(l), k)
				}
				for j := range k {
					l = append(l, victim{ui: int32(i*10000 + j)})
				}
				lists[i] = l
			}
			// One past its room: must not touch the next list.
			for i := range lists {
				_ = append(lists[i], victim{ui: -1})
				for o := range lists {
					if o == i {
						continue
					}
					for j, v := range lists[o] {
						if v.ui != int32(o*10000+j) {
							t.Fatalf("appending to list %d changed list %d's victim %d to %d", i, o, j, v.ui)
						}
					}
				}
			}
		})
	}
}

// TestPreemptAllocsKeptApart checks the Allocs lists of a plan's
// preemptions, carved from the explainer's blocks: each ends where it
// ends (an append allocates anew), so appending to one leaves every
// other action's list as it was.
func TestPreemptAllocsKeptApart(t *testing.T) {
	s := genCluster(rand.New(rand.NewPCG(3, 4)), 200, 8, 2000, 400, 4, t0)
	plan := New(genPolicy(4, 200*8/8, 200*8/2)).Plan(s, t0)
	var lists [][]string
	for _, a := range plan.Actions {
		if len(a.Allocs) > 0 {
			lists = append(lists, a.Allocs)
		}
	}
	if len(lists) < 10 {
		t.Fatalf("%d actions with allocations, want at least 10 to compare", len(lists))
	}
	want := make([][]string, len(lists))
	for i, l := range lists {
		want[i] = slices.Clone(l)
		if !slices.IsSorted(l) {
			t.Fatalf("action %d's allocations %v are not sorted", i, l)
		}
	}
	for i := range lists {
		_ = append(lists[i], "appended")
		for o, l := range lists {
			if !slices.Equal(l, want[o]) {
				t.Fatalf("appending to list %d changed list %d to %v", i, o, l)
			}
		}
	}
}
