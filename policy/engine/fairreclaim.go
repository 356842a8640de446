package engine

import (
	"strconv"

	"github.com/gpu-steward/steward/policy"
)

// Fair-share reclaim (policy.Preemption.FairShareReclaimAbove, rule
// fair_share). Ordering waiting work by decayed usage (fairshare.go) cannot
// make shares fair when one tenant's long jobs hold borrowed GPUs for days:
// nothing would take them back. With it, a tenant that waits to borrow
// (beyond its reserve, within its limit) preempts the borrowed work of a
// tenant that used more than FairShareReclaimAbove times its fair share
// over time and more per unit of weight than it did.
//
// What keeps it from thrashing:
//   - Kueue's LessThanOrEqualToFinalShare: a victim goes only while, after
//     the move, the waiting tenant borrows no more per unit of weight than
//     the victim's tenant keeps. The victim's tenant, waiting in turn,
//     would then borrow more per weight than the other keeps: the GPUs
//     never go back by this rule (and the gate on decayed usage points the
//     same way: the victim's tenant used more).
//   - the victim's tenant keeps its reserve (only borrowed work goes, and
//     the share test keeps it at or above its reserve), its department's
//     and its pool reserves;
//   - the usual guards: work younger than min_runtime, jobs at the eviction
//     cap or protected by max_per_job, non-preemptible work (beyond its
//     reserve too: only reserve reclaims take that), and work of a tier
//     above the waiting work's stay.
//
// And the other way: a job of the tenant far above its share, promoted
// after an hour's wait (often a fair-share victim), does not take back by
// priority the work of its own tier of a tenant that would reclaim it by
// fair share (fairShields). Without that the two traded GPUs: in the
// simulator's TestInvariantsOverTime with fair share on, 71 tugs of war in
// about 3,000 preemptions (33 of them promoted interactive work taking
// interactive work back; 23 with the half-life alone); with it, 13.
//
// It runs only when nothing else frees enough (placeOne: after the
// reclaim, priority and protected searches), so it adds nothing to plans
// of policies without it, nor to demands that other rules serve.

// fairWalkBudget bounds the candidates one fair-share search passes: it
// runs for demands nothing else serves (once per tenant, tier and pool
// that fails: the plan's failure cache), and the candidates of a large
// cluster are many.
const fairWalkBudget = 4096

// fairReclaim finds room for one allocation of b by preempting borrowed
// work of tenants far above their fair share over time, best victims first
// (the candidates' order: lowest priority, then least progress at risk),
// on the first node where that frees enough. need is what b's tenant
// takes in all (the rest of a gang), in units.
func (st *state) fairReclaim(b *bene, need int) (int32, []victim, bool) {
	above := st.e.p.Preemption.FairShareReclaimAbove
	if above <= 0 || !st.e.fairOn() || b.entitled || b.within || b.deptOnly || b.inPool > 0 {
		return 0, nil, false
	}
	after, ok := st.fairVictims(b, need, above)
	if !ok {
		return 0, nil, false
	}
	st.settle()
	w := &st.walk
	w.reset(len(st.nodes))
	c := &st.cands[b.pool]
	sg := &c.segs[segOver]
	for sg.next < sg.end && st.units[c.units[sg.next]].taken {
		sg.next++
	}
	// Candidates of tenants over their reserve, past min_runtime, of a
	// tier no higher than b's. Their priority may be higher than b's by a
	// promotion: a promotion lifts work that waited long above its own
	// tier's, not above another tenant's fair share.
	budget := fairWalkBudget
	for _, ui := range c.units[sg.next:sg.end] {
		if budget--; budget < 0 {
			break
		}
		u := &st.units[ui]
		if u.taken || !st.fairVictim[u.tenant] || st.e.tiers[u.tier].priority > st.e.tiers[b.tier].priority {
			continue
		}
		var found int32 = -1
		st.nodesOf(u, func(n int32, _ int) {
			if found < 0 && st.cap.nodeIn(n, b.pool) && st.addFairVictim(ui, b, n, after) {
				found = n
			}
		})
		if found >= 0 {
			return found, st.prune(b, found), true
		}
	}
	return 0, nil, false
}

// fairVictims marks, in st.fairVictim, the tenants b may take borrowed work
// from, and returns what b's tenant would borrow per unit of weight after
// the move (held, set aside for it and need, beyond its reserve). false
// when there are none.
func (l *ledger) fairVictims(b *bene, need int, above float64) (float64, bool) {
	s := l.standings()
	bt := &l.tenants[b.tenant]
	after := float64(bt.use+bt.earmarked+need-bt.reserve) / bt.t.Weight
	mine := s[b.tenant].perWeight(l.tenants[b.tenant].t)
	if cap(l.fairVictim) < len(l.tenants) {
		l.fairVictim = make([]bool, len(l.tenants))
	}
	l.fairVictim = l.fairVictim[:len(l.tenants)]
	some := false
	for ti := range l.tenants {
		t := &l.tenants[ti]
		ok := ti != b.tenant && ti < len(s) && s[ti].counted && s[ti].ratio() > above &&
			s[ti].perWeight(t.t) > mine && float64(t.use-t.reserve)/t.t.Weight > after
		l.fairVictim[ti] = ok
		some = some || ok
	}
	return after, some
}

