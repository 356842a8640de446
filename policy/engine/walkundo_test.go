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
	undone := 0
	for seed := 0; seed < 24; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			r, p, s := genSearchCase(seed)
			if seed%2 == 1 {
				joinGangs(r, s, 4+r.IntN(8))
			}
			st, failed := demandsNext(p, s)
			for _, pd := range st.orderDemands() {
				before := st.gangUndos
				st.serve(pd, failed)
				undone += st.gangUndos - before
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
	if undone == 0 {
		t.Errorf("no gang was undone: the case this test is for never came up")
	}
}
