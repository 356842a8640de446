package engine

import "slices"

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
// order and are not held back; the tenant's own later work takes them when
// its allocations are as large (takeAside).
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
		m.aside = make(asides, len(m.tenants))
	}
	if m.aside[b.tenant].set {
		return ""
	}
	m.aside[b.tenant] = asideFor{set: true, w: p.w, g: b.g, wait: -1}
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

// asideFor is the demand of a tenant that GPUs were set aside for in this
// plan (setAside).
type asideFor struct {
	set  bool
	w    int32 // the demand (Snapshot.Waiting index)
	g    int   // GPUs of each of its allocations
	wait int   // its entry in Plan.Waiting; -1 until it has one
}

// takeAside places one allocation of b on GPUs set aside in this plan for
// an earlier demand of b's own tenant whose allocations are no larger than
// b's, and says so in that demand's waiting reason. The set-aside keeps
// other tenants' work, ranked after, off the node; the tenant's own work
// was never what it guards against: held idle for a gang that waits for a
// second node, the GPUs its own 8-GPU job could use served no one (in
// the simulator, pressured Philly with docs/sim/four-teams-fair.hcl, a
// node of 8 free GPUs stayed set aside for team-a's 2×8 gang for 38 hours
// while team-a, below its part, waited with a 1×8 job; docs/evaluation.md).
// A smaller allocation does not take them: its tenant's notebooks would
// nibble the node as other tenants' would, and the large demand never run
// (letting any own work take them, on that run: Jain 0.931 → 0.893).
// Neither do work an idle rule requeued (it would hold them idle) nor a
// gang of several allocations (one placed in part is undone: what it took
// would stay taken).
func (st *state) takeAside(b *bene) (int32, bool) {
	a := st.aside.of(b.tenant)
	if a == nil || b.d.Requeued || (b.d.Job.Gang && b.d.Count > 1) || a.g > b.g || &st.s.Waiting[a.w] == b.d {
		return 0, false
	}
	marks := st.marks[a.w]
	for i := range marks {
		mk := &marks[i]
		if mk.gpus < b.g || !st.cap.nodeIn(mk.node, b.pool) {
			continue
		}
		n := mk.node
		mk.gpus -= b.g
		st.marks[a.w] = slices.DeleteFunc(marks, func(mk nodeGPUs) bool { return mk.gpus <= 0 })
		// What is left set aside for it counts as far as it did (charge).
		st.tenants[b.tenant].earmarked -= b.g * st.pl.unitsOn(n)
		st.recharge(a.w)
		st.ix.change(n, noUnit, int32(b.g))
		st.place(b, n)
		if a.wait >= 0 {
			why := &st.out.Waiting[a.wait].Reason
			var text msg
			text.s("; then ").s(b.d.Job.Ref.String()).s("/").s(b.d.Group).s(" of the same tenant took ").gpus(b.g).
				s(" of them on ").s(st.nodes[n].ID).s(", an allocation as large")
			why.Message += string(text.b)
		}
		return n, true
	}
	return 0, false
}

// asides is, per tenant, the demand GPUs were set aside for in this plan.
type asides []asideFor

// of returns what was set aside for tenant ti in this plan; nil when
// nothing was.
func (a asides) of(ti int) *asideFor {
	if a == nil || !a[ti].set {
		return nil
	}
	return &a[ti]
}
