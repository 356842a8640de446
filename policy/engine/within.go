package engine

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
	if b.d.Requeued {
		return 0, nil, why, false // it takes only free GPUs (see placeOne)
	}
	key := failKey{tenant: b.tenant, pool: b.pool, within: true, tier: -1} // its own work: reserves play no part
	if _, ok := failed.find(key, b.prio, b.g); ok {
		return 0, nil, why, false
	}
	// Over its limit, and so its reserve: no reclaim for it.
	b.entitled, b.within = false, true
	defer func() { b.within = false }()
	for _, young := range []bool{false, true} {
		if n, vs, ok := st.findVictims(b, young); ok {
			for _, v := range vs {
				st.take(v.ui)
			}
			st.place(b, n)
			return n, vs, Reason{}, true
		}
	}
	failed.add(key, b.prio, b.g, why)
	return 0, nil, why, false
}
