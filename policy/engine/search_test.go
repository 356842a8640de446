package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestSearchMatchesBruteForce checks the node-first search, which reads
// nodes in order of their lower bounds and stops early (potential.go,
// nodeorder.go), against the definition it implements: walk every node
// whose potential fits, take the node whose worst needed victim is best,
// and between nodes where the same gang is that victim, the first in the
// gang's order. It plays whole plans on clusters large enough for the
// search to matter, comparing the two for every demand as it is served, at
// both entitlements and with and without young victims. Demands promoted
// for waiting search by their own potentials (waitbars.go); the brute force
// goes by the level potentials, which count all work.
func TestSearchMatchesBruteForce(t *testing.T) {
	var searches, found, ties, scans, barred, kindOrdered int
	for seed := 0; seed < 24; seed++ {
		r, p, s := genSearchCase(seed)
		if seed%2 == 1 {
			joinGangs(r, s, 4+r.IntN(8))
		}
		for i := range s.Allocs {
			s.Allocs[i].Draining = r.IntN(40) == 0
		}
		st, failed := demandsNext(p, s)
		for _, pd := range st.orderDemands() {
			b := &bene{d: pd.d, tier: pd.tier, tenant: pd.tenant, prio: pd.prio, g: pd.d.GPUsPerAlloc,
				jobTag: jobTag(pd.d.Job.Ref), pool: st.pl.demandSet[pd.w], base: st.pl.demandSet[pd.w]}
			for _, entitled := range []bool{false, true} {
				for _, young := range []bool{false, true} {
					b.entitled = entitled
					name := fmt.Sprintf("seed %d, %s (%d GPUs, entitled %v, young %v)", seed, pd.d.Job.Ref, b.g, entitled, young)
					st.settle()
					wantN, wantVs, wantOK, tied := bruteSearch(st, b, young)
					st.order.scans, st.order.kindOrdered = 0, 0
					gotN, gotVs, gotOK := st.searchNodes(b, young)
					searches++
					scans += st.order.scans
					kindOrdered += st.order.kindOrdered
					if st.barPotentialFor(b) != nil {
						barred++
					}
					if gotOK != wantOK || gotOK && (gotN != wantN || !slices.Equal(gotVs, wantVs)) {
						t.Fatalf("%s: search found node %d (%v) victims %v; brute force node %d (%v) victims %v",
							name, gotN, gotOK, gotVs, wantN, wantOK, wantVs)
					}
					if gotOK {
						found++
					}
					if tied {
						ties++
					}
				}
			}
			st.serve(pd, failed)
		}
	}
	t.Logf("%d searches, %d found, %d ties, %d scans, %d by a wait promotion's potential, %d in its own order",
		searches, found, ties, scans, barred, kindOrdered)
	// The cases the search is built for must have come up.
	if found < 1000 || ties == 0 || scans == 0 || barred < 100 || kindOrdered == 0 {
		t.Errorf("too few interesting searches: %d searches, %d found, %d ties between gang nodes, %d unordered scans, %d by a wait promotion's potential, %d in its own order",
			searches, found, ties, scans, barred, kindOrdered)
	}
}

// eachSearchDemand plays the first seeds search cases (genSearchCase; gangs
// joined on odd seeds), demand by demand: fn sees the plan before each
// demand i is served, and may look at it as it likes.
func eachSearchDemand(seeds int, fn func(seed, i int, st *state, pd pending)) {
	for seed := range seeds {
		r, p, s := genSearchCase(seed)
		if seed%2 == 1 {
			joinGangs(r, s, 4+r.IntN(8))
		}
		st, failed := demandsNext(p, s)
		for i, pd := range st.orderDemands() {
			fn(seed, i, st, pd)
			st.serve(pd, failed)
		}
	}
}

// demandsNext starts a plan of s under p and runs it up to serving the
// demands, which the caller serves one by one (st.serve).
func demandsNext(p *policy.Policy, s *Snapshot) (*state, *failures) {
	st := newState(New(p), s, t0)
	st.checkPriorities()
	st.releaseIdleAlways()
	st.enforceLimits()
	st.explainer = st.startExplainer(false)
	return st, &failures{}
}

