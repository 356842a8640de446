package engine

import "slices"

// GPUs freed for a beneficiary are its own until it runs. A preemption
// pays off only if the work it was made for then runs; if the freed GPUs
// counted as free to everyone, the next plan could hand them to other work
// ranked above the beneficiary (the victim itself, held and resumed, or a
// borrower of a higher tier), and the victims would have lost their run
// for nothing, and be preempted again for the same work. So GPUs being
// drained for a beneficiary (Alloc.For), GPUs its victims already gave
// back while Nomad has not placed it yet, and free GPUs the preemption
// counted on beside them (both Snapshot.Earmarks) are set aside: free to no
// one but the beneficiary, which is placed on them first when its turn
// comes. Once it is served, what it did not take is free to the work after
// it, unless a plan promised it to a second beneficiary beside that one's
// own victims (an Earmark the free GPUs no longer cover): then it is the
// second's (takeSurplus): once the first is served, free to work of a
// higher tier than the second, as before, but kept from work of the
// second's tier and below (releaseSurplus). A beneficiary that no longer
// waits and holds GPUs (it was placed) has no earmarks: its GPUs are free
// to all. One that neither waits nor
// holds any is being placed by Nomad (inFlight): its GPUs stay aside.
// Work of a higher tier that finds no free GPU preempts for itself, as it
// would have anyway (an urgent tier's preempt_grace keeps that short).
// Only work of an urgent tier (one whose preempt_grace cuts its victims'
// grace: it cannot wait), and only when nothing may be preempted for it
// (the rest is reserved, or already draining for others), takes GPUs set
// aside for work of a lower tier, and only those free now
// (takeMarksBelow): inference must not wait while GPUs sit idle for a
// build job.

// demandRef identifies a waiting demand: a job's group.
type demandRef struct {
	job   JobRef
	group string
}

// earmark sets g GPUs on node n aside for the waiting demand named by
// job and group, and reports whether it did: false when job is nil or the
// demand is not waiting.
func (m *model) earmark(job *JobRef, group string, n int32, g int) bool {
	if job == nil || g <= 0 {
		return false
	}
	w, ok := m.waitingIndex(demandRef{*job, group})
	if !ok {
		return false
	}
	if m.marks == nil {
		m.marks = map[int32][]nodeGPUs{}
	}
	m.marks[w] = addNode(m.marks[w], n, g)
	m.charge(w, n, g)
	return true
}

// charge counts g GPUs set aside on node n for waiting demand w in its
// tenant's marked, as far as w still waits for more than its marks
// already count: beyond that they are its until it is served, but its
// tenant will not hold them (model.charged).
func (m *model) charge(w int32, n int32, g int) {
	d := &m.s.Waiting[w]
	counted := 0
	for _, mk := range m.marks[w] {
		counted += mk.gpus
	}
	counted -= g // the marks already include these
	t := &m.tenants[m.tenantOf(d.Job.Ref.Namespace)]
	t.earmarked += g * m.pl.unitsOn(n)
	c := min(g, max(demandGPUs(d)-counted, 0)) * m.pl.unitsOn(n)
	if c == 0 {
		return
	}
	if m.charged == nil {
		m.charged = map[int32]int{}
	}
	m.charged[w] += c
	t.marked += c
}

// markDraining notes that an allocation on node n drains g GPUs for the
// waiting demand named by job and group (earmark has set them aside).
func (m *model) markDraining(job *JobRef, group string, n int32, g int) {
	w, _ := m.waitingIndex(demandRef{*job, group})
	if m.draining == nil {
		m.draining = map[int32][]nodeGPUs{}
	}
	m.draining[w] = addNode(m.draining[w], n, g)
}

// drainsOn reports whether allocations drain for waiting demand w on
// node n.
func (m *model) drainsOn(w int32, n int32) bool {
	return m.drainingOn(w, n) > 0
}

