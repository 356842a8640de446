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

// TestBarBoundReadsLevelBound holds a wait promotion kind's refused counts
// (waitbars.go) to a count made afresh, through whole plans: bound reads
// the level's bound where a node has none, so a count left behind by a
// change to the node, or one that counted the units of chains (which the
// kind's walk counts all the same), would give a node a bound the kind's
// walk does not. Each kind's bound is compared with that walk, for every
// node and GPU count, as the plan serves its demands.
func TestBarBoundReadsLevelBound(t *testing.T) {
	var kinds, read, walked int
	eachSearchDemand(12, func(seed, i int, st *state, pd pending) {
		b := &bene{d: pd.d, tier: pd.tier, tenant: pd.tenant, prio: pd.prio, g: pd.d.GPUsPerAlloc,
			jobTag: jobTag(pd.d.Job.Ref), pool: st.pl.demandSet[pd.w], base: st.pl.demandSet[pd.w]}
		st.settle()
		st.barPotentialFor(b) // builds b's kind, if a bar applies
		if i%4 == 0 {
			for j := range st.bars {
				bp := &st.bars[j]
				for _, n := range st.settled[bp.seen:] {
					bp.settleNode(&st.nodeIndex, n)
				}
				bp.seen = len(st.settled)
				kinds++
				for n := range st.nodes {
					if got, want := bp.refused[n], refusedAfresh(st, bp, int32(n)); got != want {
						t.Fatalf("seed %d, demand %d, kind %+v, node %d: %d refused units counted, %d afresh", seed, i, bp.kind, n, got, want)
					}
					for g := 1; g <= st.maxGPUs; g++ {
						if got, want := bp.bound(&st.nodeIndex, int32(n), g), walkedBarBound(st, bp, int32(n), g); got != want {
							t.Fatalf("seed %d, demand %d, kind %+v, node %d, %d GPUs: bound %d, the kind's walk %d", seed, i, bp.kind, n, g, got, want)
						}
						if bp.cap.free[n] >= int32(g) {
							if bp.refused[n] == 0 {
								read++
							} else {
								walked++
							}
						}
					}
				}
			}
		}
	})
	t.Logf("%d kinds checked: %d bounds read from the level's, %d walked", kinds, read, walked)
	if read == 0 || walked == 0 {
		t.Errorf("want bounds both read and walked: %d read, %d walked", read, walked)
	}
}

// refusedAfresh counts node n's untaken units outside chains that bp's
// bar surely refuses.
func refusedAfresh(st *state, bp *barPotential, n int32) int32 {
	var c int32
	for i := range st.nodeUnits[n] {
		if nu := &st.nodeUnits[n][i]; !nu.taken && !nu.chained && bp.refuses(nu) {
			c++
		}
	}
	return c
}

// walkedBarBound is bound without reading the level's: the kind's walk
// over the units its bar does not surely refuse.
func walkedBarBound(st *state, bp *barPotential, n int32, g int) uint64 {
	if bp.cap.free[n] < int32(g) {
		return noBound
	}
	have := int(st.cap.free[n])
	if have >= g {
		return 0
	}
	for i := range st.nodeUnits[n] {
		if nu := &st.nodeUnits[n][i]; !nu.taken && (nu.chained || !bp.refuses(nu)) {
			if have += int(nu.gpus); have >= g {
				return nu.key
			}
		}
	}
	return noBound
}

// TestDerivedKindMatchesBuilt holds a wait promotion kind counted from a
// kind of nearly the same tenants (kindNear) to the figures potential
// gives afresh, for every node, as it is built: its potential and its
// refused counts. It fails when the kind it is counted from is not
// brought up to date first, or a tenant's units are counted the wrong way.
func TestDerivedKindMatchesBuilt(t *testing.T) {
	var built, derived int
	eachSearchDemand(24, func(seed, i int, st *state, pd pending) {
		b := &bene{d: pd.d, tier: pd.tier, tenant: pd.tenant, prio: pd.prio, g: pd.d.GPUsPerAlloc,
			jobTag: jobTag(pd.d.Job.Ref), pool: st.pl.demandSet[pd.w], base: st.pl.demandSet[pd.w]}
		st.settle()
		kinds, was := len(st.bars), st.order.counts.derived
		st.barPotentialFor(b) // builds b's kind, if a bar applies
		if len(st.bars) == kinds {
			return
		}
		built++
		if st.order.counts.derived > was {
			derived++
		}
		bp := &st.bars[len(st.bars)-1]
		for n := range st.nodes {
			pot, refused := bp.potential(&st.nodeIndex, int32(n))
			if bp.cap.free[n] != pot || bp.refused[n] != refused {
				t.Fatalf("seed %d, demand %d, kind %+v (derived %v), node %d: potential %d, %d refused; afresh %d, %d",
					seed, i, bp.kind, st.order.counts.derived > was, n, bp.cap.free[n], bp.refused[n], pot, refused)
			}
		}
	})
	t.Logf("%d kinds built, %d of them counted from another", built, derived)
	if derived == 0 || derived == built {
		t.Errorf("want kinds both counted from another and from the level's: %d of %d derived", derived, built)
	}
}
