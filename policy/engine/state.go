package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy"
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

	out       Plan
	moves     []move     // Preempts whose victim may move elsewhere (migration.go)
	text      msg        // reasons' text being assembled (reasons.go)
	group     []victim   // emitVictims' scratch
	explainer *explainer // writes the serve pass's actions (explain.go)

	// lastLimit is the last limit reason written (limitReason).
	lastLimit struct {
		key limitKey
		why Reason
	}
}

// unit is what gets preempted together: one allocation, or all of a gang
// job's allocations. Tens of thousands of units are built per plan and read
// at random by the victim searches, so a unit holds no pointers (the GC
// never scans them) and is kept small: what it shares with its allocations
// (job, group, members, nodes) is reached through indices.
type unit struct {
	first  int32 // index into Snapshot.Allocs of its first allocation: the job and group
	gang   int32 // index into state.gangs; -1 for a single allocation
	node   int32 // the node of a single allocation
	chain  int32 // index into state.chains; noChain for none (chains.go)
	recent int32 // preemptions of its job in the last hour
	life   int32 // preemptions of its job over its life (protect.go)
	units  int32 // what its GPUs count for in its tenant's figures (units.go)
	tier   int
	tenant int
	prio   int // effective priority
	gpus   int
	age    time.Duration // since the newest member started (now - StartedAt)
	jobTag uint64        // jobTag(job.Ref)
	key    uint64        // victim preference: lower is taken first

	taken     bool
	buried    bool     // in a chain below its top run on one node: no victim (chains.go)
	idle      idleMode // idle for at least its rule's After, and the rule's mode
	backfill  bool     // runs in a pool kept for tiers other than its own
	misranked bool     // its job's Nomad priority is not prio (checkPriorities)
	// exposed: of a non-preemptible tier but beyond its tenant's reserve
	// (exposeBeyondReserve), so preemptible after all.
	exposed bool
}

// gangUnit is what a gang unit holds beyond a unit: all its allocations and
// the GPUs it holds per node.
type gangUnit struct {
	allocs []int32
	spread []nodeGPUs
}

// idleMode says whether a unit is idle past its rule, and the rule's mode.
type idleMode uint8

const (
	notIdle idleMode = iota
	idlePressure
	idleAlways
)

type nodeGPUs struct {
	node int32
	gpus int
}

// idleState is how a unit came to be idle, for reasons.
type idleState struct {
	since time.Time
	mean  float64
}

// tenantState is a tenant's standing as the plan goes. Its GPU figures
// (use, marked, waiting, fixed, reserve, lim) are in units of 1/gpuUnit
// GPU (units.go): MIG instances count as the fraction of a GPU they are.
type tenantState struct {
	t   *policy.Tenant
	use int // GPUs held, draining excluded
	// reserve and lim are the policy's reserve and limit, in units.
	reserve, lim int
	// marked is the GPUs set aside for its waiting work and not yet
	// taken (earmarks.go): promised to the tenant, so within its limit
	// as much as what it holds; else another of its jobs would take the
	// limit's room while they drain, and the work they drain for would
	// find itself over the limit.
	marked  int
	waiting int
	// fixed is the GPUs its non-preemptible work holds, draining excluded,
	// as the plan goes; fixed0 the same at the plan's start (for reasons).
	fixed, fixed0 int
	// quotas are its reserves and limits in pools, and what it holds in
	// each (quota.go).
	quotas []tenantQuota
}

func (t *tenantState) limit() int { return t.lim }

// newTenantState is a tenant's standing before the plan acts.
func newTenantState(t *policy.Tenant) tenantState {
	ts := tenantState{t: t, reserve: t.Reserve * gpuUnit, lim: int(^uint(0) >> 1)}
	if t.Limit != policy.Unlimited {
		ts.lim = t.Limit * gpuUnit
	}
	return ts
}

// nodesOf calls fn for each node a unit holds GPUs on.
func (c *cluster) nodesOf(u *unit, fn func(node int32, gpus int)) {
	if u.gang < 0 {
		fn(u.node, u.gpus)
		return
	}
	for _, ng := range c.gangs[u.gang].spread {
		fn(ng.node, ng.gpus)
	}
}

// allocsOf calls fn for each allocation of a unit.
func (c *cluster) allocsOf(u *unit, fn func(ai int32)) {
	if u.gang < 0 {
		fn(u.first)
		return
	}
	for _, ai := range c.gangs[u.gang].allocs {
		fn(ai)
	}
}

// allocIDs returns a unit's allocation IDs, appended to ids, sorted.
func (c *cluster) allocIDs(u *unit, ids []string) []string {
	c.allocsOf(u, func(ai int32) { ids = append(ids, c.s.Allocs[ai].ID) })
	slices.Sort(ids)
	return ids
}

// jobOf returns a unit's job (for a gang, as its first allocation saw it).
func (c *cluster) jobOf(u *unit) *Job { return &c.s.Allocs[u.first].Job }

