package engine

import (
	"fmt"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// state is one Plan call's private, mutable model of the cluster.
type state struct {
	e   *Engine
	s   *Snapshot
	now time.Time

	nodeIDs  map[string]int32
	nodes    []*Node
	cap      *capacity
	pools    []string // pool names: e.poolNames then node pools seen only here
	poolIdx  map[string]int32
	poolOf   []int32 // [node] pool index
	maxGPUs  int
	units    []unit
	cands    []candidates // [pool]: preemptible units, best victims first
	tenants  []tenantState
	tenantNS map[string]int

	levels    []int        // distinct priorities of preemptible work
	pot       []*capacity  // [level] node potentials (potential.go)
	nodeUnits [][]nodeUnit // [node] preemptible units, best victims first
	lb        []uint64     // [node*(maxGPUs+1)+g] lower bound on the worst victim for g GPUs
	order     nodeOrder    // nodes by lower bound (nodeorder.go)
	pick      nodePick     // searchNodes' scratch

	planned      map[JobRef]int // preemptions decided in this plan, per job
	trackPlanned bool           // some job is one preemption short of the cap
	out          Plan
	walk         walkScratch
}

// unit is what gets preempted together: one allocation, or all of a gang
// job's allocations.
type unit struct {
	allocs  []int32 // indices into Snapshot.Allocs
	job     *Job
	group   string // "" for gangs (the whole job)
	tier    int
	tenant  int
	prio    int // effective priority
	gpus    int
	node    int32 // single-allocation units
	spread  []nodeGPUs
	started time.Time // the newest member's start

	recent   int    // preemptions of its job in the last hour
	jobTag   uint64 // jobTag(job.Ref)
	key      uint64 // victim preference: lower is taken first
	taken    bool
	idle     idleState
	backfill bool // runs in a pool kept for tiers other than its own
}

type nodeGPUs struct {
	node int32
	gpus int
}

type idleState struct {
	ok    bool // idle for at least rule.After
	rule  *policy.IdleRule
	since time.Time
	mean  float64
}

type tenantState struct {
	t       *policy.Tenant
	use     int // GPUs held, draining excluded
	waiting int
}

func (t *tenantState) limit() int {
	if t.t.Limit == policy.Unlimited {
		return int(^uint(0) >> 1)
	}
	return t.t.Limit
}

// nodesOf calls fn for each node a unit holds GPUs on.
func (u *unit) nodesOf(fn func(node int32, gpus int)) {
	if u.spread == nil {
		fn(u.node, u.gpus)
		return
	}
	for _, ng := range u.spread {
		fn(ng.node, ng.gpus)
	}
}

func newState(e *Engine, s *Snapshot, now time.Time) *state {
	st := &state{
		e: e, s: s, now: now,
		nodeIDs:  make(map[string]int32, len(s.Nodes)),
		poolIdx:  map[string]int32{},
		tenantNS: make(map[string]int, len(e.tenants)),
		planned:  map[JobRef]int{},
	}
	st.pools = append(st.pools, e.poolNames...)
	for i, name := range e.poolNames {
		if i > 0 {
			st.poolIdx[name] = int32(i)
		}
	}
	for _, t := range e.tenants {
		st.tenants = append(st.tenants, tenantState{t: t})
	}
	for ns, i := range e.tenantByNS {
		st.tenantNS[ns] = i
	}
	st.buildNodes()
	st.buildUnits()
	return st
}

func (st *state) skip(item, format string, args ...any) {
	st.out.Skipped = append(st.out.Skipped, Skipped{Item: item, Reason: fmt.Sprintf(format, args...)})
}

func (st *state) tenantOf(namespace string) int {
	if i, ok := st.tenantNS[namespace]; ok {
		return i
	}
	i := len(st.tenants)
	st.tenants = append(st.tenants, tenantState{t: &policy.Tenant{
		Name: namespace, Namespace: namespace, Limit: policy.Unlimited, Weight: policy.DefaultTenantWeight,
	}})
	st.tenantNS[namespace] = i
	return i
}

// poolOfName returns the pool index for a Nomad node pool, adding pools
// the policy does not name.
func (st *state) poolOfName(name string) int32 {
	if i, ok := st.poolIdx[name]; ok {
		return i
	}
	i := int32(len(st.pools))
	st.pools = append(st.pools, name)
	st.poolIdx[name] = i
	return i
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
		if _, dup := st.nodeIDs[n.ID]; dup {
			st.skip("node "+n.ID, "duplicate node ID; the first one is used")
			continue
		}
		st.nodeIDs[n.ID] = int32(len(st.nodes))
		st.nodes = append(st.nodes, n)
		st.poolOf = append(st.poolOf, st.poolOfName(n.NodePool))
		if n.GPUs > st.maxGPUs {
			st.maxGPUs = n.GPUs
		}
	}
}

