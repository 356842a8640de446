package engine

// A node set aside for a large demand of a tenant below its share. Work
// is placed in order (orderDemands): a demand that finds no node with
// enough free GPUs waits, and the next one, smaller, takes the free GPUs
// it could. So one tenant's 1-GPU jobs, spread a few per node, take every
// GPU that frees, while another tenant's 8-GPU allocation, or a gang of
// whole nodes, never finds a node free: the tenant that borrows most keeps
// borrowing, whatever the order says (docs/evaluation.md, fair share with
// example.hcl: 44 % of the GPUs fair share could take were takeable, and
// no node freed enough). As Slurm's backfill reservations and KAI's and
// Kueue's fair sharing do for large jobs, the first demand of each tenant
// that borrows, waits for want of room and ranks ahead of a tenant that
// borrows at least as much per unit of weight as it would once run gets, for each allocation it still
// needs, the node in its pool closest to fitting it (the most GPUs free;
// the lowest index among equals): the GPUs free there are set aside for
// it (earmarks.go) for the rest of the plan, so that no work after it is
// placed there. The node fills up as its work ends or is preempted, and
// the demand runs on it when enough is free. The engine remembers
// nothing: the next plan sets the same node aside again, as it has the
// most GPUs free (nothing else was placed there), and Nomad, which places
// on the fullest node that fits, places work the plan admits elsewhere
// first. Urgent work takes set-aside GPUs as it takes any earmark
// (takeMarksBelow); higher tiers and reserved work come before it in the
// order and are not held back.
//
// Only with fair share over time (preemption.fair_share_half_life): the
// order then ranks tenants by what they used, which a set-aside node
// makes good. Without it, on example.hcl, TestInvariantsOverTime counted
// 42 tugs of war in 2,353 preemptions (1.8 %, its bound 1.2 %; 33 before):
// reserved work of lower tiers, kept from the set-aside GPUs, reclaimed
// borrowed work that reclaimed back (docs/evaluation.md).

// setAside sets nodes aside for b (demand p) that waits for want of room
// with left allocations unplaced (the whole count for a gang), and returns
// the note its reason gets ("" when none was).
func (m *model) setAside(p pending, b *bene, left int, why Reason) string {
	if !m.e.fairOn() || why.Rule != RuleCapacity || b.entitled || b.within || b.protected || b.d.Requeued || b.g <= 1 ||
		b.pool == m.pl.empty || !m.borrowsMore(b.tenant, left*b.g*b.unitsPer) {
		return ""
	}
	if m.aside == nil {
		m.aside = make([]bool, len(m.tenants))
	}
	if m.aside[b.tenant] {
		return ""
	}
	m.aside[b.tenant] = true
	var text msg
	for range left {
		n, free := m.ix.cap.closestFit(b, m.nodes)
		if n < 0 {
			break
		}
		if m.marks == nil {
			m.marks = map[int32][]nodeGPUs{}
		}
		m.marks[p.w] = addNode(m.marks[p.w], n, free)
		m.charge(p.w, n, free)
		m.ix.change(n, noUnit, -int32(free))
		if len(text.b) == 0 {
			text.s("; set aside for it, as it ranks ahead of tenants that borrow as much per unit of weight as its tenant would with it: ")
		} else {
			text.s(", ")
		}
		text.s(m.nodes[n].ID).s(" (").n(free).s(" of ").n(m.nodes[n].GPUs).s(" GPUs free)")
	}
	return string(text.b)
}

// borrowsMore reports whether some other tenant borrows GPUs, ranks
// after tenant ti in the waiting order's share key (shareKey: decayed usage
// per weight with fair share over time, then GPUs borrowed now per weight)
// and borrows at least as much per unit of weight as ti would with need
// more units (Kueue's LessThanOrEqualToFinalShare). Otherwise holding GPUs
// idle for ti's demand only hands the imbalance to the other: run, it
// would make ti the tenant that borrows more.
func (l *ledger) borrowsMore(ti, need int) bool {
	k := l.shareKey(ti)
	t := &l.tenants[ti]
	after := float64(t.use+t.earmarked+need-t.reserve) / t.t.Weight
	for o := range l.tenants {
		if u := &l.tenants[o]; o != ti && u.use > u.reserve && l.share(o) >= after && compareShareKeys(l.shareKey(o), k) > 0 {
			return true
		}
	}
	return false
}

// closestFit returns the node of b's pool, large enough for one of its
// allocations, with the most GPUs free (the lowest index among equals),
// and how many are free there; -1 when no such node has any free.
func (c *capacity) closestFit(b *bene, nodes []*Node) (int32, int) {
	best, most := int32(-1), 0
	c.each(b.pool, 1, func(n int32) {
		f := int(c.free[n])
		if nodes[n].GPUs >= b.g && (f > most || f == most && n < best) {
			best, most = n, f
		}
	})
	return best, most
}
