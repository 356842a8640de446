package engine

import (
	"fmt"
	"slices"
	"time"
)

// state is one Plan call's private, mutable model of the cluster. It has
// three parts, each a struct of its own that owns its invariants: the
// model (what the cluster holds and who waits, as the plan changes it;
// model.go), the node index (the search structures over the model's
// nodes, which hears every change through nodeIndex.change; nodeindex.go),
// and the output (the plan being written and its reasons' scratch). state
// orchestrates the passes (passes.go, demands.go) over the three.
type state struct {
	model
	nodeIndex
	output
}

// output is the plan being written.
type output struct {
	// m is the model the plan is written about: read here, never written.
	m *model

	out   Plan
	moves []move   // Preempts whose victim may move elsewhere (migration.go)
	text  msg      // reasons' text being assembled (reasons.go)
	group []victim // emitVictims' scratch
	// serving: serve's lists (victims, a gang's nodes, nodes placed on
	// free GPUs), kept from one demand to the next: none outlives its
	// serve (emitVictims copies the victims), and allocated afresh for
	// each demand they cost 2.2 M instructions of a fleet plan.
	serving struct {
		victims       []victim
		nodes, onFree []int32
	}
	explainer *explainer // writes the serve pass's actions (explain.go)

	// lastLimit is the last limit reason written (limitReason).
	lastLimit struct {
		key limitKey
		why Reason
	}
}

func newState(e *Engine, s *Snapshot, now time.Time) *state {
	st := &state{model: model{
		cluster: cluster{e: e, s: s, now: now, poolIdx: map[string]int32{}, nodeIDs: make(map[string]int32, len(s.Nodes)),
			sc: e.scratch.get()},
		ledger: ledger{
			tenantNS: make(map[string]int, len(e.tenants)),
			planned:  map[JobRef]int{},
		},
	}}
	st.ledger.cluster = &st.cluster
	st.clock = newClock(now)
	st.ix, st.nodeIndex.m, st.output.m = &st.nodeIndex, &st.model, &st.model
	// The walk's generations start over, as in a new walk's memory
	// (chains compare theirs with the walk's).
	st.walk = st.sc.walk
	st.out.Actions = st.sc.actions[:0]
	st.walk.cur = 0
	for i := range st.walk.nodes {
		st.walk.nodes[i].gen = 0
	}
	st.pools = append(st.pools, e.poolNames...)
	for i, name := range e.poolNames {
		if i > 0 {
			st.poolIdx[name] = int32(i)
		}
	}
	for _, t := range e.tenants {
		st.tenants = append(st.tenants, newTenantState(t))
	}
	for ns, i := range e.tenantByNS {
		st.tenantNS[ns] = i
	}
	st.buildNodes()
	st.buildPlacement()
	st.buildQuotas()
	st.buildUnits()
	return st
}

func (o *output) skip(item, format string, args ...any) {
	o.out.Skipped = append(o.out.Skipped, Skipped{Item: item, Reason: fmt.Sprintf(format, args...)})
}

func (st *state) buildNodes() {
	st.nodes = make([]*Node, 0, len(st.s.Nodes))
	for i := range st.s.Nodes {
		n := &st.s.Nodes[i]
		switch {
		case n.ID == "":
			st.skip("node #"+fmt.Sprint(i), "node has no ID")
			continue
		case n.GPUs < 0:
			st.skip("node "+n.ID, "negative GPU count %d", n.GPUs)
			continue
		}
		// One map operation a node, not a look-up and then an insert:
		// the map grows unless the ID is a duplicate, whose entry
		// then goes back to the first node with it (rare).
		had := len(st.nodeIDs)
		st.nodeIDs[n.ID] = int32(len(st.nodes))
		if len(st.nodeIDs) == had {
			st.nodeIDs[n.ID] = int32(slices.IndexFunc(st.nodes, func(o *Node) bool { return o.ID == n.ID }))
			st.skip("node "+n.ID, "duplicate node ID; the first one is used")
			continue
		}
		st.nodes = append(st.nodes, n)
		if i := len(st.poolOf); i > 0 && n.NodePool == st.nodes[i-1].NodePool {
			// A snapshot lists a pool's nodes together: no look-up.
			st.poolOf = append(st.poolOf, st.poolOf[i-1])
		} else {
			st.poolOf = append(st.poolOf, st.poolOfName(n.NodePool))
		}
		if n.GPUs > st.maxGPUs {
			st.maxGPUs = n.GPUs
		}
	}
}

