package engine

import (
	"slices"

	"github.com/gpu-steward/steward/policy"
)

// Pool quotas: a tenant's reserve and limit within a pool (a policy pool's
// nodes: a node pool, some GPU models, or both), beside its tenant-wide
// ones (policy.Tenant.Quotas):
//
//   - limit: an allocation never goes on a node of a pool where its
//     tenant would then hold more than its limit there. Its demand's set
//     loses those pools' nodes for the placement; if none is left, it
//     waits for the limit (rule limit), with the pool named.
//   - reserve: a demand whose tenant holds less than its reserve in a pool,
//     and that can run on the pool's nodes, reclaims GPUs there from
//     tenants above their own reserve in that pool, as a tenant under its
//     tenant-wide reserve does cluster-wide: in the pool's nodes only,
//     and whatever the tenant holds elsewhere. It comes after free GPUs
//     and before the tenant-wide rules (reclaim, priority).

// quotaPool is a pool some tenant has a quota in.
type quotaPool struct {
	name string
	p    *policy.Pool
}

// tenantQuota is a tenant's quota in one pool, and what it holds there, in
// units (units.go).
type tenantQuota struct {
	pool           int // index into Engine.quotaPools
	reserve, limit int
	use            int // GPUs held on the pool's nodes, draining excluded
}

// compileQuotas lists the pools tenants have quotas in, and each tenant's.
func (e *Engine) compileQuotas() {
	idx := map[string]int{}
	e.quotas = make([][]tenantQuota, len(e.tenants))
	for ti, t := range e.tenants {
		for _, name := range sortedKeys(t.Quotas) {
			q, p := t.Quotas[name], e.p.Pools[name]
			if q == nil || p == nil {
				continue
			}
			i, ok := idx[name]
			if !ok {
				i = len(e.quotaPools)
				idx[name] = i
				e.quotaPools = append(e.quotaPools, quotaPool{name: name, p: p})
			}
			limit := int(^uint(0) >> 1)
			if q.Limit != policy.Unlimited {
				limit = q.Limit * gpuUnit
			}
			e.quotas[ti] = append(e.quotas[ti], tenantQuota{pool: i, reserve: q.Reserve * gpuUnit, limit: limit})
		}
	}
}

// buildQuotas files each cell in the quota pools that hold it, and gives
// each policy tenant its quotas: after buildPlacement, before the units.
func (l *ledger) buildQuotas() {
	if len(l.e.quotaPools) == 0 {
		return
	}
	pl := &l.pl
	l.poolCells = make([][]bool, len(l.e.quotaPools))
	for qi, qp := range l.e.quotaPools {
		l.poolCells[qi] = make([]bool, len(pl.cellPool))
		for cell := range pl.cellPool {
			l.poolCells[qi][cell] = qp.p.Holds(l.pools[pl.cellPool[cell]], pl.models[pl.cellClass[cell]])
		}
	}
	for ti := range l.e.quotas {
		l.tenants[ti].quotas = append([]tenantQuota(nil), l.e.quotas[ti]...)
	}
}

// inQuotaPool reports whether node n is in quota pool qi.
func (c *cluster) inQuotaPool(qi int, n int32) bool { return c.poolCells[qi][c.pl.cellOf[n]] }

// addUse records that tenant ti holds g more GPUs (fewer, when negative)
// on node n, in the pools it has quotas in.
func (l *ledger) addUse(ti int, n int32, g int) {
	qs := l.tenants[ti].quotas
	gu := g * l.pl.unitsOn(n)
	for i := range qs {
		if l.inQuotaPool(qs[i].pool, n) {
			qs[i].use += gu
		}
	}
}

// poolUse is what tenant ti holds in quota pool qi, and its reserve there
// (0 without a quota in it).
func (l *ledger) poolUse(ti, qi int) (use, reserve int, quota bool) {
	for _, q := range l.tenants[ti].quotas {
		if q.pool == qi {
			return q.use, q.reserve, true
		}
	}
	if l.poolHeld == nil {
		l.countPoolHeld()
	}
	return l.poolHeld[qi][ti], 0, false
}

// poolReserve is tenant ti's reserve in quota pool qi: 0 without a quota
// there. It reads only the policy, so reasons written on the explainer's
// goroutine may call it.
func (e *Engine) poolReserve(ti, qi int) int {
	if ti < len(e.quotas) {
		for _, q := range e.quotas[ti] {
			if q.pool == qi {
				return q.reserve
			}
		}
	}
	return 0
}

// countPoolHeld counts, for tenants without a quota in a pool, what they
// hold there: a reclaim's victims are judged by it. Taken units are
// counted out as they are taken (untakeHeld, takeHeld).
func (l *ledger) countPoolHeld() {
	l.poolHeld = make([][]int, len(l.e.quotaPools))
	for qi := range l.poolHeld {
		l.poolHeld[qi] = make([]int, len(l.tenants))
	}
	for ui := range l.units {
		u := &l.units[ui]
		if u.taken {
			continue
		}
		l.nodesOf(u, func(n int32, g int) {
			for qi := range l.poolHeld {
				if l.inQuotaPool(qi, n) {
					l.poolHeld[qi][u.tenant] += g * l.pl.unitsOn(n)
				}
			}
		})
	}
}

