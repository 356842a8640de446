package engine

import (
	"fmt"
	"testing"
)

// TestWalkSeesUnitsAGangUndoPutsBack checks what walkRange's skipping of
// taken units relies on: every unit before a segment's next is taken. A
// gang's allocations take victims, later allocations' walks skip them, and
// when the gang cannot be placed whole undoGang puts them back: they must
// be walked again, or later demands of the plan never see them. It plays
// whole plans with gang demands, checking after each demand served.
func TestWalkSeesUnitsAGangUndoPutsBack(t *testing.T) {
	undone := countGangUndos(t)
	for seed := 0; seed < 24; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			r, p, s := genSearchCase(seed)
			if seed%2 == 1 {
				joinGangs(r, s, 4+r.IntN(8))
			}
			st, failed := demandsNext(p, s)
			for _, pd := range st.orderDemands() {
				st.serve(pd, failed)
				for set := range st.cands {
					c := &st.cands[set]
					for seg, sg := range c.segs {
						for i := sg.start; i < sg.next; i++ {
							if ui := c.units[i]; !st.units[ui].taken {
								t.Fatalf("after %s: set %d segment %d: unit %d at %d is not taken but lies before next %d: no walk sees it again",
									pd.d.Job.Ref, set, seg, ui, i, sg.next)
							}
						}
					}
				}
			}
		})
	}
	t.Logf("%d gangs undone, %d of them with victims taken", undone.gangs, undone.withVictims)
	if undone.withVictims == 0 {
		t.Errorf("no gang was undone after taking victims: the case this test is for never came up")
	}
}

// gangUndos counts the gangs undoGang took back, and those of them that
// had taken victims (the units a walk must see again).
type gangUndos struct{ gangs, withVictims int }

// countGangUndos counts undoGang's undos until the test ends, through
// the gangUndone hook: the model keeps no count of its own.
func countGangUndos(t *testing.T) *gangUndos {
	t.Helper()
	n := &gangUndos{}
	gangUndone = func(_, victims int) {
		n.gangs++
		if victims > 0 {
			n.withVictims++
		}
	}
	t.Cleanup(func() { gangUndone = nil })
	return n
}
