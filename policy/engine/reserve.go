package engine

import (
	"cmp"
	"slices"
)

// A tenant's reserve is what Steward can always hand back to it, by
// reclaiming what others borrowed. Work of a non-preemptible tier is never
// a victim within its tenant's reserve; beyond it, it must not let a tenant
// keep borrowed GPUs from their owner for good. Two ways to keep that,
// chosen per tier (beyond_reserve):
//
//   - "run", the default: the work runs beyond the reserve as its priority
//     allows (free GPUs first, then lower work it may preempt), and is
//     preemptible there by another tenant reclaiming its reserve (and by
//     its tenant's limit) alone: serving never waits while GPUs are free
//     (issue 31: a team's serving beyond its reserve waited for days on
//     free GPUs). The resume's reason says so.
//   - "wait": the work waits (rule reserve, in placeOne), Run:ai's rule
//     (non-preemptible workloads are scheduled in-quota only).
//
// Either way, running non-preemptible allocations beyond the reserve (run
// there, placed by Nomad before Steward acted, or a lowered reserve) lose
// their protection here.

// preemptible reports whether a unit may be a victim at all: its tier is
// preemptible, or it is non-preemptible work beyond its tenant's reserve.
func (e *Engine) preemptible(u *unit) bool {
	return u.exposed || e.tiers[u.tier].preemptible
}

// exposeBeyondReserve marks the non-preemptible units of each tenant whose
// non-preemptible work holds more than its reserve that do not fit in it:
// the reserve is filled oldest first (each unit that still fits keeps its
// protection), so the newest are the ones beyond it, and work within the
// reserve is never a victim.
func (l *ledger) exposeBeyondReserve() {
	over := false
	for ti := range l.tenants {
		t := &l.tenants[ti]
		t.fixed0 = t.fixed
		over = over || t.fixed > t.reserve
	}
	if !over {
		return // the usual case: one pass over the tenants
	}
	var fixed []int32
	for ui := range l.units {
		u := &l.units[ui]
		if t := &l.tenants[u.tenant]; !l.e.tiers[u.tier].preemptible && t.fixed > t.reserve {
			fixed = append(fixed, int32(ui))
		}
	}
	slices.SortStableFunc(fixed, func(a, b int32) int {
		ua, ub := &l.units[a], &l.units[b]
		if c := cmp.Compare(ua.tenant, ub.tenant); c != 0 {
			return c
		}
		return cmp.Compare(ub.age, ua.age) // the oldest first
	})
	kept := make([]int, len(l.tenants))
	for _, ui := range fixed {
		u := &l.units[ui]
		if kept[u.tenant]+int(u.units) <= l.tenants[u.tenant].reserve {
			kept[u.tenant] += int(u.units)
			continue
		}
		u.exposed = true
	}
}

// reserveReason explains why non-preemptible work waits; need is what its
// tenant would take in all (the rest of a gang).
func (o *output) reserveReason(b *bene, need int) Reason {
	t := &o.m.tenants[b.tenant]
	return o.text.start("tier ", o.m.e.tiers[b.tier].name, " is not preemptible: it runs only within tenant ", t.t.Name,
		"'s reserve of ").n(t.t.Reserve).s(" (its non-preemptible work holds ").gpusU(t.fixed).s(", ").u(need).
		s(" more would exceed it)").reason(RuleReserve)
}

// exposedNote appends, to a victim's reason, why non-preemptible work may
// go: "; tier inference is safe from preemption only within tenant product's
// reserve of 4, and its non-preemptible work holds 6 GPUs".
func (o *output) exposedNote(m *msg, u *unit) {
	if !u.exposed {
		return
	}
	t := &o.m.tenants[u.tenant]
	m.s("; tier ", o.m.e.tiers[u.tier].name, " is safe from preemption only within tenant ", t.t.Name, "'s reserve of ").
		n(t.t.Reserve).s(", and its non-preemptible work holds ").gpusU(t.fixed0)
}

// mayTake reports whether unit u may go to b under rule. Work of a
// non-preemptible tier that runs beyond its tenant's reserve (exposed, its
// tier's beyond_reserve "run") goes only to another tenant reclaiming its
// reserve: it ran beyond the reserve on GPUs its priority allowed, and only
// the safety rule takes them back. A job protected by max_per_job goes to
// no one (protect.go). (Limits take both: giveBack does not ask.)
func (l *ledger) mayTake(u *unit, b *bene, rule Rule) bool {
	if u.exposed && !l.e.tiers[u.tier].waitsBeyond && rule != RuleReclaim {
		return false
	}
	return !l.protectedJob(u)
}

// beyondNote appends, to the reason non-preemptible work of a tier that
// runs beyond its reserve resumes, that it does and what follows: "; tier
// inference of tenant product runs beyond its reserve of 4 (6 GPUs of
// non-preemptible work): preemptible by reserve reclaims". fixed is the
// tenant's non-preemptible GPUs with it.
func (o *output) beyondNote(m *msg, b *bene, fixed int) {
	tier := &o.m.e.tiers[b.tier]
	t := &o.m.tenants[b.tenant]
	if tier.preemptible || tier.waitsBeyond || fixed <= t.reserve {
		return
	}
	m.s("; tier ", tier.name, " of tenant ", t.t.Name, " runs beyond its reserve of ").n(t.t.Reserve).s(" (").
		gpusU(fixed).s(" of non-preemptible work): preemptible by reserve reclaims")
}
