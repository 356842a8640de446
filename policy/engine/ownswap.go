package engine

import "fmt"

// A promotion for waiting alone (promote.after_wait) relieves a tenant
// short of a tier's GPUs; it does not reorder the tenant's own work there.
// A job promoted for waiting preempts work of its tier by priority only of
// another tenant that runs more of the tier than its own tenant does (at
// the tier's own priority, as the plan starts):
//
//   - a swap with its tenant's own work of its tier leaves the tenant's
//     GPUs doing the same tier's work, so it gains the tenant nothing and
//     costs the victim its grace and its restart (GPU-time lost); and the
//     victim, waiting in its turn, is promoted after the same wait and
//     swaps back: the tenant's queue time-sliced by after_wait, a
//     checkpoint lost at every turn (177 of the 1,618 preemptions on
//     Helios's first 3,000 jobs on 10 nodes, example.hcl -scale 10);
//   - taking, instead, the work of a tenant that runs no more of the tier
//     hands its tenant more than the other by waiting alone, and that
//     tenant's jobs, promoted in turn, take it back (with fair share on,
//     where they may not, TestFairShareReclaimStory's tenant a took all
//     eight GPUs from b).
//
// It still goes first among its tier's waiting work, ranks as a victim at
// its promoted priority, takes lower tiers' work, and evens the tier out
// between tenants. A
// job promoted for being preempted after_preemptions times keeps the swap:
// it has lost its work again and again, and the swap gets it through (QoS:
// promotion after N preemptions). Reserve reclaims are no promotion's.

// waitPromotionBars reports whether b, promoted for waiting alone, may not
// take u, work of its tier's priority, by priority.
func (l *ledger) waitPromotionBars(u *unit, b *bene) bool {
	bar := l.barOf(b)
	return bar.barred != nil && l.e.tiers[u.tier].priority == int(bar.base) && bar.bars(u.tenant)
}

// waitBar is a beneficiary's wait promotion bar, worked out once for it
// (barOf): the rules ask it of every victim they judge for a wait
// promotion, and the bar depends only on the beneficiary and on the
// tenants' tier figures as the plan starts (tierHeld), fixed for the plan.
// Asked afresh, it read tierHeld twice a victim (with waitPromotionBars
// 2.9 M instructions a fleet plan; 2.4 M now, most of it tierHeld's
// other callers).
type waitBar struct {
	known bool
	base  int32 // the tier's own priority
	// barred[t]: the bar refuses tenant t's work of priority base; nil
	// when no bar applies to the beneficiary.
	barred []bool
}

// bars reports whether the bar refuses tenant t's work of its priority.
// A tenant the plan met after the rows were made runs none of the tier
// as the plan starts (tierHeld's 0), so any bar refuses it.
func (bar *waitBar) bars(t int) bool {
	return t >= len(bar.barred) || bar.barred[t]
}

// barOf returns b's bar, working it out on first use. Its rows (which
// tenants a tenant's promotions bar in a tier) are shared by every
// beneficiary of the tenant and tier.
func (l *ledger) barOf(b *bene) *waitBar {
	bar := &b.bar
	if bar.known {
		return bar
	}
	bar.known = true
	base := l.e.tiers[b.tier].priority
	bar.base = int32(base)
	if b.prio <= base || l.promotedForPreemptions(&b.d.Job) {
		return bar // no bar
	}
	nt := len(l.e.tiers)
	if l.barRows == nil {
		l.barRows = make([][]bool, len(l.tenants)*nt)
	}
	if i := b.tenant*nt + b.tier; i < len(l.barRows) {
		if l.barRows[i] == nil {
			l.barRows[i] = l.barredBy(b.tenant, b.tier)
		}
		bar.barred = l.barRows[i]
		return bar
	}
	bar.barred = l.barredBy(b.tenant, b.tier) // a tenant that appeared during the plan
	return bar
}

// barredBy is, per tenant, whether a wait promotion of tenant t in tier
// is barred from its work of the tier's priority: t's own, and that of
// every tenant that runs no more of the tier than t.
func (l *ledger) barredBy(t, tier int) []bool {
	held := l.tierHeld(t, tier)
	barred := make([]bool, len(l.tenants))
	for u := range barred {
		barred[u] = u == t || held >= l.tierHeld(u, tier)
	}
	return barred
}

// promotedForPreemptions reports whether a job was preempted often enough
// to be promoted for it (promote.after_preemptions).
func (l *ledger) promotedForPreemptions(job *Job) bool {
	n := l.e.p.Preemption.Promote.AfterPreemptions
	return n > 0 && lifetimePreemptions(job) >= n
}

// tierHeld is what tenant t's running preemptible work of tier at the
// tier's own priority (not promoted) holds, in units, as of the plan's
// start. Counted once per plan, on first need.
func (l *ledger) tierHeld(t, tier int) int {
	nt := len(l.e.tiers)
	if l.tierRuns == nil {
		runs, tiers := make([]int32, len(l.tenants)*nt), l.e.tiers
		l.tierRuns = runs
		for ui := range l.units {
			// preemptible's test on the unit's tier, read once (the
			// loop visits every unit of the plan: 1.2 M instructions
			// of a fleet plan when it indexed the tiers twice).
			u := &l.units[ui]
			if t := &tiers[u.tier]; u.prio == t.priority && (u.exposed || t.preemptible) {
				if i := u.tenant*nt + u.tier; i < len(runs) {
					runs[i] += u.units
				}
			}
		}
	}
	if i := t*nt + tier; i < len(l.tierRuns) {
		return int(l.tierRuns[i])
	}
	return 0
}

// waitPromotionNote says, for a beneficiary promoted for waiting whose
// tenant runs work of its tier, what its promotion does not take: "; promoted
// for waiting, it takes no work of tier training from tenant ml, which runs
// 1 GPU of it (ml/own), nor from tenants that run no more". "" otherwise.
func (l *ledger) waitPromotionNote(b *bene) string {
	base := l.e.tiers[b.tier].priority
	held := l.tierHeld(b.tenant, b.tier)
	if b.prio <= base || l.promotedForPreemptions(&b.d.Job) || held == 0 {
		return ""
	}
	for ui := range l.units {
		u := &l.units[ui]
		if u.tenant == b.tenant && u.tier == b.tier && u.prio == base && l.e.preemptible(u) && !l.sameJob(u, b) {
			gpus := " GPUs"
			if held <= gpuUnit {
				gpus = " GPU"
			}
			return fmt.Sprintf("; promoted for waiting, it takes no work of tier %s from tenant %s, which runs %s%s of it (%s), nor from tenants that run no more",
				l.e.tiers[b.tier].name, l.tenants[b.tenant].t.Name, unitsString(held), gpus, l.jobOf(u).Ref)
		}
	}
	return ""
}