// addFairVictim adds unit ui's GPUs on node n to the walk if b may take
// them by fair share (after: what b's tenant borrows per unit of weight
// once placed), and reports whether the node then frees enough for one
// allocation of b. A unit of a chain gives the chain's next on n.
func (st *state) addFairVictim(ui int32, b *bene, n int32, after float64) bool {
	if ui = st.chainPick(ui, n); ui < 0 {
		return false
	}
	u := &st.units[ui]
	if u.taken || !st.fairVictim[u.tenant] || st.capped(u) || st.sameJob(u, b) ||
		u.age < st.e.p.Preemption.MinRuntime || !st.mayTake(u, b, RuleFairShare) {
		return false
	}
	wn := st.walk.touch(n)
	t := &st.tenants[u.tenant]
	picked := wn.picked(u.tenant)
	if keeps := t.use - picked - int(u.units) - t.reserve; float64(keeps)/t.t.Weight < after {
		return false // b would then borrow more per weight than u's tenant keeps: it would take them back
	}
	// Fair share only borrows: as the share test keeps the tenant's
	// reserve whole, so these keep its pool's and department's.
	if t.quotas != nil && st.protectedInPool(u, n, picked, true) {
		return false
	}
	if st.e.depts != nil && st.deptProtected(u, b, n, true) {
		return false
	}
	bt := &st.tenants[b.tenant]
	wn.list = append(wn.list, victim{ui: ui, rule: RuleFairShare, holdsPrev: t.use, beneHolds: int32(bt.use + bt.earmarked)})
	st.chainListed(ui)
	wn.pick(u.tenant, int(u.units))
	wn.freed += st.gpusOn(u, n)
	return st.usableFree(b, n)+wn.freed >= b.g
}

// fairReclaimReason explains a fair-share reclaim: "tenant research used
// 3.2× its fair share over time (41.3 of 51.6 decayed borrowed GPU-hours,
// fair share 50% at weight 1; half-life 24h; reclaim above 1.5×) and
// borrows 12 GPUs (holds 16, reserve 4): reclaiming 2 GPUs for product/nb/main
// (tenant product used 0.8× its fair share and borrows 2 GPUs: holds 6,
// reserve 4, weight 1)". It reads only the policy, the standings (fixed
// for the plan) and the victim's figures: it may be written on the
// explainer's goroutine.
func (o *output) fairReclaimReason(m *msg, b *bene, v victim, gpus int) Reason {
	u := &o.m.units[v.ui]
	s := o.m.fair
	vt, bt := o.m.tenants[u.tenant].t, o.m.tenants[b.tenant].t
	var total float64
	for i := range s {
		if s[i].counted {
			total += s[i].usage
		}
	}
	vs, bs := s[u.tenant], s[b.tenant]
	m.start("tenant ", vt.Name, " used ").f1(vs.ratio()).s("× its fair share over time (").f1(vs.usage / 3600).s(" of ").
		f1(total / 3600).s(" decayed borrowed GPU-hours, fair share ").s(percent(100 * vs.fair)).s("% at weight ").
		s(fmtWeight(vt.Weight)).s("; half-life ").dur(o.m.e.p.Preemption.FairShareHalfLife).s("; reclaim above ").
		s(fmtWeight(o.m.e.p.Preemption.FairShareReclaimAbove)).s("×) and borrows ").gpusU(v.holdsPrev - vt.Reserve*gpuUnit).
		s(" (holds ").u(v.holdsPrev).s(", reserve ").n(vt.Reserve).s("): reclaiming ")
	if !o.where(m, u, gpus) {
		m.gpus(gpus)
	}
	m.s(" for ").demand(b.d).s(" (tenant ", bt.Name, " used ").f1(bs.ratio()).s("× its fair share and borrows ").
		gpusU(max(int(v.beneHolds)-bt.Reserve*gpuUnit, 0)).s(": holds ").u(int(v.beneHolds)).s(", reserve ").n(bt.Reserve).
		s(", weight ").s(fmtWeight(bt.Weight)).s(")")
	o.protectedNote(m, u, RuleFairShare)
	return m.reason(RuleFairShare)
}

// f1 appends x with one decimal.
//
//go:noinline
func (m *msg) f1(x float64) *msg {
	m.b = strconv.AppendFloat(m.b, x, 'f', 1, 64)
	return m
}

// fmtWeight writes a weight or factor as the policy would: 1, 0.5, 1.5.
func fmtWeight(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// fairShields reports whether unit u, of a tier no lower than b's, is kept
// from b's priority by fair share: b runs above its tier's priority by a
// promotion alone, and b's tenant is one u's tenant could reclaim from by
// fair share (it used more than fair_share_reclaim_above times its fair
// share, and more per unit of weight than u's tenant). A promotion lifts
// work that waited long above its own tier, not above another tenant's fair
// share. False when fair-share reclaim is off: priorities are as before.
func (l *ledger) fairShields(u *unit, b *bene) bool {
	above := l.e.p.Preemption.FairShareReclaimAbove
	if above <= 0 || !l.e.fairOn() || u.tenant == b.tenant || l.e.tiers[b.tier].priority > l.e.tiers[u.tier].priority {
		return false
	}
	s := l.standings()
	return b.tenant < len(s) && u.tenant < len(s) && s[b.tenant].counted && s[b.tenant].ratio() > above &&
		s[b.tenant].perWeight(l.tenants[b.tenant].t) > s[u.tenant].perWeight(l.tenants[u.tenant].t)
}

// perWeight is the tenant's decayed usage per unit of its weight t.Weight
// (usageKey's figure, without its map lookup).
func (s standing) perWeight(t *policy.Tenant) float64 { return s.usage / t.Weight }