// buildUnits turns the snapshot's allocations into the units the passes
// decide about (one per allocation, one per gang), checking each against
// its node, and then builds what is read of them: the chains, the
// capacity, each unit's class and counts, the candidate lists and the
// potentials.
func (st *state) buildUnits() {
	free, claimed := st.sc.freeAndClaims(st.nodes)
	gangs := st.sc.gangs
	// Many allocations hold no GPU: count those that do rather than
	// reserve room for every allocation; a scratch that held a plan's
	// units already has about the room (reading every allocation twice
	// cost 1.3 ms of a 10,000-node plan).
	withGPUs := 0
	for i := range st.s.Allocs {
		if cap(st.sc.units) > 0 {
			break
		}
		if len(st.s.Allocs[i].GPUIDs) > 0 {
			withGPUs++
		}
	}
	st.units = slices.Grow(st.sc.units[:0], withGPUs)
	var last lastAlloc
	for i := range st.s.Allocs {
		if len(st.s.Allocs[i].GPUIDs) > 0 {
			if why := st.addUnit(int32(i), free, claimed, gangs, &last); why != "" {
				st.out.Skipped = append(st.out.Skipped, Skipped{Item: "alloc " + st.s.Allocs[i].ID, Reason: why})
			}
		}
	}
	st.buildChains()
	for _, i := range st.earmarkFreed(free) {
		mk := &st.s.Earmarks[i]
		st.skip("earmark for "+mk.For.String(), "on unknown node %q", mk.NodeID)
	}
	st.cap = newCapacity(&st.pl, st.maxGPUs)
	st.cap.fill(free)
	st.exposeBeyondReserve()
	// A gang is classified once all its members are in (addUnit did the
	// single allocations').
	for ui := range st.units {
		if st.units[ui].gang >= 0 {
			st.classify(int32(ui))
		}
	}
	st.liftPromoted()
	st.sortCandidates()
	st.buildPotential()
}

// freeAndClaims returns every node's unclaimed GPUs (all of them, to
// start with) and the GPU IDs claimed on it so far (none), in the
// scratch's memory.
func (sc *scratch) freeAndClaims(nodes []*Node) ([]int32, [][]gpuClaim) {
	free := grow(sc.free, len(nodes))
	sc.free = free
	for i, n := range nodes {
		free[i] = int32(n.GPUs)
	}
	// GPU IDs already claimed per node, to catch duplicates. Nodes hold a
	// handful of GPUs, so a linear scan of a short slice beats a map. The
	// slices start in one shared array, sized by each node's GPU count
	// (within reason: counts are input), so that few grow on their own.
	claimed := grow(sc.claimed, len(nodes))
	sc.claimed = claimed
	room := 0
	for _, n := range nodes {
		room += min(n.GPUs, maxClaimRoom)
	}
	shared := grow(sc.claims, room)
	sc.claims = shared
	for i, n := range nodes {
		r := min(n.GPUs, maxClaimRoom)
		claimed[i], shared = shared[:0:r], shared[r:]
	}
	return free, claimed
}

// addUnit checks allocation i (which holds GPUs) against its node and
// makes it a unit, or adds it to its gang's, and counts it to its
// tenant; it returns why not when it cannot be (the plan skips it).
// Draining work's GPUs go to whom its preemption was for.
func (m *model) addUnit(i int32, free []int32, claimed [][]gpuClaim, gangs map[JobRef]int, last *lastAlloc) (skipped string) {
	a := &m.s.Allocs[i]
	n, ok := last.nodeOf(m, a.NodeID)
	if !ok {
		return fmt.Sprintf("on unknown node %q", a.NodeID)
	}
	mark := len(claimed[n])
	if id, bad := m.claimGPUs(i, &claimed[n]); bad {
		claimed[n] = claimed[n][:mark]
		return fmt.Sprintf("GPU %q is empty or already held on node %s", id, a.NodeID)
	}
	g := len(a.GPUIDs)
	if int(free[n]) < g && !a.Draining {
		claimed[n] = claimed[n][:mark]
		return fmt.Sprintf("holds %d GPUs but node %s has %d unclaimed", g, a.NodeID, free[n])
	}
	free[n] -= int32(g)
	tenant, tier := last.tenantTier(m, &a.Job)
	if a.Draining {
		// Its GPUs are as good as free: a preemption decided earlier
		// is freeing them for someone, who has them firm.
		switch {
		case m.earmark(a.For, a.ForGroup, n, g):
			m.markDraining(a.For, a.ForGroup, n, g)
		case a.For != nil && m.inFlight(*a.For):
			// Set aside for no one while Nomad places its job.
		default:
			free[n] += int32(g)
		}
		return ""
	}
	gu := g * m.pl.unitsOn(n)
	m.tenants[tenant].use += gu
	if m.tenants[tenant].quotas != nil {
		m.addUse(tenant, n, g)
	}
	if !m.e.tiers[tier].preemptible {
		m.tenants[tenant].fixed += gu
	}
	age := m.clock.since(a.StartedAt)
	if a.Job.Gang {
		if ui, ok := gangs[a.Job.Ref]; ok {
			u := &m.units[ui]
			gg := &m.gangs[u.gang]
			gg.allocs = append(gg.allocs, i)
			gg.spread = addNode(gg.spread, n, g)
			u.gpus += g
			u.units += int32(gu)
			u.age = min(u.age, age) // the newest member's
			return ""
		}
		gangs[a.Job.Ref] = len(m.units)
	}
	// Filled in place: a unit built on the stack was then copied into
	// the list, 96 bytes for each of a fleet's 100,000 allocations.
	m.units = append(m.units, unit{})
	u := &m.units[len(m.units)-1]
	u.first, u.gang, u.node, u.jobTag = i, -1, n, jobTag(a.Job.Ref)
	u.tier, u.tenant, u.prio = tier, tenant, m.e.effectivePriority(tier, &a.Job)
	u.gpus, u.units, u.age = g, int32(gu), age
	u.misranked = a.Job.Priority != u.prio
	u.checkpointed, u.named = !a.CheckpointAt.IsZero(), a.Name != ""
	m.countPreemptions(u, &a.Job)
	if a.Job.Gang {
		u.gang = int32(len(m.gangs))
		m.gangs = append(m.gangs, gangUnit{allocs: []int32{i}, spread: []nodeGPUs{{n, g}}})
	}
	if u.gang < 0 {
		// Now, while its allocation is in cache: a fleet's 100,000
		// allocations of 400 bytes are not, once all units are in.
		m.classify(int32(len(m.units) - 1))
	}
	return ""
}

