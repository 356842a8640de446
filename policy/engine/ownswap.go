package engine

import "fmt"

// A promotion for waiting alone (promote.after_wait) relieves a tenant
// starved in a tier; it does not reorder the tenant's own work there.
// While its tenant runs work of its tier at the tier's own priority, a job
// promoted for waiting preempts no work of its tier by priority, its
// tenant's or another's:
//
//   - a swap with its tenant's own work of its tier leaves the tenant's
//     GPUs doing the same tier's work, so it gains the tenant nothing and
//     costs the victim its grace and its restart (GPU-time lost); and the
//     victim, waiting in its turn, is promoted after the same wait and
//     swaps back: the tenant's queue time-sliced by after_wait, a
//     checkpoint lost at every turn (177 of the 1,618 preemptions on
//     Helios's first 3,000 jobs on 10 nodes, example.hcl -scale 10);
//   - taking another tenant's work of its tier instead would hand the
//     tenant more of the tier than its reservation and fair share give it,
//     by waiting alone (TestFairShareReclaimStory: all eight GPUs).
//
// It still goes first among its tier's waiting work, ranks as a victim at
// its promoted priority, takes lower tiers' work, and takes work of its
// tier once its tenant runs none there (a tenant starved in the tier). A
// job promoted for being preempted after_preemptions times keeps the swap:
// it has lost its work again and again, and the swap gets it through (QoS:
// promotion after N preemptions). Reserve reclaims are no promotion's.

// waitPromotionBars reports whether b, promoted for waiting alone, may not
// take u, work of its tier's priority, by priority.
func (l *ledger) waitPromotionBars(u *unit, b *bene) bool {
	base := l.e.tiers[b.tier].priority
	if b.prio <= base || l.e.tiers[u.tier].priority != base || l.promotedForPreemptions(&b.d.Job) {
		return false
	}
	return u.tenant == b.tenant || l.runsOwnTier(b.tenant, b.tier)
}

// promotedForPreemptions reports whether a job was preempted often enough
// to be promoted for it (promote.after_preemptions).
func (l *ledger) promotedForPreemptions(job *Job) bool {
	n := l.e.p.Preemption.Promote.AfterPreemptions
	return n > 0 && lifetimePreemptions(job) >= n
}

// runsOwnTier reports whether tenant t runs preemptible work of tier at the
// tier's own priority (not promoted), as of the plan's start. Counted once
// per plan, on first need.
func (l *ledger) runsOwnTier(t, tier int) bool {
	nt := len(l.e.tiers)
	if l.tierRuns == nil {
		l.tierRuns = make([]int32, len(l.tenants)*nt)
		for ui := range l.units {
			u := &l.units[ui]
			if u.prio == l.e.tiers[u.tier].priority && l.e.preemptible(u) && u.tenant*nt+u.tier < len(l.tierRuns) {
				l.tierRuns[u.tenant*nt+u.tier]++
			}
		}
	}
	i := t*nt + tier
	return i < len(l.tierRuns) && l.tierRuns[i] > 0
}

// waitPromotionNote says, for a beneficiary promoted for waiting whose
// tenant runs work of its tier, that it takes none of that tier's work:
// "; promoted for waiting, it takes no work of tier training while tenant
// ml runs its own there (ml/runner): it goes first when GPUs free up". ""
// otherwise.
func (l *ledger) waitPromotionNote(b *bene) string {
	base := l.e.tiers[b.tier].priority
	if b.prio <= base || l.promotedForPreemptions(&b.d.Job) || !l.runsOwnTier(b.tenant, b.tier) {
		return ""
	}
	for ui := range l.units {
		u := &l.units[ui]
		if u.tenant == b.tenant && u.tier == b.tier && u.prio == base && l.e.preemptible(u) && !l.sameJob(u, b) {
			return fmt.Sprintf("; promoted for waiting, it takes no work of tier %s while tenant %s runs its own there (%s): it goes first when GPUs free up",
				l.e.tiers[b.tier].name, l.tenants[b.tenant].t.Name, l.jobOf(u).Ref)
		}
	}
	return ""
}