// bruteSearch walks every node whose potential fits b, fully, and picks the
// best as searchNodes defines it. tied reports that several nodes shared
// the best worst victim (a gang's).
func bruteSearch(st *state, b *bene, young bool) (n int32, vs []victim, ok, tied bool) {
	if b.g > st.maxGPUs {
		return 0, nil, false, false
	}
	pot := st.pot[st.levelFor(b)]
	w := &st.walk
	w.reset(len(st.nodes))
	var bestKey uint64
	var bestUI int32
	var best []int32 // nodes whose worst victim is (bestKey, bestUI)
	for m := range st.nodes {
		m := int32(m)
		if !st.cap.nodeIn(m, b.pool) || pot.free[m] < int32(b.g) {
			continue
		}
		w.touch(m)
		for _, nu := range st.nodeUnits[m] {
			if nu.taken || !st.addVictim(nu.ui, b, m, young) {
				continue
			}
			switch {
			case len(best) == 0 || nu.key < bestKey || nu.key == bestKey && nu.ui < bestUI:
				bestKey, bestUI, best = nu.key, nu.ui, []int32{m}
			case nu.key == bestKey && nu.ui == bestUI:
				best = append(best, m)
			}
			break
		}
	}
	if len(best) == 0 {
		return 0, nil, false, false
	}
	n = best[0]
	if len(best) > 1 {
		found := false
		st.nodesOf(&st.units[bestUI], func(m int32, _ int) {
			if !found && slices.Contains(best, m) {
				n, found = m, true
			}
		})
	}
	return n, st.prune(b, n), true, len(best) > 1
}

// joinGangs makes random GPU allocations, on different nodes of the same
// pool, members of one gang job.
func joinGangs(r *rand.Rand, s *Snapshot, every int) {
	var gpu []int
	for i := range s.Allocs {
		if len(s.Allocs[i].GPUIDs) > 0 {
			gpu = append(gpu, i)
		}
	}
	pool := map[string]string{}
	for _, n := range s.Nodes {
		pool[n.ID] = n.NodePool
	}
	for k := 0; k < len(gpu)/every; k++ {
		a := &s.Allocs[gpu[r.IntN(len(gpu))]]
		for j := 0; j < 1+r.IntN(3); j++ {
			m := &s.Allocs[gpu[r.IntN(len(gpu))]]
			if m == a || m.Job.Gang || pool[m.NodeID] != pool[a.NodeID] {
				continue
			}
			m.Job.Ref, m.Job.Tier, m.Job.Priority = a.Job.Ref, a.Job.Tier, a.Job.Priority
			m.Job.Gang, a.Job.Gang = true, true
		}
	}
}

// genSearchCase is the search tests' cluster for a seed: 60, 150 or 400
// nodes of 4 or 8 GPUs, 2 to 7 tenants with random reserves and limits
// and minimum run times; r goes on from it.
func genSearchCase(seed int) (*rand.Rand, *policy.Policy, *Snapshot) {
	r := rand.New(rand.NewPCG(uint64(seed), 99))
	nodes := []int{60, 150, 400}[seed%3]
	tenants := 2 + r.IntN(6)
	gpn := []int{4, 8}[r.IntN(2)]
	p := genPolicy(tenants, r.IntN(nodes*gpn/tenants+1), []int{-1, nodes * gpn / 2}[r.IntN(2)])
	p.Preemption.MinRuntime = time.Duration(r.IntN(90)) * time.Minute
	s := genCluster(r, nodes, gpn, nodes*2, nodes, tenants, t0)
	return r, p, s
}

// TestFleetSearchCounts plays the 10,000-node fleet plan (BenchmarkPlan's
// nodes=10000) and logs what its wait promotions' searches read, tried and
// built: figures that, unlike timings, do not drift with the machine's
// load (docs/evaluation.md, issue 35). Run with
// go test -run FleetSearchCounts -v ./policy/engine
func TestFleetSearchCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10,000-node plan")
	}
	r := rand.New(rand.NewPCG(1, 2))
	s := genCluster(r, 10000, 8, 100000, 10000, 8, t0)
	st := newState(New(genPolicy(8, 10000*8/16, 10000*8/4)), s, t0)
	st.checkPriorities()
	st.releaseIdleAlways()
	st.enforceLimits()
	st.serveDemands()
	c := st.order.counts
	t.Logf("wait promotion searches %d: read %d (%d in the level's order, %d in own orders), tried %d; own orders built %d (%d nodes filed), kind bounds computed %d (%d read from the level's); own-order searches %d; kinds %d, %d of them derived",
		c.searches, c.levelReads+c.ownReads, c.levelReads, c.ownReads, c.tries, c.builds, c.filed, c.bounds, c.levelBounds, st.order.kindOrdered, len(st.bars), c.derived)
	if c.searches == 0 || c.builds == 0 {
		t.Errorf("the fleet plan's wait promotions no longer search by their own orders: %+v", c)
	}
	// A wait promotion reads on in its kind's order after barLevelSorted
	// nodes of the level's (11,168 nodes a plan; 57,687 when it read 128).
	if c.levelReads > 15000 || c.tries > 10000 {
		t.Errorf("the fleet plan's wait promotions read %d nodes in the level's orders and tried %d, want at most 15,000 and 10,000", c.levelReads, c.tries)
	}
}
