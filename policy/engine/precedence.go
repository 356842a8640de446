package engine

import "strings"

// Pool precedence (policy.Tier.Pools, policy.Tenant.Pools): ClearML's
// "only run on the cloud autoscaler if the local H100 pool cannot satisfy
// the profile". Waiting work whose job runs in one of the listed pools'
// node pools goes to the first of them with room for it now: free GPUs its
// device request can use, for one allocation (a gang: all of them), within
// its tenant's limits. Room in an earlier pool than its own moves it back
// there; no room in its own but some in a later one moves it on; room in
// none leaves it where it is, to be served there as any work (preemption
// included). The controller carries a Move out by re-registering the job
// in the node pool (Nomad then places it there), and resumes it if Steward
// held it.

// precedenceOf is the node pools, in order, that the work of a tenant in
// a tier moves between; nil when it has no pool precedence.
func (e *Engine) precedenceOf(tenant, tier int) []string {
	if e.precedence == nil {
		return nil
	}
	return e.precedence[min(tenant, len(e.tenants))][tier]
}

// compilePrecedence resolves each tenant's and tier's pool precedence to
// node pools once: [tenant][tier], the last row for namespaces no tenant
// names.
func (e *Engine) compilePrecedence() {
	nodePools := func(pools []string) []string {
		var out []string
		for _, name := range pools {
			if p := e.p.Pools[name]; p != nil && p.NodePool != "" {
				out = append(out, p.NodePool)
			}
		}
		return out
	}
	any := false
	table := make([][][]string, len(e.tenants)+1)
	for ti := range table {
		table[ti] = make([][]string, len(e.tiers))
		for tr := range e.tiers {
			var list []string
			if ti < len(e.tenants) {
				list = nodePools(e.p.PrecedenceOf(e.tenants[ti], e.tiers[tr].name))
			} else {
				list = nodePools(e.p.PrecedenceOf(nil, e.tiers[tr].name))
			}
			table[ti][tr] = list
			any = any || len(list) > 0
		}
	}
	if any {
		e.precedence = table
	}
}

// precede moves demand b, of pending p, to the first pool of its
// precedence with room for it now, when that is not its own: it emits the
// Move (and, for held work, the Resume that goes with it), takes the room
// in the model cluster, and reports true. It reports false when b stays
// in its pool: served there as any work.
func (st *state) precede(p pending, b *bene) bool {
	list := st.e.precedenceOf(p.tenant, p.tier)
	d := p.d
	cur := -1
	for i, np := range list {
		if np == d.NodePool {
			cur = i
		}
	}
	if cur < 0 || d.Requeued {
		return false
	}
	t := &st.tenants[b.tenant]
	need := b.g * st.pl.setUnits(b.base)
	if d.Job.Gang {
		need = demandGPUs(d) * st.pl.setUnits(b.base)
	}
	if t.use+t.marked+need > t.limit() || st.e.depts != nil && st.overDeptLimit(b.tenant, need) {
		return false // over its limit wherever it goes: the limit decides
	}
	accept := st.pl.accepts(d)
	for i, np := range list {
		set := st.poolSet(accept, np)
		if !st.roomIn(set, b, d) {
			continue
		}
		if i == cur {
			return false // room where it is
		}
		count := d.Count
		if !d.Job.Gang {
			count = st.placeIn(set, b, d.Count)
		} else {
			st.placeIn(set, b, d.Count)
		}
		st.emitMove(p, b, list, cur, i, count)
		return true
	}
	return false
}

// poolSet is the nodes of node pool np with a device class in accept
// (nil: any).
func (ix *nodeIndex) poolSet(accept []bool, np string) int32 {
	m := ix.m
	pi, ok := m.poolIdx[np]
	if !ok {
		return m.pl.empty
	}
	return ix.setOf(m.pl.mask(func(cell int) bool {
		return m.pl.cellPool[cell] == pi && (accept == nil || accept[m.pl.cellClass[cell]])
	}))
}

// roomIn reports whether set s has free GPUs now for one allocation of b
// (a gang: for all of them).
func (m *model) roomIn(s int32, b *bene, d *Demand) bool {
	if !m.pl.any(s) {
		return false
	}
	if !d.Job.Gang {
		_, ok := m.ix.cap.bestFit(s, b.g)
		return ok
	}
	placed := m.placeIn(s, b, d.Count) // undone: roomIn only looks
	m.unplaceLast(b, placed)
	return placed == d.Count
}

// placeIn places up to count allocations of b on free GPUs of set s, and
// returns how many it placed (their nodes are kept for unplaceLast).
func (m *model) placeIn(s int32, b *bene, count int) int {
	m.moved = m.moved[:0]
	for range count {
		n, ok := m.ix.cap.bestFit(s, b.g)
		if !ok {
			break
		}
		m.place(b, n)
		m.moved = append(m.moved, n)
	}
	return len(m.moved)
}

// unplaceLast undoes placeIn's last n placements.
func (m *model) unplaceLast(b *bene, n int) {
	for i := len(m.moved) - 1; i >= len(m.moved)-n; i-- {
		m.unplace(b, m.moved[i])
	}
	m.moved = m.moved[:len(m.moved)-n]
}

// emitMove writes the Move of b from list[cur] to list[to], and the Resume
// of its held allocations that fit there.
func (o *output) emitMove(p pending, b *bene, list []string, cur, to, count int) {
	d := p.d
	m := &o.text
	order := strings.Join(list, ", ")
	if to < cur {
		m.start("room again in node pool ", list[to], ", before ", d.NodePool, " in its pool precedence (", order,
			"): moving back there for ").gpus(count * d.GPUsPerAlloc)
	} else {
		m.start("no room in node pool ", d.NodePool, " for ").gpus(d.GPUsPerAlloc).s(" on one node")
		if d.Asks != "" && !o.m.pl.acceptsAll(d) {
			m.s(" of ", d.Asks)
		}
		m.s("; node pool ", list[to], ", next in its pool precedence (", order, "), has room: moving there")
	}
	a := Action{Kind: Move, Job: d.Job.Ref, Group: d.Group, NodePool: list[to], Count: count, GPUs: count * d.GPUsPerAlloc,
		Reason: m.reason(RulePrecedence)}
	o.explainer.add(decision{kind: decideReady, ready: &a})
	if d.Held {
		// The rest, if any, stays held, to move on or back later.
		r := countAction(Resume, d, count, Reason{RulePrecedence, a.Reason.Message})
		o.explainer.add(decision{kind: decideReady, ready: &r})
	}
}
