package engine

import "testing"

// uncachedBars is waitPromotionBars as the rule reads (ownswap.go),
// worked out afresh: what the cached bar (barOf) must answer.
func uncachedBars(l *ledger, u *unit, b *bene) bool {
	base := l.e.tiers[b.tier].priority
	if b.prio <= base || l.e.tiers[u.tier].priority != base || l.promotedForPreemptions(&b.d.Job) {
		return false
	}
	return u.tenant == b.tenant || l.tierHeld(b.tenant, b.tier) >= l.tierHeld(u.tenant, b.tier)
}

// TestWaitBarCache holds a beneficiary's cached wait promotion bar (barOf)
// to the rule worked out afresh, for every unit, as the plan serves its
// demands one by one: each story a way the cache could go stale, the rows
// shared by every beneficiary of one tenant and tier.
func TestWaitBarCache(t *testing.T) {
	stories := []struct {
		name string
		// fresh: a new bene for every question, as if there were no cache.
		// reuse: one bene per demand, asked before and after the demand is
		// served (the plan's units taken, tenants' use changed).
		// shared: beneficiaries of one tenant and tier in turn, each asked
		// after the others filled the rows.
		fresh, reuse bool
	}{
		{name: "a new beneficiary each question", fresh: true},
		{name: "one beneficiary per demand, before and after it is served", reuse: true},
		{name: "rows shared by a tenant's beneficiaries of a tier"},
	}
	for _, story := range stories {
		t.Run(story.name, func(t *testing.T) {
			var asked, barred, rows int
			for seed := 0; seed < 12; seed++ {
				_, p, s := genSearchCase(seed)
				st, failed := demandsNext(p, s)
				for _, pd := range st.orderDemands() {
					newBene := func() *bene {
						return &bene{d: pd.d, tier: pd.tier, tenant: pd.tenant, prio: pd.prio, g: pd.d.GPUsPerAlloc,
							jobTag: jobTag(pd.d.Job.Ref), pool: st.pl.demandSet[pd.w], base: st.pl.demandSet[pd.w]}
					}
					b := newBene()
					check := func(when string) {
						for ui := range st.units {
							u := &st.units[ui]
							q := b
							if story.fresh {
								q = newBene()
							}
							want := uncachedBars(&st.ledger, u, q)
							if got := st.waitPromotionBars(u, q); got != want {
								t.Fatalf("seed %d, %s %s, unit %d (tenant %d, tier %d): bars %v, the rule %v",
									seed, pd.d.Job.Ref, when, ui, u.tenant, u.tier, got, want)
							}
							asked++
							if want {
								barred++
							}
						}
					}
					check("before it is served")
					if story.reuse {
						st.serve(pd, failed)
						check("after it is served")
						continue
					}
					st.serve(pd, failed)
				}
				for _, row := range st.barRows {
					if row != nil {
						rows++
					}
				}
			}
			t.Logf("%d questions, %d barred, %d rows", asked, barred, rows)
			if barred == 0 || rows < 2 {
				t.Fatalf("too few bars came up: %d barred, %d rows", barred, rows)
			}
		})
	}
}

// TestReclaimTurnedPriorityAsksMayTake: a reclaim that finds its victim's
// tenant within its reserve becomes a priority preemption
// (preempts_reserved), and mayTake, which victimRule asked of the reclaim,
// must be asked again of that: work of a non-preemptible tier beyond its
// tenant's reserve (exposed) goes to reclaims only. addVictim asks it only
// when the rule changes (it asked it of every victim once more before).
func TestReclaimTurnedPriorityAsksMayTake(t *testing.T) {
	stories := []struct {
		name    string
		exposed bool
		want    bool
	}{
		{name: "preemptible work within its reserve goes by priority", want: true},
		{name: "exposed work within its reserve goes to no priority preemption", exposed: true},
	}
	for _, story := range stories {
		t.Run(story.name, func(t *testing.T) {
			_, p, s := genSearchCase(0)
			st := newState(New(p), s, t0)
			for _, pd := range st.orderDemands() {
				b := &bene{d: pd.d, tier: pd.tier, tenant: pd.tenant, prio: pd.prio, g: 1, entitled: true,
					jobTag: jobTag(pd.d.Job.Ref), pool: 0, base: 0}
				for ui := range st.units {
					u := &st.units[ui]
					if u.gang >= 0 || u.chain >= 0 || u.taken || u.tenant == b.tenant || !st.e.outranks(b.tier, b.prio, u.tier, u.prio) ||
						st.tenants[u.tenant].quotas != nil || !st.e.preemptible(u) || u.idle == idlePressure || u.backfill {
						continue
					}
					// b's tier may cross u's reserve; u's tenant is at it.
					st.e.tiers[b.tier].overReserve[u.tier] = true
					st.tenants[u.tenant].use = st.tenants[u.tenant].reserve
					u.exposed = story.exposed
					st.walk.reset(len(st.nodes))
					rule, _, ok := st.victimRule(u, b, u.node, true)
					if !ok || rule != RuleReclaim {
						t.Fatalf("unit %d for %s: rule %q (%v), want a reclaim", ui, pd.d.Job.Ref, rule, ok)
					}
					if got := st.addVictim(int32(ui), b, u.node, true); got != story.want {
						t.Fatalf("unit %d for %s: addVictim %v, want %v", ui, pd.d.Job.Ref, got, story.want)
					}
					if story.want && st.walk.nodes[u.node].list[0].rule != RulePriority {
						t.Fatalf("unit %d for %s: taken as %q, want a priority preemption", ui, pd.d.Job.Ref, st.walk.nodes[u.node].list[0].rule)
					}
					return
				}
			}
			t.Fatal("no reclaim victim came up")
		})
	}
}