func (st *state) buildUnits() {
	free := make([]int32, len(st.nodes))
	for i, n := range st.nodes {
		free[i] = int32(n.GPUs)
	}
	// GPU IDs already claimed per node, to catch duplicates. Nodes hold a
	// handful of GPUs, so a linear scan of a short slice beats a map. The
	// slices start in one shared array, sized by each node's GPU count
	// (within reason: counts are input), so that few grow on their own.
	claimed := make([][]string, len(st.nodes))
	room := 0
	for _, n := range st.nodes {
		room += min(n.GPUs, maxClaimRoom)
	}
	shared := make([]string, room)
	for i, n := range st.nodes {
		r := min(n.GPUs, maxClaimRoom)
		claimed[i], shared = shared[:0:r], shared[r:]
	}
	gangs := map[JobRef]int{}
	// Many allocations hold no GPU: count those that do rather than
	// reserve a (large) unit for every allocation.
	withGPUs := 0
	for i := range st.s.Allocs {
		if len(st.s.Allocs[i].GPUIDs) > 0 {
			withGPUs++
		}
	}
	st.units = make([]unit, 0, withGPUs)
	// Each unit's first allocation, in one array rather than one tiny
	// slice per unit; a gang that gathers more grows its own copy.
	firsts := make([]int32, 0, withGPUs)
	for i := range st.s.Allocs {
		a := &st.s.Allocs[i]
		if len(a.GPUIDs) == 0 {
			continue // holds no GPU: nothing to decide about it
		}
		n, ok := st.nodeIDs[a.NodeID]
		if !ok {
			st.skip("alloc "+a.ID, "on unknown node %q", a.NodeID)
			continue
		}
		if id, bad := badGPU(a.GPUIDs, claimed[n]); bad {
			st.skip("alloc "+a.ID, "GPU %q is empty or already held on node %s", id, a.NodeID)
			continue
		}
		g := len(a.GPUIDs)
		if int(free[n]) < g && !a.Draining {
			st.skip("alloc "+a.ID, "holds %d GPUs but node %s has %d unclaimed", g, a.NodeID, free[n])
			continue
		}
		claimed[n] = append(claimed[n], a.GPUIDs...)
		free[n] -= int32(g)
		tier := st.e.tierOf(a.Job.Tier)
		tenant := st.tenantOf(a.Job.Ref.Namespace)
		if a.Draining {
			// Its GPUs are as good as free: a preemption decided earlier
			// is freeing them for someone.
			free[n] += int32(g)
			continue
		}
		st.tenants[tenant].use += g
		if a.Job.Gang {
			if ui, ok := gangs[a.Job.Ref]; ok {
				u := &st.units[ui]
				u.allocs = append(u.allocs, int32(i))
				u.gpus += g
				u.spread = addNode(u.spread, n, g)
				if a.StartedAt.After(u.started) {
					u.started = a.StartedAt
				}
				continue
			}
			gangs[a.Job.Ref] = len(st.units)
		}
		firsts = append(firsts, int32(i))
		u := unit{
			allocs:  firsts[len(firsts)-1 : len(firsts) : len(firsts)],
			job:     &a.Job,
			jobTag:  jobTag(a.Job.Ref),
			group:   a.Group,
			tier:    tier,
			tenant:  tenant,
			prio:    st.e.effectivePriority(tier, &a.Job),
			gpus:    g,
			node:    n,
			started: a.StartedAt,
		}
		if a.Job.Gang {
			u.group = ""
			u.spread = []nodeGPUs{{n, g}}
		}
		st.units = append(st.units, u)
	}
	st.cap = newCapacity(st.poolOf, len(st.pools), st.maxGPUs)
	st.cap.fill(free)
	for ui := range st.units {
		st.classify(int32(ui))
		u := &st.units[ui]
		u.recent = st.recentPreemptions(u.job)
		if limit := st.e.p.Preemption.MaxPerJobPerHour; limit > 0 && u.recent == limit-1 {
			st.trackPlanned = true
		}
	}
	st.sortCandidates()
	st.buildPotential()
}

// maxClaimRoom caps the GPU IDs reserved up front per node.
const maxClaimRoom = 64

// sameJob reports whether unit u belongs to b's job. Units are checked as
// candidates again and again; comparing cheap tags of the job references
// first spares most checks a string comparison through a pointer into the
// snapshot (equal references have equal tags).
func (st *state) sameJob(u *unit, b *bene) bool {
	return u.jobTag == b.jobTag && u.job.Ref == b.d.Job.Ref
}

// jobTag packs a job reference's lengths and the last bytes of its ID,
// where generated job IDs differ.
func jobTag(r JobRef) uint64 {
	tag := uint64(len(r.Namespace))<<56 | uint64(len(r.ID)&0xff)<<48
	for i := max(0, len(r.ID)-6); i < len(r.ID); i++ {
		tag ^= uint64(r.ID[i]) << (8 * (len(r.ID) - 1 - i))
	}
	return tag
}

// badGPU finds an empty GPU ID or one already claimed on the node.
func badGPU(ids, claimed []string) (string, bool) {
	for i, id := range ids {
		if id == "" {
			return id, true
		}
		for _, c := range claimed {
			if c == id {
				return id, true
			}
		}
		for _, other := range ids[:i] {
			if other == id {
				return id, true
			}
		}
	}
	return "", false
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

// classify works out a unit's idle state and whether it is backfill.
func (st *state) classify(ui int32) {
	u := &st.units[ui]
	col := u.tenant
	if col >= len(st.e.tenants) {
		col = len(st.e.tenants)
	}
	if rule := st.e.idle[u.tier][col]; rule != nil && st.e.tiers[u.tier].preemptible {
		u.idle = st.idleOf(u, rule)
	}
	u.nodesOf(func(n int32, _ int) {
		p := st.poolOf[n]
		if int(p) < len(st.e.poolOwner) && p != 0 && !st.e.poolOwner[p][u.tier] {
			u.backfill = true
		}
	})
}

// idleOf decides whether every allocation of a unit has been idle for the
// rule's duration; a gang is idle only when all its members are.
func (st *state) idleOf(u *unit, rule *policy.IdleRule) idleState {
	is := idleState{rule: rule, ok: true}
	for _, ai := range u.allocs {
		a := &st.s.Allocs[ai]
		since, ok := IdleSince(a.Usage, rule.Threshold)
		if !ok || st.now.Sub(since) < rule.After {
			return idleState{rule: rule}
		}
		if since.After(is.since) {
			is.since = since
		}
		is.mean += meanUtil(a.Usage, since) / float64(len(u.allocs))
	}
	return is
}