// drainingOn is the GPUs allocations drain for waiting demand w on node n.
func (m *model) drainingOn(w int32, n int32) int {
	for _, d := range m.draining[w] {
		if d.node == n {
			return d.gpus
		}
	}
	return 0
}

// earmarkFreed sets aside the GPUs of Snapshot.Earmarks, out of each
// node's free GPUs (no more than are free: input is not trusted). It
// returns the earmarks on unknown nodes (Snapshot.Earmarks indexes), for
// the plan to skip.
func (m *model) earmarkFreed(free []int32) (unknown []int) {
	for i := range m.s.Earmarks {
		mk := &m.s.Earmarks[i]
		n, ok := m.nodeIDs[mk.NodeID]
		if !ok {
			unknown = append(unknown, i)
			continue
		}
		g := min(mk.GPUs, int(free[n]))
		if g > 0 && (m.earmark(&mk.For, mk.ForGroup, n, g) || m.inFlight(mk.For)) {
			free[n] -= int32(g)
		}
		if g < mk.GPUs {
			m.takeSurplus(&mk.For, mk.ForGroup, n, mk.GPUs-g)
		}
	}
	return unknown
}

// surpluses are, per beneficiary (Snapshot.Waiting index), the GPUs
// among its marks that takeSurplus moved to it from other beneficiaries'
// marks, beyond all those wait for: once every one of those is served,
// free to work of a higher tier than it, kept from work of its tier and
// below (releaseSurplus).
type surpluses map[int32]surplus

// surplus is one beneficiary's: the GPUs per node, and the beneficiaries
// they came from, noted together (add) and released together.
type surplus struct {
	gpus []nodeGPUs
	from []int32
}

// add notes g GPUs on node n moved to beneficiary w from o's marks.
func (ss *surpluses) add(w, o, n int32, g int) {
	if *ss == nil {
		*ss = surpluses{}
	}
	s := (*ss)[w]
	s.gpus = addNode(s.gpus, n, g)
	s.from = append(s.from, o)
	(*ss)[w] = s
}

// beneficiaries are the beneficiaries with a surplus, in order: the node
// index hears each release, and map order would make plans differ run to
// run.
func (ss surpluses) beneficiaries() []int32 {
	ws := make([]int32, 0, len(ss))
	for w := range ss {
		ws = append(ws, w)
	}
	slices.Sort(ws)
	return ws
}

// owed reports whether a beneficiary the GPUs came from is not served
// yet (it still has marks): they stay theirs until their turn.
func (s surplus) owed(marks map[int32][]nodeGPUs) bool {
	return slices.ContainsFunc(s.from, func(o int32) bool { _, unserved := marks[o]; return unserved })
}

// takeSurplus sets aside for the waiting demand named by job and group up
// to want GPUs on node n out of what is set aside there for other demands
// beyond all they wait for. A victim may free more than its beneficiary
// needs (a 4-GPU job stopped for a 1-GPU one), and a plan may count the
// rest for a second beneficiary beside that one's own victims (markBeside,
// an Earmark). The next plan sets all of a draining allocation's GPUs
// aside for the one it names (Alloc.For), before the Earmarks: without
// this the second promise found no free GPU, the rest went to whatever was
// served after the first beneficiary, and the second's victims stopped for
// nothing (Helios, seed 5: 8 of 15 wasted preemptions). Moved GPUs still
// draining stay draining, now for this demand (resumed after its victims).
func (m *model) takeSurplus(job *JobRef, group string, n int32, want int) {
	w, ok := m.waitingIndex(demandRef{*job, group})
	if !ok || len(m.marks) == 0 {
		return
	}
	others := make([]int32, 0, len(m.marks))
	for o := range m.marks {
		if o != w {
			others = append(others, o)
		}
	}
	slices.Sort(others) // map order would make plans differ run to run
	for _, o := range others {
		if want == 0 {
			return
		}
		marks := m.marks[o]
		held, on := 0, -1
		for i, mk := range marks {
			held += mk.gpus
			if mk.node == n {
				on = i
			}
		}
		if on < 0 {
			continue
		}
		g := min(want, marks[on].gpus, held-demandGPUs(&m.s.Waiting[o]))
		if g <= 0 {
			continue
		}
		// Only beyond what o waits for: its charge (at most that) stands.
		marks[on].gpus -= g
		m.marks[o] = slices.DeleteFunc(marks, func(mk nodeGPUs) bool { return mk.gpus <= 0 })
		m.tenants[m.tenantOf(m.s.Waiting[o].Job.Ref.Namespace)].earmarked -= g * m.pl.unitsOn(n)
		m.earmark(job, group, n, g)
		m.surplus.add(w, o, n, g)
		if d := min(g, m.drainingOn(o, n)); d > 0 {
			m.draining[o] = addNode(m.draining[o], n, -d)
			m.markDraining(job, group, n, d)
		}
		want -= g
	}
}

