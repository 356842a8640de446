package engine

import (
	"testing"
)

// TestBarPotentialSurvivesNewSet: a set of nodes made during the plan (a
// pool less the pools at a tenant's limit, quota.go) after a wait
// promotion's potential was built must be filed in that potential too, as
// in the level potentials: its next change on a node of the new set
// indexed past its sets and panicked.
func TestBarPotentialSurvivesNewSet(t *testing.T) {
	for seed := 0; seed < 24; seed++ {
		_, p, s := genSearchCase(seed)
		st := newState(New(p), s, t0)
		for _, pd := range st.orderDemands() {
			b := &bene{d: pd.d, tier: pd.tier, tenant: pd.tenant, prio: pd.prio, g: pd.d.GPUsPerAlloc,
				jobTag: jobTag(pd.d.Job.Ref), pool: st.pl.demandSet[pd.w], base: st.pl.demandSet[pd.w]}
			st.settle()
			if st.barPotentialFor(b) == nil {
				continue
			}
			set := st.setOf(st.pl.mask(func(cell int) bool { return cell%2 == 0 }))
			for n := range st.nodes {
				if st.pl.has(set, int32(n)) && st.cap.free[n] > 0 {
					st.change(int32(n), noUnit, -1) // a GPU placed on a node of the new set
					st.settle()
					st.barPotentialFor(b) // brings the potential up to date: no panic
					st.change(int32(n), noUnit, 1)
					return
				}
			}
		}
	}
	t.Fatal("no wait promotion with a free GPU on a node of a new set came up")
}
