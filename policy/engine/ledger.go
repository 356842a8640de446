package engine

import (
	"github.com/gpu-steward/steward/policy"
)

// ledger is the tenants' accounting as the plan goes: what each holds,
// in all and per quota pool and department, its standing against its fair
// share, and the preemptions decided per job. The model's take, untake,
// place and unplace keep it in step; its methods answer from it, reading
// the cluster.
type ledger struct {
	*cluster

	tenants []tenantState
	// tenantNS maps namespaces to tenants (policy tenants, then others
	// as they appear).
	tenantNS map[string]int
	// poolHeld[q][tenant] is what tenants without a quota in quota pool
	// q hold there, counted on first need (quota.go).
	poolHeld [][]int

	fair       []standing // [tenant] use against fair share over time (standings)
	fairVictim []bool     // [tenant] a fair-share reclaim may take its borrowed work (fairreclaim.go)

	// tierRuns[tenant*tiers+tier] counts the tenant's running preemptible
	// units of the tier at its own priority, on first need (ownswap.go).
	tierRuns []int32
	// barRows[tenant*tiers+tier] is barredBy(tenant, tier), on first
	// need (ownswap.go, barOf).
	barRows [][]bool

	planned      map[JobRef]int // preemptions decided in this plan, per job
	trackPlanned bool           // some job is one preemption short of the cap or of max_per_job
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
	// taken (earmarks.go), as far as that work takes them (no more than
	// each demand waits for: model.charged): promised to the tenant, so
	// within its limit as much as what it holds; else another of its
	// jobs would take the limit's room while they drain, and the work
	// they drain for would find itself over the limit.
	marked int
	// earmarked is all the GPUs set aside for its waiting work, what a
	// victim larger than its beneficiary frees beyond its need too: its
	// standing for fair share counts them (fairreclaim.go, setaside.go).
	earmarked int
	waiting   int
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