// releaseSurplus makes free, before b is served, the GPUs takeSurplus set
// aside for a waiting demand of a tier below b's, once the demands they
// came from are served: before takeSurplus they were free to all work
// after those, and interactive work ranks above batch training. Kept from
// higher tiers too, they made interactive work wait, or preempt, for a
// promise to a training job (issue 31: the high tier's p95 wait net of
// its own limit rose 3.7 -> 25.3 min on Helios seed 2). Work of the
// second's tier and below still finds them set aside.
func (m *model) releaseSurplus(b *bene) {
	if len(m.surplus) == 0 {
		return
	}
	prio := m.e.tiers[b.tier].priority
	for _, w := range m.surplus.beneficiaries() { // in order: the node index hears each release
		sur := m.surplus[w]
		if m.e.tiers[m.waitingOf[w].tier].priority >= prio {
			continue
		}
		if sur.owed(m.marks) {
			continue // still theirs until their turn (takeMarks)
		}
		delete(m.surplus, w)
		t := &m.tenants[m.waitingOf[w].tenant]
		for _, s := range sur.gpus {
			g := 0
			for i := range m.marks[w] {
				if mk := &m.marks[w][i]; mk.node == s.node {
					g = min(s.gpus, mk.gpus)
					mk.gpus -= g
				}
			}
			if g == 0 {
				continue
			}
			if d := min(g, m.drainingOn(w, s.node)); d > 0 {
				m.draining[w] = addNode(m.draining[w], s.node, -d)
			}
			t.earmarked -= g * m.pl.unitsOn(s.node)
			m.ix.change(s.node, noUnit, int32(g))
		}
		m.marks[w] = slices.DeleteFunc(m.marks[w], func(mk nodeGPUs) bool { return mk.gpus <= 0 })
		m.recharge(w)
	}
}

// recharge caps what waiting demand w's marks count in its tenant's
// marked (charge) at what is left set aside for it.
func (m *model) recharge(w int32) {
	left := 0
	for _, mk := range m.marks[w] {
		left += mk.gpus * m.pl.unitsOn(mk.node)
	}
	t := &m.tenants[m.waitingOf[w].tenant]
	if c := m.charged[w]; c > left {
		m.charged[w] = left
		t.marked -= c - left
	}
}

// inFlight reports whether a job that GPUs were set aside for neither
// waits nor holds any GPU in the snapshot: Nomad is placing it (between
// dequeuing its evaluation and applying the plan the job is in no list
// Nomad answers), or it was stopped. Its GPUs stay set aside for no one
// until the marks lapse: free, the victim itself or other work would be
// resumed into them the moment before Nomad places the job.
func (m *model) inFlight(job JobRef) bool {
	if m.placedJobs == nil {
		m.placedJobs = map[JobRef]bool{}
		for i := range m.s.Allocs {
			if a := &m.s.Allocs[i]; len(a.GPUIDs) > 0 && !a.Draining {
				m.placedJobs[a.Job.Ref] = true
			}
		}
	}
	return !m.placedJobs[job]
}

