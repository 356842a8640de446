// Package engine is Steward's decision engine: a pure function from a
// cluster snapshot, a policy and the time to an ordered plan of actions,
// each with a reason that carries its numbers.
//
// It imports no Nomad client, does no I/O and reads no clock, so the
// controller, the simulator, the tests and the benchmarks all run the very
// same code. Like Nomad's own scheduler it works on a private, mutable copy
// of the cluster ("what if these allocations were gone?") and emits only
// the decisions. A large plan writes its actions' text on a second
// goroutine while it decides (explain.go); the plan is the same either way.
package engine

import (
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Engine plans against one policy. It is safe for concurrent use: Plan
// keeps all its state per call.
type Engine struct {
	p *policy.Policy

	tiers       []tierInfo
	tierIdx     map[string]int
	defaultTier int

	tenants    []*policy.Tenant // policy tenants, by name
	tenantByNS map[string]int
	// tenantTier resolves a job's tier meta value in its tenant, as
	// policy.TenantTier does: [tenant][tier] is the tier a job of the
	// tenant naming that tier runs in, and [tenant][len(tiers)] the tier of
	// one naming none or an unknown one. The last row is for namespaces no
	// tenant names. Jobs write their own meta, so the engine never trusts
	// a tier a job names: this table is built from TenantTier once, and a
	// plan resolves each job with a map lookup and two indexings.
	tenantTier [][]int

	// pools: index 0 is "any pool"; 1.. are the node pools policy pools
	// name, then others as they appear in a snapshot (per Plan).
	poolNames []string
	poolOwner [][]bool // [pool][tier]: tier owns the pool
	poolGrace []time.Duration
	ownsPool  []bool // [tier]: the tier owns some pool

	idle [][]*policy.IdleRule // [tier][policy tenant]; the last column is "other tenants"

	// preemptedFirst: resume_order "preempted-first" (orderDemands).
	preemptedFirst bool
	// overReserves: some tier may preempt within reserves (tierInfo.overReserve).
	overReserves bool

	// quotaPools are the pools tenants have quotas in; quotas[tenant]
	// each policy tenant's (quota.go).
	quotaPools []quotaPool
	quotas     [][]tenantQuota
	// depts are the policy's departments, by name; deptOf[tenant] each
	// policy tenant's index in it, or -1. Both nil without departments
	// (department.go).
	depts  []deptInfo
	deptOf []int
	// orderPools are the pools with an order for their waiting work, by
	// name (orderOf).
	orderPools []*policy.Pool
	// precedence[tenant][tier] is the node pools its waiting work moves
	// between (precedence.go); nil when no tier or tenant has one.
	precedence [][][]string

	// scratch holds plans' working memory between plans (scratch.go).
	scratch scratchPool
}

type tierInfo struct {
	name        string
	priority    int
	preemptible bool
	// waitsBeyond: a non-preemptible tier whose work waits rather than
	// run beyond its tenant's reserve (beyond_reserve = "wait"); a
	// non-preemptible tier without it runs there, preemptible by reserve
	// reclaims alone (reserve.go).
	waitsBeyond bool
	// urgent: the tier cuts its victims' grace below preemption.grace
	// (preempt_grace): its work cannot wait, so it may take GPUs set
	// aside for lower work when nothing else is free (takeMarksBelow).
	urgent bool
	// t is the policy's tier: its CapGrace caps the grace of victims
	// freed for the tier's work (grace.go).
	t *policy.Tier
	// overReserve[v]: the tier's work may preempt tier v's within another
	// tenant's reserve (preempts_reserved), and so tier v's demands do
	// not reclaim GPUs from it.
	overReserve []bool
}

// New compiles a policy for planning.
func New(p *policy.Policy) *Engine {
	e := &Engine{p: p, tierIdx: map[string]int{}, tenantByNS: map[string]int{},
		preemptedFirst: p.Preemption.ResumeOrder != policy.ResumeOrderLongestWaiting}
	for _, name := range p.TierNames() {
		t := p.Tiers[name]
		e.tierIdx[name] = len(e.tiers)
		e.tiers = append(e.tiers, tierInfo{name: name, priority: t.Priority, preemptible: t.Preemptible, t: t,
			urgent:      t.CapGrace(p.Preemption.Grace) < p.Preemption.Grace,
			waitsBeyond: t.WaitsBeyondReserve()})
	}
	for i := range e.tiers {
		e.tiers[i].overReserve = make([]bool, len(e.tiers))
		for _, v := range e.tiers[i].t.PreemptsReserved {
			if vi, ok := e.tierIdx[v]; ok {
				e.tiers[i].overReserve[vi] = true
				e.overReserves = true
			}
		}
	}
	e.defaultTier = e.tierIdx[p.Defaults.Tier]
	for _, name := range p.TenantNames() {
		e.tenantByNS[p.Tenants[name].Namespace] = len(e.tenants)
		e.tenants = append(e.tenants, p.Tenants[name])
	}
	e.tenantTier = make([][]int, len(e.tenants)+1)
	for ni := range e.tenantTier {
		t := &policy.Tenant{Name: "\x00other", Limit: policy.Unlimited, Weight: policy.DefaultTenantWeight}
		if ni < len(e.tenants) {
			t = e.tenants[ni]
		}
		row := make([]int, len(e.tiers)+1)
		for ti, tier := range e.tiers {
			row[ti] = e.resolvedIdx(p, t, tier.name)
		}
		row[len(e.tiers)] = e.resolvedIdx(p, t, "")
		e.tenantTier[ni] = row
	}
	e.poolNames = []string{""}
	e.poolOwner = [][]bool{make([]bool, len(e.tiers))}
	e.poolGrace = []time.Duration{0}
	e.ownsPool = make([]bool, len(e.tiers))
	for _, name := range p.PoolNames() {
		pl := p.Pools[name]
		if len(pl.Owners) == 0 || pl.NodePool == "" {
			// Ownership (backfill) is by node pool: pools without owners
			// are for quotas, precedence and order, which read the
			// policy's pools themselves (and may share a node pool).
			continue
		}
		owners := make([]bool, len(e.tiers))
		for _, o := range pl.Owners {
			if i, ok := e.tierIdx[o]; ok {
				owners[i] = true
				e.ownsPool[i] = true
			}
		}
		e.poolNames = append(e.poolNames, pl.NodePool)
		e.poolOwner = append(e.poolOwner, owners)
		e.poolGrace = append(e.poolGrace, pl.Grace)
	}
	e.compileQuotas()
	e.compileDepartments()
	e.compilePrecedence()
	for _, name := range p.PoolNames() {
		if pl := p.Pools[name]; pl.Order != policy.PoolOrderDefault {
			e.orderPools = append(e.orderPools, pl)
		}
	}
	e.idle = make([][]*policy.IdleRule, len(e.tiers))
	for ti, t := range e.tiers {
		e.idle[ti] = make([]*policy.IdleRule, len(e.tenants)+1)
		for ni, tn := range e.tenants {
			e.idle[ti][ni] = p.IdleRuleFor(t.name, tn.Name)
		}
		e.idle[ti][len(e.tenants)] = p.IdleRuleFor(t.name, "\x00other")
	}
	return e
}

// overReserve reports whether work of tier a at priority pa may preempt
// work of tier v at priority pv within another tenant's reserve: a's tier
// lists v's in preempts_reserved, and a outranks v (outranks: a promotion
// has not lifted the victim to a's priority or above).
func (e *Engine) overReserve(a, pa, v, pv int) bool {
	return e.tiers[a].overReserve[v] && e.outranks(a, pa, v, pv)
}

// outranks reports whether work of tier a at effective priority pa may
// preempt work of tier v at pv by priority: pa is higher, and a's tier
// runs at no lower a priority than v's. A promotion lifts a job above its
// own tier's work and below (and orders waiting work), never above work of
// a higher tier: otherwise two jobs of tiers within a boost of each other
// preempt each other in turn (issue 28: training 40 promoted to 50 takes
// the GPU of batch 45, which, waiting, is promoted to 55 and takes it
// back, and so on). With this rule, once A was preempted for B by
// priority, B is never preempted for A while both live: A's tier runs at
// B's, B was promoted and A not, and a promotion is never undone.
func (e *Engine) outranks(a, pa, v, pv int) bool {
	return pa > pv && e.tiers[a].priority >= e.tiers[v].priority
}

// failTier is the tier part of a failure's key (failKey.tier).
func (e *Engine) failTier(tier int) int {
	if e.overReserves {
		return tier
	}
	return -1
}

// Policy returns the policy the engine plans against.
func (e *Engine) Policy() *policy.Policy { return e.p }

// resolvedIdx is the index of the tier a job of tenant t naming tier runs
// in; the policy's default tier when that is no tier (an invalid policy).
func (e *Engine) resolvedIdx(p *policy.Policy, t *policy.Tenant, tier string) int {
	name, _ := p.TenantTier(t, tier)
	if i, ok := e.tierIdx[name]; ok {
		return i
	}
	return e.defaultTier
}

// tierFor resolves a job's tier meta value in its tenant (an index into
// state.tenants; those past the policy's are namespaces no tenant names):
// a tier the policy lacks, or one the tenant may not use, gives the
// tenant's default tier.
func (e *Engine) tierFor(tenant int, name string) int {
	row := e.tenantTier[min(tenant, len(e.tenants))]
	if i, ok := e.tierIdx[name]; ok {
		return row[i]
	}
	return row[len(e.tiers)]
}

// effectivePriority is the priority the engine ranks a job by: for a job
// Steward promoted, its Nomad priority while that lies between its tier's
// and its tier's plus the promotion boost; else its tier's.
func (e *Engine) effectivePriority(tier int, job *Job) int {
	base := e.tiers[tier].priority
	if job.Promoted && job.Priority >= base && job.Priority <= promotedPriority(base, e.p.Preemption.Promote.Boost) {
		return job.Priority
	}
	return base
}

func promotedPriority(base, boost int) int {
	if base+boost > policy.MaxPriority {
		return policy.MaxPriority
	}
	return base + boost
}

// Plan decides what to do now. It never panics on inconsistent input: bad
// items are skipped and listed in Plan.Skipped.
func (e *Engine) Plan(s *Snapshot, now time.Time) *Plan {
	st := newState(e, s, now)
	st.checkPriorities()
	st.releaseIdleAlways()
	st.enforceLimits()
	st.serveDemands()
	st.planMoves()
	st.idleWarnings()
	plan := st.finish()
	e.scratch.put(st)
	return plan
}
