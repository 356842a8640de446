package engine

import "slices"

// A tenant at its limit still runs its urgent work first: interactive work
// beats its own batch training. Its higher-tier demand may then take GPUs
// only from the tenant's own lower work (priority, or idle under pressure),
// and only as many as it frees, so the tenant stays within its limit; free
// GPUs would take it over. Other tenants' work is never preempted for a
// tenant at its limit.

// swapWithin places one allocation of b, whose tenant would exceed its
// limit by need, in place of its tenant's own lower work, or explains why
// it waits (the limit).
func (st *state) swapWithin(b *bene, need int, failed *failures) (int32, []victim, Reason, bool) {
	why := st.limitReason(b, need)
	if b.d.Requeued || b.protected {
		return 0, nil, why, false // it takes only free GPUs (see placeOne)
	}
	key := failKey{tenant: b.tenant, pool: b.pool, within: true, tier: -1} // its own work: reserves play no part
	if _, ok := failed.find(key, b.prio, st.e.tiers[b.tier].priority, b.g); ok {
		return 0, nil, why, false
	}
	// Over its limit, and so its reserve: no reclaim for it.
	b.entitled, b.within = false, true
	defer func() { b.within = false }()
	for _, young := range []bool{false, true} {
		if n, vs, ok := st.findVictims(b, young); ok {
			return st.placeWith(b, n, vs)
		}
	}
	t := &st.tenants[b.tenant]
	room := t.use + t.marked + b.g*b.unitsPer - t.limit()
	for _, young := range []bool{false, true} {
		if n, vs, ok := st.swapElsewhere(b, room, young); ok {
			return st.placeWith(b, n, vs)
		}
	}
	failed.add(key, b.prio, st.e.tiers[b.tier].priority, b.g, why)
	return 0, nil, why, false
}

// swapElsewhere is swapWithin when no node holds both: b goes on GPUs free
// now, and the tenant's own lower work on other nodes, best victims first,
// makes room under its limit for them (room GPUs). The GPUs it frees go
// to whoever Nomad places there once b runs; b waits held until its
// victims stop (draining), so that the tenant never holds more than its
// limit, and the free GPUs are set aside for it meanwhile (markBeside).
func (st *state) swapElsewhere(b *bene, room int, allowYoung bool) (int32, []victim, bool) {
	n, ok := st.cap.bestFit(b.pool, b.g)
	if !ok || room <= 0 {
		return 0, nil, false
	}
	t := &st.tenants[b.tenant]
	c := &st.cands[0] // limit room counts on every node
	var vs []victim
	freed := 0
	for seg := 0; seg < segments && freed < room; seg++ {
		from, to := st.walkRange(c, seg, b, allowYoung)
		for _, ui := range c.units[from:to] {
			u := &st.units[ui]
			if u.tenant != b.tenant || u.taken {
				continue
			}
			if ui = st.chainPickAny(ui, vs); ui < 0 {
				continue
			}
			u = &st.units[ui]
			rule, _, ok := st.victimRule(u, b, st.firstNode(u), allowYoung)
			if !ok {
				continue
			}
			vs = append(vs, victim{ui: ui, rule: rule, holdsPrev: t.use, room: true})
			if freed += int(u.units); freed >= room {
				break
			}
		}
	}
	if freed < room {
		return 0, nil, false
	}
	// Drop, worst first, victims the room does not need.
	out := vs[:0:0]
	for i := len(vs) - 1; i >= 0; i-- {
		if g := int(st.units[vs[i].ui].units); freed-g >= room {
			freed -= g
			continue
		}
		out = append(out, vs[i])
	}
	slices.Reverse(out)
	return n, out, true
}