// waitingIndex finds a waiting demand by job and group. The index is
// built on first use, since most plans have no earmarks, and only for the
// jobs an earmark or a draining allocation names: a full index of a long
// queue would cost a map of every waiting job on each plan.
func (m *model) waitingIndex(r demandRef) (int32, bool) {
	if m.waitingIdx == nil {
		named := m.markedJobs()
		m.waitingIdx = map[demandRef]int32{}
		for i := range m.s.Waiting {
			d := &m.s.Waiting[i]
			if !named(d.Job.Ref) {
				continue
			}
			k := demandRef{d.Job.Ref, d.Group}
			if _, dup := m.waitingIdx[k]; !dup {
				m.waitingIdx[k] = int32(i)
			}
			// "" names the job's first waiting group: a gang is served
			// whole, and a controller may know only the job.
			if _, dup := m.waitingIdx[demandRef{d.Job.Ref, ""}]; !dup {
				m.waitingIdx[demandRef{d.Job.Ref, ""}] = int32(i)
			}
		}
	}
	w, ok := m.waitingIdx[r]
	return w, ok
}

// markedJobs returns a test for the jobs that earmarks and draining
// allocations name (usually a handful: compared one by one).
func (c *cluster) markedJobs() func(JobRef) bool {
	var refs []JobRef
	for i := range c.s.Allocs {
		if a := &c.s.Allocs[i]; a.Draining && a.For != nil {
			refs = append(refs, *a.For)
		}
	}
	for i := range c.s.Earmarks {
		refs = append(refs, c.s.Earmarks[i].For)
	}
	if len(refs) <= 16 {
		return func(r JobRef) bool { return slices.Contains(refs, r) }
	}
	set := make(map[JobRef]bool, len(refs))
	for _, r := range refs {
		set[r] = true
	}
	return func(r JobRef) bool { return set[r] }
}

// takeMarks returns the GPUs set aside for waiting demand w and makes them
// free: its turn has come. Placements try them first (markedFit); what it
// leaves is free to the work after it.
func (m *model) takeMarks(w int32) []nodeGPUs {
	marks := m.marks[w]
	if marks == nil {
		return nil
	}
	delete(m.marks, w)
	t := &m.tenants[m.tenantOf(m.s.Waiting[w].Job.Ref.Namespace)]
	t.marked -= m.charged[w]
	delete(m.charged, w)
	for _, mk := range marks {
		m.ix.change(mk.node, noUnit, int32(mk.gpus))
		t.earmarked -= mk.gpus * m.pl.unitsOn(mk.node)
	}
	return marks
}

// markedFit returns a node set aside for b that fits one of its
// allocations.
func (ix *nodeIndex) markedFit(b *bene) (int32, bool) {
	for _, mk := range b.marks {
		if ix.cap.nodeIn(mk.node, b.pool) && int(ix.cap.free[mk.node]) >= b.g {
			return mk.node, true
		}
	}
	return 0, false
}

// markFree sets aside, in the plan's Earmarks, the free GPUs of the
// allocations of a demand that preempts which went on free GPUs alone: the
// preemption pays off only if they are still free when its victims stop.
//
// Out of line: only a demand with victims calls it, and inlined its
// Earmark literal took some 570 bytes of serve's code.
//
//go:noinline
func (o *output) markFree(b *bene, nodes []int32) {
	for _, n := range nodes {
		o.out.Earmarks = append(o.out.Earmarks, Earmark{NodeID: o.m.nodes[n].ID, GPUs: b.g, For: b.d.Job.Ref, ForGroup: b.d.Group})
	}
}

// markBeside sets aside, in the plan's Earmarks, the free GPUs an
// allocation of b placed on node n with victims vs counts on beside what
// the victims free: without them the preemption frees too little, and
// they are free to anyone until b runs. (The victims' own GPUs are set
// aside as they drain: Alloc.For.)
func (o *output) markBeside(b *bene, n int32, vs []victim) {
	if len(vs) == 0 {
		return
	}
	freed := 0
	for _, v := range vs {
		o.m.nodesOf(&o.m.units[v.ui], func(mk int32, g int) {
			if mk == n {
				freed += g
			}
		})
	}
	if free := b.g - freed; free > 0 {
		o.out.Earmarks = append(o.out.Earmarks, Earmark{NodeID: o.m.nodes[n].ID, GPUs: free, For: b.d.Job.Ref, ForGroup: b.d.Group})
	}
}