// heldChange follows a unit taken (sign -1) or put back (+1) in the pool
// counts of tenants without quotas, once they are counted.
func (l *ledger) heldChange(u *unit, sign int) {
	if l.poolHeld == nil {
		return
	}
	l.nodesOf(u, func(n int32, g int) {
		for qi := range l.poolHeld {
			if l.inQuotaPool(qi, n) {
				l.poolHeld[qi][u.tenant] += sign * g * l.pl.unitsOn(n)
			}
		}
	})
}

// limitedSet is b's set less the nodes of pools where one more allocation
// of b would take its tenant over its limit there; the first such pool
// when that leaves no node b could use.
func (ix *nodeIndex) limitedSet(b *bene) (set int32, full int) {
	m := ix.m
	full = -1
	qs := m.tenants[b.tenant].quotas
	var out []bool
	for _, q := range qs {
		if q.use+b.g*b.unitsPer <= q.limit {
			continue
		}
		if out == nil {
			out = make([]bool, len(m.pl.cellPool))
		}
		for cell, in := range m.poolCells[q.pool] {
			if in && m.pl.in[b.base][cell] {
				out[cell] = true
				if full < 0 {
					full = q.pool
				}
			}
		}
	}
	if out == nil {
		return b.base, -1
	}
	set = ix.setOf(m.pl.mask(func(cell int) bool { return m.pl.in[b.base][cell] && !out[cell] }))
	if m.pl.any(set) {
		return set, -1
	}
	return set, full
}

// enforcePoolLimits gives back tenant ti's newest work in each pool where
// it holds more than its limit there, as enforceLimits does tenant-wide.
func (st *state) enforcePoolLimits(ti int) {
	t := &st.tenants[ti]
	for i := range t.quotas {
		q := &t.quotas[i]
		if q.use <= q.limit {
			continue
		}
		holds := q.use
		outside := func(u *unit) bool {
			in := false
			st.nodesOf(u, func(n int32, _ int) { in = in || st.inQuotaPool(q.pool, n) })
			return !in
		}
		over := func(extra int) bool { return q.use+extra > q.limit }
		taken, capped := st.giveBack(ti, over, outside, false)
		if over(0) && capped > 0 {
			// The pool's limit wins over the cap, as a tenant's does
			// (enforceLimits).
			more, _ := st.giveBack(ti, over, outside, true)
			taken = append(taken, more...)
		}
		pool := st.e.quotaPools[q.pool].name
		st.emitGiveBack(ti, taken, q.limit/gpuUnit, func(m *msg) {
			m.start("tenant ", t.t.Name, " holds ").u(holds).s(" GPUs in pool ", pool)
		}, st.emit)
	}
}

// protectedInPool reports whether unit u's GPUs on node n are within its
// tenant's reserve in a pool that holds n: then no tenant-wide reclaim or
// priority may take them (its pool reserve is as good a guarantee as its
// tenant-wide one). picked is what the walk already took from the tenant
// on n; whole asks whether taking u whole would leave the tenant below its
// pool reserve (keepsReserve).
func (l *ledger) protectedInPool(u *unit, n int32, picked int, whole bool) bool {
	for _, q := range l.tenants[u.tenant].quotas {
		if q.reserve > 0 && keepsReserve(u, q.use-picked, q.reserve, whole) && l.inQuotaPool(q.pool, n) {
			return true
		}
	}
	return false
}

// quotaLimitReason explains an allocation held by a pool limit.
func (o *output) quotaLimitReason(b *bene, qi int) Reason {
	t := &o.m.tenants[b.tenant]
	for _, q := range t.quotas {
		if q.pool == qi {
			return o.text.start("tenant ", t.t.Name, " holds ").u(q.use).s(" GPUs in pool ", o.m.e.quotaPools[qi].name,
				", limit ").u(q.limit).s(" there: ").u(b.g * b.unitsPer).s(" more would exceed it").reason(RuleLimit)
		}
	}
	return Reason{RuleLimit, "pool " + o.m.e.quotaPools[qi].name + " limit"}
}

// reclaimInPool places one allocation of b by reclaiming, in a pool where
// its tenant holds less than its reserve there, GPUs from tenants above
// theirs. It reports false, leaving b as it was, when no pool allows it.
func (st *state) reclaimInPool(b *bene, need int) (int32, []victim, bool) {
	if b.d.Requeued {
		return 0, nil, false
	}
	for _, q := range st.tenants[b.tenant].quotas {
		if q.reserve <= 0 || q.use+need > q.reserve {
			continue
		}
		set := st.setOf(st.pl.mask(func(cell int) bool { return st.pl.in[b.pool][cell] && st.poolCells[q.pool][cell] }))
		if !st.pl.any(set) {
			continue
		}
		saved, entitled := b.pool, b.entitled
		b.pool, b.entitled, b.inPool = set, true, q.pool+1
		for _, young := range []bool{false, true} {
			if n, vs, ok := st.findVictims(b, young); ok {
				b.pool, b.entitled, b.inPool = saved, entitled, 0
				for i := range vs {
					vs[i].pool, vs[i].beneHolds = int32(q.pool+1), int32(q.use)
				}
				return n, vs, true
			}
		}
		b.pool, b.entitled, b.inPool = saved, entitled, 0
	}
	return 0, nil, false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
