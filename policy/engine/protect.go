package engine

// Every job completes: a job preempted preemption.max_per_job times over
// its life is protected until it ends (issue 31: within the hourly cap,
// one job was preempted 84 to 178 times over a trace, and promotion by the
// boost did not lift it above the tiers that kept taking its GPUs).
//
// The invariant: once protected, a job is never preempted again but by its
// own tenant's limit (a tenant over its limit is brought back under it
// whatever the guards, issue 29: giveBack, protected work last). Neither a
// reserve reclaim nor a higher tier takes it: with those exceptions, one
// job was preempted 47 times on Philly (platform's protected training,
// with no reserve, resumed on borrowed GPUs and was reclaimed again and
// again) and 59 on Helios pressured.
//
// Protected work runs like non-preemptible work, so it resumes (a held
// job; protectedWaits) only where it keeps no one from what the policy
// owes them:
//   - beyond its tenant's reserve, only while no other tenant under its
//     reserve waits for GPUs: it would keep them from that reserve for as
//     long as it runs;
//   - only while no work of a higher tier (by the tiers' priorities) waited
//     in this plan for want of GPUs: it would take the GPUs they wait for;
//   - onto a node that holds no protected work only while protected
//     work is on at most 1/maxProtectedShare of the nodes it may use (or
//     on none);
//   - on free GPUs alone, not in place of other work, and on a node that
//     already holds work no higher tier may take (non-preemptible or
//     protected work), unless spareNodes nodes' worth of GPUs stay free:
//     Nomad places it by best fit (the engine predicts the node as
//     placeOne does), and one protected GPU on a node keeps a whole-node
//     demand of a higher tier off it for as long as the job runs.
// Otherwise it waits, held, with the reason (rule protected) and the numbers.
// Without the gate, protected training filled a pressured cluster and
// interactive work waited for it to end (example.hcl, Philly's first 3,000
// jobs on 10 nodes: interactive p95 from 62 minutes to 31,193); with it,
// 62.
//
// Its own tier, promotions, backfill and idle rules never pick it.

// lifetimePreemptions is how often a job was preempted over its life, as
// far as the caller knows: its count, or the recent times it keeps when
// those are more (a count kept by a controller that predates it).
func lifetimePreemptions(job *Job) int {
	return max(job.PreemptionsTotal, len(job.Preemptions))
}

// protectedJob reports whether unit u's job has reached max_per_job,
// counting a preemption this plan has already decided (as capped does).
func (l *ledger) protectedJob(u *unit) bool {
	most := l.e.p.Preemption.MaxPerJob
	if most <= 0 {
		return false
	}
	life := int(u.life)
	if life+1 < most {
		return life >= most
	}
	return life+l.planned[l.jobOf(u).Ref] >= most
}

// protectedWaits reports why b, a demand of a protected job, waits rather
// than resumes (see the top of this file); need is what its tenant would
// take in all, in units.
func (st *state) protectedWaits(b *bene, need int) (Reason, bool) {
	most := st.e.p.Preemption.MaxPerJob
	d := b.d
	if most <= 0 || lifetimePreemptions(&d.Job) < most {
		return Reason{}, false
	}
	b.protected = true
	t := &st.tenants[b.tenant]
	within := t.use+need <= t.reserve // no reclaim targets it
	m := &st.text
	head := func() { m.protectedHead(d) }
	for oi := range st.tenants {
		o := &st.tenants[oi]
		if within || oi == b.tenant || o.waiting == 0 || o.use >= o.reserve {
			continue
		}
		head()
		m.s("within tenant ", t.t.Name, "'s reserve of ").n(t.t.Reserve).s(" (it holds ").gpusU(t.use).s(", ").u(need).
			s(" more would exceed it) while another tenant waits for its reserve: tenant ", o.t.Name, " holds ").gpusU(o.use).s(" of its reserve of ").
			n(o.t.Reserve).s(" and waits for ").gpusU(o.waiting)
		return m.reason(RuleProtected), true
	}
	if w := st.blocked; w.gpus > 0 && w.prio > st.e.tiers[b.tier].priority {
		head()
		m.s("when no work of a higher tier waits for GPUs: ", w.job, ", tier ", st.e.tiers[w.tier].name, " (priority ").n(w.prio).
			s("), waits for ").gpus(w.gpus)
		return m.reason(RuleProtected), true
	}
	// Where it goes: Nomad places it by best fit on free GPUs. In place
	// of other work it would go on the node the victims are on, whatever
	// that node holds: it resumes on free GPUs alone.
	n, ok := st.cap.bestFit(b.pool, b.g)
	if !ok {
		return st.text.freeOnlyReason(b), true
	}
	st.countFixed()
	if st.protectedOn[n] > 0 {
		return Reason{}, false // beside protected work: it takes no node more from whole-node demands
	}
	total, on := st.protectedNodesIn(b.pool)
	if on > 0 && (on+int(d.Count))*maxProtectedShare > total {
		head()
		m.s("onto nodes that hold protected work already, or while protected work is on at most 1/").n(maxProtectedShare).
			s(" of the nodes it may use: it is on ").n(on).s(" of ").n(total).s(", and ", st.nodes[n].ID, ", where it would go, holds none")
		return m.reason(RuleProtected), true
	}
	// With no protected work running the job goes wherever it fits: else
	// on a small or busy cluster (free GPUs never two nodes' worth) it
	// would wait for ever on idle GPUs, and every job must complete.
	if on > 0 && !st.spoiled(n) {
		if free := st.freeIn(b.pool) - demandGPUs(d); free < spareNodes*st.maxGPUs {
			head()
			m.s("beside work no higher tier may take, or while ").n(spareNodes*st.maxGPUs).s(" GPUs stay free: ", st.nodes[n].ID,
				", where it would go, holds none, and ").gpus(max(free, 0)).s(" would stay free")
			return m.reason(RuleProtected), true
		}
	}
	return Reason{}, false
}