// takeMarksBelow places one allocation of b, of an urgent tier, for which
// nothing is free and nothing may be preempted, on GPUs set aside for a waiting demand of a
// lower tier that are free now (its victims stopped, or free GPUs its
// preemption counted on): inference must not wait while GPUs sit idle for
// a build job. Those of the lowest tier go first. It returns the waiting
// demand whose GPUs it took and the node; the plan reports them
// (output.unmark) so that the caller stops setting them aside and frees
// what holds them for the other work (a placeholder).
func (m *model) takeMarksBelow(b *bene) (int32, int32, bool) {
	if len(m.marks) == 0 || !m.e.tiers[b.tier].urgent || (b.d.Job.Gang && b.d.Count > 1) {
		// A gang placed in part is undone; what it took stays taken.
		return 0, 0, false
	}
	if b.beyond {
		// Non-preemptible work beyond its tenant's reserve takes free
		// GPUs and what its priority may preempt, not GPUs freed for
		// others: a reclaim's would be reclaimed from it at once, again
		// and again, and any other's preemption would be wasted. Its
		// own victims stop at once (it is urgent), so it waits no
		// longer than a plan for them.
		return 0, 0, false
	}
	prio := m.e.tiers[b.tier].priority
	best, bestPrio := int32(-1), prio
	var bestNode int32
	for w, marks := range m.marks {
		p := m.e.tiers[m.waitingOf[w].tier].priority
		if p > bestPrio || (p == bestPrio && (p == prio || w > best)) {
			continue
		}
		for _, mk := range marks {
			if mk.gpus-m.drainingOn(w, mk.node) >= b.g && m.ix.cap.nodeIn(mk.node, b.pool) {
				best, bestPrio, bestNode = w, p, mk.node
				break
			}
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	w, n := best, bestNode
	for i := range m.marks[w] {
		if mk := &m.marks[w][i]; mk.node == n {
			mk.gpus -= b.g
		}
	}
	m.marks[w] = slices.DeleteFunc(m.marks[w], func(mk nodeGPUs) bool { return mk.gpus <= 0 })
	// What is left set aside for w counts as far as it did (charge).
	m.tenants[m.waitingOf[w].tenant].earmarked -= b.g * m.pl.unitsOn(n)
	m.recharge(w)
	m.ix.change(n, noUnit, int32(b.g))
	m.place(b, n)
	b.took = true
	return w, n, true
}

// unmark reports, in Plan.Unmarked, that b took the GPUs on node n set
// aside for waiting demand w, of a lower tier (model.takeMarksBelow).
func (o *output) unmark(b *bene, w, n int32) {
	m := o.m
	d := &m.s.Waiting[w]
	var mk msg
	mk.start("tier ", m.e.tiers[b.tier].name, " (priority ").n(m.e.tiers[b.tier].priority).s(") of ").s(b.d.Job.Ref.String()).s("/").s(b.d.Group).
		s(" takes ").gpus(b.g).s(" on ").s(m.nodes[n].ID).s(" set aside for ").s(d.Job.Ref.String()).s("/").s(d.Group).
		s(", tier ").s(m.e.tiers[m.waitingOf[w].tier].name).s(" (priority ").n(m.e.tiers[m.waitingOf[w].tier].priority).
		s("): nothing else is free or may be preempted for it")
	o.out.Unmarked = append(o.out.Unmarked, Unmark{
		Earmark: Earmark{NodeID: m.nodes[n].ID, GPUs: b.g, For: d.Job.Ref, ForGroup: d.Group},
		To:      b.d.Job.Ref, Reason: mk.reason(RulePriority),
	})
}
