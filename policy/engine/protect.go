package engine

// Every job completes: a job preempted preemption.max_per_job times over
// its life is protected until it ends (issue 31: within the hourly cap,
// one job was preempted 84 to 178 times over a trace, and promotion by the
// boost did not lift it above the tiers that kept taking its GPUs).
//
// What the protection yields to:
//   - its tenant's limit: a tenant over its limit is brought back under it
//     whatever the guards (issue 29), protected work last (giveBack);
//   - where no other work frees enough (takeProtected): another tenant
//     reclaiming its reserve (a reserve stays what its tenant can always
//     get back, and a tenant cannot keep borrowed GPUs for good through a
//     job that was preempted often), and work of a higher tier (by the
//     tiers' priorities: a promotion does not count). Without the latter,
//     protected training filled a pressured cluster and interactive work
//     waited for it to end: p95 from 51 minutes to 30,146 on Philly's
//     first 3,000 jobs on 10 nodes.
//
// Its own tier, promotions, backfill, idle rules, and reclaims or higher
// tiers that other victims can satisfy never pick it.

// lifetimePreemptions is how often a job was preempted over its life, as
// far as the caller knows: its count, or the recent times it keeps when
// those are more (a count kept by a controller that predates it).
func lifetimePreemptions(job *Job) int {
	return max(job.PreemptionsTotal, len(job.Preemptions))
}

// protectedJob reports whether unit u's job has reached max_per_job,
// counting a preemption this plan has already decided (as capped does).
func (st *state) protectedJob(u *unit) bool {
	most := st.e.p.Preemption.MaxPerJob
	if most <= 0 {
		return false
	}
	life := int(u.life)
	if life+1 < most {
		return life >= most
	}
	return life+st.planned[st.jobOf(u).Ref] >= most
}

// beatsProtected reports whether b may take protected unit u under rule,
// as a last resort: a reserve reclaim, or b's tier above u's.
func (st *state) beatsProtected(u *unit, b *bene, rule Rule) bool {
	return rule == RuleReclaim || rule == RulePriority && st.e.tiers[b.tier].priority > st.e.tiers[u.tier].priority
}

// takeProtected finds room for one allocation of b for which nothing but
// protected work frees enough: on a node with such work, the node's other
// candidates first (best victims first), then its protected units, which
// only a reserve reclaim or a higher tier may take (beatsProtected). It
// runs only after findVictims found nothing, so protected work goes only
// where no other victim does.
func (st *state) takeProtected(b *bene) (int32, []victim, bool) {
	if len(st.protectedUnits) == 0 || b.within || b.inPool > 0 {
		return 0, nil, false
	}
	st.lastResort = true
	defer func() { st.lastResort = false }()
	w := &st.walk
	w.reset(len(st.nodes))
	for _, pu := range st.protectedUnits {
		if st.units[pu].taken {
			continue
		}
		var found int32 = -1
		st.nodesOf(&st.units[pu], func(n int32, _ int) {
			if found >= 0 || !st.cap.nodeIn(n, b.pool) {
				return
			}
			if w.gen[n] != w.cur {
				// First time on this node: its other candidates first.
				w.touch(n)
				for _, nu := range st.nodeUnits[n] {
					if !nu.taken && !st.units[nu.ui].taken && st.addVictim(nu.ui, b, n, true) {
						found = n
						return
					}
				}
			}
			if st.addVictim(pu, b, n, true) {
				found = n
			}
		})
		if found >= 0 {
			return found, st.prune(b, found), true
		}
	}
	return 0, nil, false
}

// protectedNote appends, to the reason a job is preempted, what max_per_job
// makes of it: this preemption brings it to the bound ("; job ml/train was
// preempted 10 times, the most over its life (preemption.max_per_job):
// protected until it ends"), or it is protected and taken all the same,
// with why.
func (st *state) protectedNote(m *msg, u *unit, rule Rule) {
	most := st.e.p.Preemption.MaxPerJob
	if most <= 0 || int(u.life)+1 < most {
		return
	}
	job := st.jobOf(u).Ref.String()
	if int(u.life)+1 == most {
		m.s("; job ", job, " was preempted ").n(most).s(" times, the most over its life (preemption.max_per_job): protected until it ends")
		return
	}
	m.s("; job ", job, " was preempted ").n(int(u.life)).s(" times, the most over its life (preemption.max_per_job), ")
	switch rule {
	case RuleLimit:
		m.s("but a limit is kept whatever the protection")
	case RuleReclaim:
		m.s("but nothing else frees the reserve it borrows")
	default:
		m.s("but nothing else frees enough for work of a higher tier")
	}
}