// protectedHead starts the reason a protected job waits: "job ml/train was
// preempted 10 times, the most over its life (preemption.max_per_job): once
// it runs only its tenant's limit preempts it, so it resumes only ".
func (m *msg) protectedHead(d *Demand) {
	m.start("job ", d.Job.Ref.String(), " was preempted ").n(lifetimePreemptions(&d.Job)).
		s(" times, the most over its life (preemption.max_per_job): once it runs only its tenant's limit preempts it, so it resumes only ")
}

// freeOnlyReason is why a protected demand found no room: it takes free
// GPUs alone, and none were free where it may go (in a pool it is not at
// its limit in, say).
func (m *msg) freeOnlyReason(b *bene) Reason {
	m.protectedHead(b.d)
	return m.s("on free GPUs: none are free for ").gpus(b.g).s(" on one node, and it does not take other work's").reason(RuleProtected)
}

// spareNodes is how many nodes' worth of GPUs (of the largest node) must
// stay free when protected work resumes on a node that holds no work a
// higher tier may not take: one let protected training take the whole
// nodes that bursts of 8-GPU interactive work came for (four-teams, Helios,
// 10 nodes: interactive p95 205 minutes; with two, 147; more, no better).
const spareNodes = 2

// maxProtectedShare: protected work goes onto a node that holds none only
// while it is on at most 1/maxProtectedShare of the nodes it may use (or on
// none: every protected job runs in the end). Nomad places it by best fit,
// on the fullest node with room, so protected work of one or two GPUs
// spread over most nodes as the work beside it ended, and a whole-node
// demand of a higher tier, which may not take it, found no node (example
// and four-teams, Philly and Helios' first 3,000 jobs on 10 nodes: high-tier
// p95 up to 26 minutes, against 2 when a higher tier took protected work;
// a share of the GPUs, a quarter, let it onto 7 nodes of 10). A third and a
// sixth did worse than a quarter.
const maxProtectedShare = 4

// spoiled reports whether node n holds GPUs that work of a higher tier
// may not take: non-preemptible work (beyond its reserve too: only
// reclaims take that) or protected work. A protected job placed there
// costs a whole-node demand no node it could have had.
func (m *model) spoiled(n int32) bool {
	m.countFixed()
	return m.fixedOn[n] > 0
}

// protectedNodesIn is the nodes of set s, and those that hold protected
// work.
func (m *model) protectedNodesIn(s int32) (total, on int) {
	for n := range m.nodes {
		if m.pl.has(s, int32(n)) {
			total++
			if m.protectedOn[n] > 0 {
				on++
			}
		}
	}
	return total, on
}

// countFixed counts, on first need, the GPUs per node of work no higher
// tier may take (fixedOn) and of protected work (protectedOn); place and
// unplace keep them in step for protected demands.
func (m *model) countFixed() {
	if m.fixedOn != nil {
		return
	}
	m.fixedOn = make([]int32, len(m.nodes))
	m.protectedOn = make([]int32, len(m.nodes))
	for ui := range m.units {
		u := &m.units[ui]
		if u.taken {
			continue
		}
		protected := m.protectedJob(u)
		if protected || !m.e.tiers[u.tier].preemptible {
			m.nodesOf(u, func(n int32, gpus int) {
				m.fixedOn[n] += int32(gpus)
				if protected {
					m.protectedOn[n] += int32(gpus)
				}
			})
		}
	}
}

// placeProtected records delta GPUs of protected work on node n.
func (m *model) placeProtected(n int32, delta int) {
	if m.fixedOn != nil {
		m.fixedOn[n] += int32(delta)
		m.protectedOn[n] += int32(delta)
	}
}

// freeIn is the free GPUs of the nodes of set s.
func (ix *nodeIndex) freeIn(s int32) int {
	free := 0
	for n, f := range ix.cap.free {
		if f > 0 && ix.m.pl.has(s, int32(n)) {
			free += int(f)
		}
	}
	return free
}

// blockedDemand is the highest-tier demand that waited in this plan for
// want of GPUs (rule capacity): protected work does not resume beyond its
// reserve ahead of it (protectedWaits).
type blockedDemand struct {
	prio, tier, gpus int
	job              string
}

// noteBlocked records that demand b waits for gpus GPUs under why.
func (m *model) noteBlocked(b *bene, gpus int, why Reason) {
	if why.Rule != RuleCapacity {
		return
	}
	if prio := m.e.tiers[b.tier].priority; m.blocked.gpus == 0 || prio > m.blocked.prio {
		m.blocked = blockedDemand{prio: prio, tier: b.tier, gpus: gpus, job: b.d.Job.Ref.String()}
	}
}

// protectedNote appends, to the reason a job is preempted, what max_per_job
// makes of it: this preemption brings it to the bound ("; job ml/train was
// preempted 10 times, the most over its life (preemption.max_per_job):
// protected until it ends"), or it is protected and its tenant's limit
// takes it all the same.
func (o *output) protectedNote(m *msg, u *unit, rule Rule) {
	most := o.m.e.p.Preemption.MaxPerJob
	if most <= 0 || int(u.life)+1 < most {
		return
	}
	job := o.m.jobOf(u).Ref.String()
	if int(u.life)+1 == most {
		m.s("; job ", job, " was preempted ").n(most).s(" times, the most over its life (preemption.max_per_job): protected until it ends")
		return
	}
	if rule == RuleLimit {
		m.s("; job ", job, " was preempted ").n(int(u.life)).
			s(" times, the most over its life (preemption.max_per_job), but a limit is kept whatever the protection")
	}
}