// lastAlloc is what addUnit resolved for the allocation before: a
// snapshot lists many allocations of one node in a row, and those need no
// map lookup. (Tenants and tiers are interleaved: their names go to the
// plan's memo, tenantTiers, every time.)
type lastAlloc struct {
	nodeID string
	node   int32
	nodeOK bool
}

// nodeOf is node id's index, and whether the node is known.
func (last *lastAlloc) nodeOf(m *model, id string) (int32, bool) {
	if last.nodeOK && id == last.nodeID {
		return last.node, true
	}
	n, ok := m.nodeIDs[id]
	if ok {
		last.nodeID, last.node, last.nodeOK = id, n, true
	}
	return n, ok
}

// tenantTier is job's tenant and its tier there (tenantOf, tierFor).
func (last *lastAlloc) tenantTier(m *model, job *Job) (tenant, tier int) {
	return m.names.of(m, job.Ref.Namespace, job.Tier)
}

// countPreemptions notes a unit's job's preemptions in the last hour and
// over its life (as its first allocation says), and whether that puts
// the job one preemption from a bound (then the plan counts those it
// decides).
func (m *model) countPreemptions(u *unit, job *Job) {
	u.recent = int32(m.recentPreemptions(job))
	if limit := m.e.p.Preemption.MaxPerJobPerHour; limit > 0 && int(u.recent) == limit-1 {
		m.trackPlanned = true // some job is one stop from a bound
	}
	u.life = int32(min(lifetimePreemptions(job), 1<<30))
	if most := m.e.p.Preemption.MaxPerJob; most > 0 && int(u.life) == most-1 {
		m.trackPlanned = true
	}
}

// maxClaimRoom caps the GPU IDs reserved up front per node.
const maxClaimRoom = 64

// jobTag tags a job reference: its namespace's tag, shifted, mixed with
// its ID's.
func jobTag(r JobRef) uint64 { return strTag(r.Namespace)<<3 ^ strTag(r.ID) }

// strTag packs a string's length and its last four bytes, where generated
// IDs (job names with counters, UUIDs) differ. Equal strings have equal
// tags; a tag comparison rules most unequal strings out without reading
// them.
func strTag(s string) uint64 {
	tag := uint64(len(s)) << 32
	if len(s) >= 4 {
		// Indexes from a fixed base of known length, in
		// binary.BigEndian.Uint32's form, so that the compiler merges the
		// four byte loads into one 32-bit load and a byte swap.
		b := s[len(s)-4:]
		return tag | uint64(uint32(b[3])|uint32(b[2])<<8|uint32(b[1])<<16|uint32(b[0])<<24)
	}
	for i := 0; i < len(s); i++ {
		tag |= uint64(s[i]) << (8 * i)
	}
	return tag
}

// gpuClaim is a GPU ID claimed on a node: its tag, compared first, and
// where the ID itself is: Snapshot.Allocs[alloc].GPUIDs[gpu].
type gpuClaim struct {
	tag        uint64
	alloc, gpu int32
}

func addNode(spread []nodeGPUs, n int32, g int) []nodeGPUs {
	for i := range spread {
		if spread[i].node == n {
			spread[i].gpus += g
			return spread
		}
	}
	return append(spread, nodeGPUs{n, g})
}
