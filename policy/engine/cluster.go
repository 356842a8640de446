package engine

import (
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// cluster is what the plan reads about each node and unit, under the
// policy: the nodes, their pools and devices, the units that hold their
// GPUs and the chains Nomad stops them in. Its methods answer questions
// about them (a unit's job, nodes, idleness, victim facts; a node's
// units per GPU) and keep the chains' order as units are taken.
type cluster struct {
	e   *Engine
	s   *Snapshot
	now time.Time
	// clock is now, for since (since.go).
	clock clock

	pl placement // which nodes each demand may use (sets), and their devices
	// poolCells[q][cell]: quota pool q holds the cell (quota.go).
	poolCells [][]bool

	nodeIDs map[string]int32
	nodes   []*Node
	pools   []string // pool names: e.poolNames then node pools seen only here
	poolIdx map[string]int32
	poolOf  []int32 // [node] pool index
	maxGPUs int
	units   []unit
	gangs   []gangUnit
	chains  []chain // groups' units in the order Nomad stops them (chains.go)

	// sc is the plan's working memory, from the engine's pool (scratch.go).
	sc *scratch
}

// unit is what gets preempted together: one allocation, or all of a gang
// job's allocations. Tens of thousands of units are built per plan and read
// at random by the victim searches, so a unit holds no pointers (the GC
// never scans them) and is kept small: what it shares with its allocations
// (job, group, members, nodes) is reached through indices.
type unit struct {
	// The fields the victim walk reads of every unit it passes (findVictims,
	// addVictim, victimRule) come first, within 64 bytes: the units are
	// 96 bytes and read at random, and with taken last and the node first
	// every unit passed cost two cache lines; now an even one costs one
	// and an odd one (at 32 bytes into a line) two at most.
	taken     bool
	idle      idleMode // idle for at least its rule's After, and the rule's mode
	backfill  bool     // runs in a pool kept for tiers other than its own
	buried    bool     // in a chain below its top run on one node: no victim (chains.go)
	misranked bool     // its job's Nomad priority is not prio (checkPriorities)
	// checkpointed: a single allocation that says when it last saved a
	// checkpoint (atRisk reads it then; else its age will do).
	checkpointed bool
	// named: its (first) allocation has a Nomad name (Alloc.Name), so it
	// may be in a chain; buildChains reads the others' allocations not.
	named bool
	// exposed: of a non-preemptible tier but beyond its tenant's reserve
	// (exposeBeyondReserve), so preemptible after all.
	exposed bool
	gang    int32         // index into state.gangs; -1 for a single allocation
	node    int32         // the node of a single allocation
	chain   int32         // index into state.chains; noChain for none (chains.go)
	recent  int32         // preemptions of its job in the last hour
	age     time.Duration // since the newest member started (now - StartedAt)
	tenant  int
	tier    int
	prio    int // effective priority
	gpus    int
	key     uint64 // victim preference: lower is taken first
	jobTag  uint64 // jobTag(job.Ref)
	units   int32  // what its GPUs count for in its tenant's figures (units.go)
	life    int32  // preemptions of its job over its life (protect.go)
	first   int32  // index into Snapshot.Allocs of its first allocation: the job and group
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
	ids = c.appendAllocIDs(u, ids)
	if len(ids) > 1 {
		slices.Sort(ids)
	}
	return ids
}

// appendAllocIDs appends a unit's allocation IDs to ids, unsorted: a
// caller gathering several units' sorts once.
func (c *cluster) appendAllocIDs(u *unit, ids []string) []string {
	if u.gang < 0 {
		return append(ids, c.s.Allocs[u.first].ID)
	}
	for _, ai := range c.gangs[u.gang].allocs {
		ids = append(ids, c.s.Allocs[ai].ID)
	}
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

// sameJob reports whether unit u belongs to b's job. Units are checked as
// candidates again and again; comparing cheap tags of the job references
// first spares most checks a string comparison through the snapshot
// (equal references have equal tags).
func (c *cluster) sameJob(u *unit, b *bene) bool {
	return u.jobTag == b.jobTag && c.jobOf(u).Ref == b.d.Job.Ref
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

// classify works out a unit's idle state and whether it is backfill.
func (c *cluster) classify(ui int32) {
	u := &c.units[ui]
	if rule := c.e.idleRule(u); rule != nil && !c.snoozed(u, rule) && c.idleFor(u, rule) {
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
		idle = idle && ok && c.clock.since(since) >= rule.After
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
func (e *Engine) idleRule(u *unit) *policy.IdleRule {
	col := min(u.tenant, len(e.tenants))
	if !e.tiers[u.tier].preemptible {
		return nil
	}
	return e.idle[u.tier][col]
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