// groupOf returns a unit's task group: "" for a gang (the whole job).
func (c *cluster) groupOf(u *unit) string {
	if u.gang >= 0 {
		return ""
	}
	return c.s.Allocs[u.first].Group
}

// isGangOfMany reports whether a unit is a gang of several allocations.
func (c *cluster) isGangOfMany(u *unit) bool {
	return u.gang >= 0 && len(c.gangs[u.gang].allocs) > 1
}

func newState(e *Engine, s *Snapshot, now time.Time) *state {
	st := &state{model: model{
		cluster: cluster{e: e, s: s, now: now, poolIdx: map[string]int32{}, nodeIDs: make(map[string]int32, len(s.Nodes))},
		ledger: ledger{
			tenantNS: make(map[string]int, len(e.tenants)),
			planned:  map[JobRef]int{},
		},
	}}
	st.ledger.cluster = &st.cluster
	st.ix, st.nodeIndex.m, st.output.m = &st.nodeIndex, &st.model, &st.model
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

func (l *ledger) tenantOf(namespace string) int {
	if i, ok := l.tenantNS[namespace]; ok {
		return i
	}
	i := len(l.tenants)
	l.tenants = append(l.tenants, newTenantState(&policy.Tenant{
		Name: namespace, Namespace: namespace, Limit: policy.Unlimited, Weight: policy.DefaultTenantWeight,
	}))
	l.tenantNS[namespace] = i
	return i
}

// poolOfName returns the pool index for a Nomad node pool, adding pools
// the policy does not name.
func (c *cluster) poolOfName(name string) int32 {
	if i, ok := c.poolIdx[name]; ok {
		return i
	}
	i := int32(len(c.pools))
	c.pools = append(c.pools, name)
	c.poolIdx[name] = i
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
	claimed := make([][]gpuClaim, len(st.nodes))
	room := 0
	for _, n := range st.nodes {
		room += min(n.GPUs, maxClaimRoom)
	}
	shared := make([]gpuClaim, room)
	for i, n := range st.nodes {
		r := min(n.GPUs, maxClaimRoom)
		claimed[i], shared = shared[:0:r], shared[r:]
	}
	gangs := map[JobRef]int{}
	// Many allocations hold no GPU: count those that do rather than
	// reserve room for every allocation.
	withGPUs := 0
	for i := range st.s.Allocs {
		if len(st.s.Allocs[i].GPUIDs) > 0 {
			withGPUs++
		}
	}
	st.units = make([]unit, 0, withGPUs)
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
		mark := len(claimed[n])
		if id, bad := st.claimGPUs(int32(i), &claimed[n]); bad {
			claimed[n] = claimed[n][:mark]
			st.skip("alloc "+a.ID, "GPU %q is empty or already held on node %s", id, a.NodeID)
			continue
		}
		g := len(a.GPUIDs)
		if int(free[n]) < g && !a.Draining {
			claimed[n] = claimed[n][:mark]
			st.skip("alloc "+a.ID, "holds %d GPUs but node %s has %d unclaimed", g, a.NodeID, free[n])
			continue
		}
		free[n] -= int32(g)
		tenant := st.tenantOf(a.Job.Ref.Namespace)
		tier := st.e.tierFor(tenant, a.Job.Tier)
		if a.Draining {
			// Its GPUs are as good as free: a preemption decided earlier
			// is freeing them for someone, who has them first.
			switch {
			case st.earmark(a.For, a.ForGroup, n, g):
				st.markDraining(a.For, a.ForGroup, n, g)
			case a.For != nil && st.inFlight(*a.For):
				// Set aside for no one while Nomad places its job.
			default:
				free[n] += int32(g)
			}
			continue
		}
		gu := g * st.unitsOn(n)
		st.tenants[tenant].use += gu
		if st.tenants[tenant].quotas != nil {
			st.addUse(tenant, n, g)
		}
		if !st.e.tiers[tier].preemptible {
			st.tenants[tenant].fixed += gu
		}
		age := st.now.Sub(a.StartedAt)
		if a.Job.Gang {
			if ui, ok := gangs[a.Job.Ref]; ok {
				u := &st.units[ui]
				gg := &st.gangs[u.gang]
				gg.allocs = append(gg.allocs, int32(i))
				gg.spread = addNode(gg.spread, n, g)
				u.gpus += g
				u.units += int32(gu)
				u.age = min(u.age, age) // the newest member's
				continue
			}
			gangs[a.Job.Ref] = len(st.units)
		}
		u := unit{
			first:  int32(i),
			gang:   -1,
			node:   n,
			jobTag: jobTag(a.Job.Ref),
			tier:   tier,
			tenant: tenant,
			prio:   st.e.effectivePriority(tier, &a.Job),
			gpus:   g,
			units:  int32(gu),
			age:    age,
		}
		u.misranked = a.Job.Priority != u.prio
		if a.Job.Gang {
			u.gang = int32(len(st.gangs))
			st.gangs = append(st.gangs, gangUnit{allocs: []int32{int32(i)}, spread: []nodeGPUs{{n, g}}})
		}
		st.units = append(st.units, u)
	}
	st.buildChains()
	st.earmarkFreed(free)
	st.cap = newCapacity(&st.pl, st.maxGPUs)
	st.cap.fill(free)
	st.exposeBeyondReserve()
	for ui := range st.units {
		st.classify(int32(ui))
		u := &st.units[ui]
		u.recent = int32(st.recentPreemptions(st.jobOf(u)))
		if limit := st.e.p.Preemption.MaxPerJobPerHour; limit > 0 && int(u.recent) == limit-1 {
			st.trackPlanned = true
		}
		u.life = int32(min(lifetimePreemptions(st.jobOf(u)), 1<<30))
		if most := st.e.p.Preemption.MaxPerJob; most > 0 && int(u.life) == most-1 {
			st.trackPlanned = true
		}
	}
	st.liftPromoted()
	st.sortCandidates()
	st.buildPotential()
}

// maxClaimRoom caps the GPU IDs reserved up front per node.
const maxClaimRoom = 64

// sameJob reports whether unit u belongs to b's job. Units are checked as
// candidates again and again; comparing cheap tags of the job references
// first spares most checks a string comparison through the snapshot
// (equal references have equal tags).
func (c *cluster) sameJob(u *unit, b *bene) bool {
	return u.jobTag == b.jobTag && c.jobOf(u).Ref == b.d.Job.Ref
}

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
		return tag | uint64(s[len(s)-4])<<24 | uint64(s[len(s)-3])<<16 | uint64(s[len(s)-2])<<8 | uint64(s[len(s)-1])
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

// claimGPUs claims allocation ai's GPUs on its node, unless one is empty
// or already claimed there (by it or another): then it returns that ID.
func (c *cluster) claimGPUs(ai int32, claimed *[]gpuClaim) (string, bool) {
	for gi, id := range c.s.Allocs[ai].GPUIDs {
		if id == "" {
			return id, true
		}
		tag := strTag(id)
		for _, cl := range *claimed {
			if cl.tag == tag && c.s.Allocs[cl.alloc].GPUIDs[cl.gpu] == id {
				return id, true
			}
		}
		*claimed = append(*claimed, gpuClaim{tag: tag, alloc: ai, gpu: int32(gi)})
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
func (c *cluster) classify(ui int32) {
	u := &c.units[ui]
	if rule := c.idleRule(u); rule != nil && !c.snoozed(u, rule) && c.idleFor(u, rule) {
		u.idle = idlePressure
		if rule.Mode == policy.IdleModeAlways {
			u.idle = idleAlways
		}
	}
	c.nodesOf(u, func(n int32, _ int) {
		p := c.poolOf[n]
		if int(p) < len(c.e.poolOwner) && p != 0 && !c.e.poolOwner[p][u.tier] {
			u.backfill = true
		}
	})
}

// idleFor reports whether every allocation of a unit has been idle for the
// rule's duration; a gang is idle only when all its members are.
func (c *cluster) idleFor(u *unit, rule *policy.IdleRule) bool {
	idle := true
	c.allocsOf(u, func(ai int32) {
		since, ok := IdleSince(c.s.Allocs[ai].Usage, rule.Threshold)
		idle = idle && ok && c.now.Sub(since) >= rule.After
	})
	return idle
}

// snoozed reports whether a person snoozed the unit's idle rule for its
// job and the snooze has not ended: however idle, its GPUs stay its own.
// (A gang's allocations all carry their job's snooze.)
func (c *cluster) snoozed(u *unit, rule *policy.IdleRule) bool {
	return c.now.Before(SnoozeEnd(c.jobOf(u).Snooze, rule))
}

// idleRule is the idle rule that covers a unit, nil when none does (or
// its tier may not be preempted).
func (c *cluster) idleRule(u *unit) *policy.IdleRule {
	col := min(u.tenant, len(c.e.tenants))
	if !c.e.tiers[u.tier].preemptible {
		return nil
	}
	return c.e.idle[u.tier][col]
}

// idleOf says, for a reason, since when a unit idle under rule has been
// idle (its members' latest start of idleness) and at what mean use.
func (c *cluster) idleOf(u *unit, rule *policy.IdleRule) idleState {
	var is idleState
	members := 0
	c.allocsOf(u, func(ai int32) {
		a := &c.s.Allocs[ai]
		since, _ := IdleSince(a.Usage, rule.Threshold)
		if since.After(is.since) {
			is.since = since
		}
		is.mean += meanUtil(a.Usage, since)
		members++
	})
	is.mean /= float64(members)
	return is
}
