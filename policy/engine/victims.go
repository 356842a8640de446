package engine

import (
	"slices"
	"time"
)

// candidates holds, for one node pool (or for all nodes), the preemptible
// units in the victim order (victimorder.go), cut into segments by class and by whether
// their tenant is over its reservation. Within a segment units are sorted
// by priority, so a beneficiary walks only the prefix it may preempt.
type candidates struct {
	units []int32
	keys  []uint64
	segs  [segments]segment
}

type segment struct{ start, end, next int } // next: first unit not yet taken

const (
	segIdle = iota
	segBackfill
	segOver         // tenant over its reservation
	segNotOver      // tenant within its reservation
	segYoungOver    // the same, younger than min_runtime
	segYoungNotOver //
	segments
)

// sortCandidates keys every unit that may be a victim by the victim order
// (victimorder.go) and sorts them, for all nodes and for each node set.
func (st *state) sortCandidates() {
	keys := slices.Grow(st.sc.keys[:0], len(st.units))
	for ui := range st.units {
		u := &st.units[ui]
		if !st.e.preemptible(u) || u.buried {
			continue // never a victim, whatever else holds
		}
		if st.capped(u) {
			continue // at the eviction cap for the whole plan
		}
		if st.protectedJob(u) {
			continue // preempted max_per_job times: only its limit takes it (protect.go)
		}
		f := st.victimFacts(int32(ui))
		u.key = victimKey(&f)
		n := u.node
		if u.gang >= 0 {
			n = -1
		}
		keys = append(keys, candKey{key: u.key, ui: int32(ui), node: n})
	}
	if len(st.chains) > 0 {
		keys = st.chainKeys(keys)
	}
	keys = st.sc.sortKeys(keys)
	st.cands = st.sc.candidates(len(st.pl.in), len(keys))
	// cands in a local: each append writes through it, and the compiler
	// then reloaded st.cands and checked its bounds for the next.
	cands := st.cands
	// Every key is a unit of its own (one per unit, chainKeys keeps that),
	// so the whole cluster's list is the keys in order: written by index
	// into the room candidates made, not appended with a gang's test.
	all := &cands[0]
	all.units, all.keys = all.units[:len(keys)], all.keys[:len(keys)]
	allUnits, allKeys := all.units, all.keys
	for i, k := range keys {
		allUnits[i], allKeys[i] = k.ui, k.key
		if k.node >= 0 {
			// A single allocation: its node is in the key, and the unit,
			// read in key order (at random), is left alone. Its node's
			// sets are distinct, so none lists it twice.
			for _, s := range st.pl.setsOf(k.node)[1:] {
				c := &cands[s]
				c.units = append(c.units, k.ui)
				c.keys = append(c.keys, k.key)
			}
			continue
		}
		st.nodesOf(&st.units[k.ui], func(n int32, _ int) {
			for _, s := range st.pl.setsOf(n)[1:] {
				c := &cands[s]
				if n := len(c.units); n > 0 && c.units[n-1] == k.ui {
					continue // a gang with several nodes in the set
				}
				c.units = append(c.units, k.ui)
				c.keys = append(c.keys, k.key)
			}
		})
	}
	for p := range st.cands {
		st.cands[p].segment()
	}
}

// segment cuts c's units into its segments by key.
func (c *candidates) segment() {
	for s := range c.segs {
		lo := segKey(s, 0)
		hi := segKey(s+1, 0)
		c.segs[s].start, _ = slices.BinarySearch(c.keys, lo)
		c.segs[s].end, _ = slices.BinarySearch(c.keys, hi)
		c.segs[s].next = c.segs[s].start
	}
}

// candidatesIn is the candidates with a node in set s, for a set made
// during the plan: every set's candidates, best victims first, as
// sortCandidates built them. Units taken since are kept: the walk skips
// them.
func (ix *nodeIndex) candidatesIn(s int32) candidates {
	m := ix.m
	all := &ix.cands[0]
	var c candidates
	for i, ui := range all.units {
		in := false
		m.nodesOf(&m.units[ui], func(n int32, _ int) { in = in || m.pl.has(s, n) })
		if in {
			c.units = append(c.units, ui)
			c.keys = append(c.keys, all.keys[i])
		}
	}
	c.segment()
	return c
}

type candKey struct {
	key uint64
	ui  int32
	// node is, in sortCandidates' keys, a single allocation's node (-1:
	// a gang's units); in the room a key has anyway.
	node int32
}

// sortKeys orders candidates by key, then unit index: keys come in unit
// order, and radixSort is stable.
func (sc *scratch) sortKeys(keys []candKey) []candKey {
	sorted, spare := radixSort(keys, grow(sc.keysTmp, len(keys)))
	sc.keys, sc.keysTmp = sorted, spare
	return sorted
}

// walkRange returns the part of a segment that may hold victims for b:
// idle work whole; backfill whole for a tier that owns a pool; otherwise
// units of a lower priority, or whole segments of tenants over their
// reservation when b reclaims its own.
// Tenants' standing is as of the plan's start: one that crosses its
// reservation during the plan is seen in the right segment by the next.
func (m *model) walkRange(c *candidates, seg int, b *bene, allowYoung bool) (int, int) {
	sg := &c.segs[seg]
	for sg.next < sg.end && m.units[c.units[sg.next]].taken {
		sg.next++ // taken units gather at the front: skip them once
	}
	end := sg.end
	switch {
	case seg == segIdle:
	case seg == segBackfill && m.e.ownsPool[b.tier]:
	case seg >= segYoungOver && !allowYoung:
		end = sg.next
	case (seg == segNotOver || seg == segYoungNotOver) && b.inPool == 0 || !b.entitled:
		end, _ = slices.BinarySearch(c.keys[sg.start:sg.end], segKey(seg, b.prio))
		end = max(end+sg.start, sg.next)
	}
	return sg.next, end
}

// rewalk makes the walks see again a unit with victim key key that was
// put back (untake): walkRange skips taken units at a segment's front for
// good, and a gang's undo puts back victims that later walks of the same
// gang skipped, which no walk of the plan would then see.
func (ix *nodeIndex) rewalk(key uint64) {
	for set := range ix.cands {
		c := &ix.cands[set]
		at, found := slices.BinarySearch(c.keys, key)
		if !found {
			continue // not a candidate in this set
		}
		for s := range c.segs {
			if sg := &c.segs[s]; sg.start <= at && at < sg.end {
				sg.next = min(sg.next, at)
			}
		}
	}
}

// bene is the work GPUs are being found for.
type bene struct {
	d        *Demand
	tier     int
	tenant   int
	prio     int
	pool     int32 // the set of nodes it may use (placement.go)
	g        int   // GPUs of the allocation being placed
	unitsPer int   // what one of its GPUs counts for before a node is chosen (units.go)
	holds    int   // GPUs its tenant held before this demand was served
	entitled bool  // its tenant stays within its reservation
	jobTag   uint64
	marks    []nodeGPUs // GPUs set aside for it (earmarks.go)
	// within: its tenant is at its limit, so it may only swap with its
	// tenant's own lower work (swapWithin): free GPUs do not count.
	within bool
	// took: an allocation went on GPUs set aside for work of a lower
	// tier (takeMarksBelow).
	took bool
	// beyond: non-preemptible work that would run beyond its tenant's
	// reserve (beyond_reserve "run"), where reserve reclaims take it back.
	beyond bool
	// deptOnly: entitled by its department's reserve alone (department.go):
	// it reclaims from tenants outside the department only.
	deptOnly bool
	// protected: its job was preempted max_per_job times; it resumes on
	// free GPUs alone (protect.go).
	protected bool
	// base is the set of its demand; pool is base less pools at their
	// limit for its tenant (quota.go), or a pool it reclaims in.
	base int32
	// inPool, while it reclaims its reserve in a quota pool, is that
	// pool's index + 1: victims are judged by their tenants' use there.
	// 0 otherwise.
	inPool int
	// bar is its wait promotion's bar, once asked (ledger.barOf).
	bar waitBar
	// kindAt[entitled] is 1 + the index of its wait promotion's
	// potential in kindIx's bars, -1 for none, 0 until kindIx asked
	// (nodeIndex.barPotentialFor).
	kindIx *nodeIndex
	kindAt [2]int
}

// victim is a unit chosen for a beneficiary, with the rule that allows it
// and its tenant's GPUs just before (for the reason's numbers).
type victim struct {
	ui        int32
	rule      Rule
	holdsPrev int
	// room: it makes room under its tenant's limit for b, which runs on
	// another node (swapElsewhere).
	room bool
	// pool, for a reclaim in a quota pool, is that pool's index + 1 (0
	// otherwise): holdsPrev is then the victim's tenant's use there, and
	// beneHolds the beneficiary's.
	pool, beneHolds int32
	// dept, for a reclaim on a department's account, is its index + 1
	// (0 otherwise); beneHolds is then the department's use.
	dept int32
}

// capped reports whether unit u's job has reached the eviction cap,
// counting a preemption this plan has already decided. The job is looked
// up only for a job one short of the cap: victimRule asks of every unit
// the walks meet.
func (l *ledger) capped(u *unit) bool {
	limit := l.e.p.Preemption.MaxPerJobPerHour
	recent := int(u.recent)
	if limit <= 0 || recent+1 < limit {
		return limit > 0 && recent >= limit
	}
	return recent+l.planned[l.jobOf(u).Ref] >= limit
}

// markPlanned records a preemption this plan decided. Only a job one short
// of the cap can be capped by it (see capped), and usually none is: then
// the map, with a string-keyed insert per victim, is left alone.
func (l *ledger) markPlanned(job *Job) {
	if l.trackPlanned {
		l.planned[job.Ref] = 1
	}
}

// recentPreemptions counts a job's preemptions in the last hour, both ends
// included: a preemption exactly an hour ago is still in the hour (a user
// counting "no more than 2 in any hour" counts it, and so does the
// simulator's cap_breaches).
func (c *cluster) recentPreemptions(job *Job) int {
	if len(job.Preemptions) == 0 {
		return 0 // most jobs: no hour to work out
	}
	n := 0
	hourAgo := c.now.Add(-time.Hour)
	for _, t := range job.Preemptions {
		if !t.Before(hourAgo) && !t.After(c.now) {
			n++
		}
	}
	return n
}

// victimRule says whether unit u may give its GPUs on node n to b, and under
// which rule. needOver: only while u's tenant holds more than its reserve.
func (l *ledger) victimRule(u *unit, b *bene, n int32, allowYoung bool) (rule Rule, needOver bool, ok bool) {
	if u.taken || l.capped(u) {
		return "", false, false
	}
	rule, needOver, ok = l.ruleFor(u, b, n, allowYoung)
	if ok && (l.sameJob(u, b) || !l.mayTake(u, b, rule)) {
		// Never preempt a job for itself. (A reclaim that finds the
		// victim's tenant within its reserve may still become priority,
		// preempts_reserved: addVictim asks mayTake of that then, and
		// only then: mayTake's answer stands while the rule does.)
		return "", false, false
	}
	return rule, needOver, ok
}

func (l *ledger) ruleFor(u *unit, b *bene, n int32, allowYoung bool) (rule Rule, needOver bool, ok bool) {
	if u.idle == idlePressure {
		return RuleIdle, false, true
	}
	if u.backfill { // the node's pool read only for backfill, a few units
		if p := l.poolOf[n]; int(p) < len(l.e.poolOwner) && l.e.poolOwner[p][b.tier] && !l.e.poolOwner[p][u.tier] {
			return RuleBackfill, false, true
		}
	}
	if !allowYoung && u.age < l.e.p.Preemption.MinRuntime {
		return "", false, false
	}
	switch {
	case u.tenant == b.tenant:
		return RulePriority, false, l.e.outranks(b.tier, b.prio, u.tier, u.prio) && !l.waitPromotionBars(u, b)
	case b.entitled && !l.e.overReserve(u.tier, u.prio, b.tier, b.prio) && !(b.deptOnly && l.sameDept(u.tenant, b.tenant)):
		// Not from work whose tier may preempt b's within a reserve: it
		// would take the GPUs straight back.
		return RuleReclaim, true, true
	case l.e.outranks(b.tier, b.prio, u.tier, u.prio) && !l.fairShields(u, b) && !l.waitPromotionBars(u, b):
		return RulePriority, true, true
	}
	return "", false, false
}

// walkScratch is per-node bookkeeping for findVictims, reused across calls
// (generation-stamped so that nothing is cleared between them).
type walkScratch struct {
	nodes []walkNode
	cur   uint32
}

// walkNode is a walk's figures for one node, together in one 64-byte
// entry: addVictim reads and writes them all for each victim it lists (as
// four slices, it loaded and checked four headers, and touched four cache
// lines).
type walkNode struct {
	gen   uint32
	freed int
	list  []victim
	picks []nodeGPUs // (tenant, GPUs picked from it)
}

func (w *walkScratch) reset(nodes int) {
	if len(w.nodes) < nodes {
		w.nodes = make([]walkNode, nodes)
	}
	w.cur++
}

// walked reports whether this walk touched node n.
func (w *walkScratch) walked(n int32) bool { return w.nodes[n].gen == w.cur }

// touch returns node n's entry, emptied if this walk had not touched it.
func (w *walkScratch) touch(n int32) *walkNode {
	wn := &w.nodes[n]
	if wn.gen != w.cur {
		wn.gen = w.cur
		wn.freed = 0
		wn.list = wn.list[:0]
		wn.picks = wn.picks[:0]
	}
	return wn
}

func (w *walkScratch) picked(n int32, tenant int) int { return w.nodes[n].picked(tenant) }

func (wn *walkNode) picked(tenant int) int {
	for _, p := range wn.picks {
		if int(p.node) == tenant {
			return p.gpus
		}
	}
	return 0
}

func (wn *walkNode) pick(tenant int, gpus int) {
	for i := range wn.picks {
		if int(wn.picks[i].node) == tenant {
			wn.picks[i].gpus += gpus
			return
		}
	}
	wn.picks = append(wn.picks, nodeGPUs{int32(tenant), gpus})
}

// findVictims walks the candidates best first and stops at the first node
// where what it has passed frees enough for one allocation of b.g GPUs:
// that node's worst victim is the best any node can offer. It then drops
// victims the allocation does not need, worst first.
func (st *state) findVictims(b *bene, allowYoung bool) (int32, []victim, bool) {
	st.settle()
	w := &st.walk
	w.reset(len(st.nodes))
	c := &st.cands[b.pool]
	budget := walkBudget
	// The beneficiary's figures the loop asks of every unit, read once:
	// the walk passes about 500,000 units a fleet plan, and the loads
	// through b were a fifth of its own instructions.
	within, tenant := b.within, b.tenant
	futileAt := walkBudget - futileAfter // the budget left when the walk asks walkIsFutile
	if within {
		futileAt = -1 // a swap never asks: searchNodes knows no swaps
	}
	// Futile before the first unit, by a floor read without moving the
	// node order (floorNow), the walk would complete no node within its
	// budget: it would pass futileAfter units in vain, listing victims it
	// then drops, and hand over to searchNodes from the same model (the
	// walk changes nothing): 3,910 of a fleet plan's 6,279 walks, and
	// 13,000 of its 81,000 addVictim calls. Otherwise it asks again at
	// futileAfter, as before.
	if !within {
		if floor, ok := st.floorNow(b.pool, b.g); ok && st.futileBelow(b, allowYoung, floor) {
			return st.searchNodes(b, allowYoung) // as the walk would, at its futileAfter'th unit
		}
	}
	units := st.units
	for seg := 0; seg < segments; seg++ {
		from, to := st.walkRange(c, seg, b, allowYoung)
		for _, ui := range c.units[from:to] {
			u := &units[ui]
			if within && u.tenant != tenant {
				continue // a swap within a limit takes only the tenant's own work
			}
			if budget--; budget < 0 {
				if within {
					return 0, nil, false // searchNodes knows no swaps
				}
				return st.searchNodes(b, allowYoung)
			}
			if budget == futileAt && st.walkIsFutile(b, allowYoung) {
				return st.searchNodes(b, allowYoung) // as the walk would, once out of budget
			}
			if u.taken {
				continue
			}
			var found int32 = -1
			st.nodesOf(u, func(n int32, _ int) {
				if found < 0 && st.cap.nodeIn(n, b.pool) && st.addVictim(ui, b, n, allowYoung) {
					found = n
				}
			})
			if found >= 0 {
				return found, st.prune(b, found), true
			}
		}
	}
	return 0, nil, false
}

// futileAfter is how many units the walk passes before it asks whether it
// can finish within its budget at all: most walks that succeed do so
// sooner, and asking builds the node order for the pool and GPU count.
const futileAfter = 16

// walkIsFutile reports whether the walk would spend its whole budget on
// units that cannot complete any node (their keys lie below every node's
// lower bound) and then hand over to searchNodes: the engine then goes
// there at once. It calls walkRange only for segments the walk would have
// entered, since that skips taken units for good.
func (ix *nodeIndex) walkIsFutile(b *bene, allowYoung bool) bool {
	if b.g > ix.m.maxGPUs {
		return false
	}
	return ix.futileBelow(b, allowYoung, ix.minBound(b.pool, b.g))
}

// futileBelow is walkIsFutile with the floor given: no node completes with
// a victim below it. A floor lower than minBound's is never futile where
// minBound's is not.
func (ix *nodeIndex) futileBelow(b *bene, allowYoung bool, floor uint64) bool {
	m := ix.m
	if b.g > m.maxGPUs {
		return false
	}
	c := &ix.cands[b.pool]
	passed := 0
	for seg := 0; seg < segments; seg++ {
		from, to := m.walkRange(c, seg, b, allowYoung)
		keys := c.keys[from:to]
		if left := walkBudget - passed; len(keys) > left {
			// The budget runs out in this segment: futile if the last
			// unit the walk would examine still lies below the floor.
			return left == 0 || keys[left-1] < floor
		}
		if len(keys) > 0 && keys[len(keys)-1] >= floor {
			return false // a unit within the budget might complete a node
		}
		passed += len(keys)
	}
	return false // the walk ends within its budget
}

// addVictim adds unit ui's GPUs on node n to the walk if b may take them,
// and reports whether the node then frees enough for one allocation of b.
// For a unit of a chain it adds the chain's next on n instead, if any
// (chainPick).
func (st *state) addVictim(ui int32, b *bene, n int32, allowYoung bool) bool {
	u := &st.units[ui]
	if u.chain >= 0 { // chainPick and chainListed are a chain's: most units are in none
		if ui = st.chainPick(ui, n); ui < 0 {
			return false
		}
		u = &st.units[ui]
	}
	rule, needOver, ok := st.victimRule(u, b, n, allowYoung)
	if !ok {
		return false
	}
	wn := st.walk.touch(n)
	t := &st.tenants[u.tenant]
	holds, reserve := t.use, t.reserve
	if b.inPool > 0 {
		holds, reserve, _ = st.poolUse(u.tenant, b.inPool-1)
	}
	picked := 0 // what the walk picked of u's tenant on n: asked only where a reserve may shield u
	if needOver {
		picked = wn.picked(u.tenant)
	}
	if needOver && holds-picked <= reserve {
		if !st.e.overReserve(b.tier, b.prio, u.tier, u.prio) {
			return false
		}
		if rule != RulePriority && !st.mayTake(u, b, RulePriority) {
			return false // victimRule asked mayTake of the reclaim, not of this
		}
		rule = RulePriority // within its reserve, which b's tier may cross (preempts_reserved)
	} else if needOver && rule == RulePriority && keepsReserve(u, holds-picked, reserve, true) &&
		(b.beyond || !st.e.overReserve(b.tier, b.prio, u.tier, u.prio)) {
		// Only the victim's GPUs above its tenant's reserve are
		// borrowed, unless b's tier may cross the reserve. Never from b
		// non-preemptible beyond its reserve, which reclaims take back.
		return false
	}
	if needOver && st.reserveShields(u, b, n, picked, rule) {
		return false
	}
	wn.list = append(wn.list, victim{ui: ui, rule: rule, holdsPrev: holds})
	if u.chain >= 0 {
		st.chainListed(ui)
	}
	wn.pick(u.tenant, int(u.units))
	wn.freed += st.gpusOn(u, n)
	return st.usableFree(b, n)+wn.freed >= b.g
}

// reserveShields reports whether unit u, which b may take from its
// tenant only above a reserve (needOver), is within its reserve in node
// n's quota pool or its department's, which b's tier may not cross.
// Asked only of such units: the rest (idle, backfill, b's own tenant's)
// were most of addVictim's calls and paid for the string comparison.
func (st *state) reserveShields(u *unit, b *bene, n int32, picked int, rule Rule) bool {
	// A reclaim takes borrowed work whole, below the owner's reserve if
	// need be: the reclaimer's reserve is as good a guarantee, and nothing
	// else would give it back. A priority preemption only borrows.
	whole := rule == RulePriority
	if b.inPool == 0 && st.tenants[u.tenant].quotas != nil && st.protectedInPool(u, n, picked, whole) &&
		!st.e.overReserve(b.tier, b.prio, u.tier, u.prio) {
		return true // within its reserve in the node's pool
	}
	return st.e.depts != nil && st.deptProtected(u, b, n, whole) && !st.e.overReserve(b.tier, b.prio, u.tier, u.prio) // within its department's reserve
}

// keepsReserve reports whether an owner of unit u's GPUs (its tenant, its
// tenant within a pool, its department) that holds left, once the walk's
// victims so far are gone, keeps u from a taker against its reserve: it is
// at or below its reserve already, or, with whole, taking u would leave it
// below. A job is preempted whole, not just its GPUs above the reserve,
// and an owner left below its reserve reclaims the GPUs straight back: a
// tug of war (issue 31). So a taker that only borrows (priority, fair
// share) asks whole; a reclaim, which the reclaimer's own reserve
// entitles, does not.
func keepsReserve(u *unit, left, reserve int, whole bool) bool {
	return left <= reserve || whole && left-int(u.units) < reserve
}

// usableFree is the free GPUs on node n that b may use beside its victims'.
func (ix *nodeIndex) usableFree(b *bene, n int32) int {
	if b.within {
		return 0
	}
	return int(ix.cap.free[n])
}

// prune drops, worst first, victims whose GPUs on node n are not needed.
func (ix *nodeIndex) prune(b *bene, n int32) []victim {
	wn := &ix.walk.nodes[n]
	list := wn.list
	spare := ix.usableFree(b, n) + wn.freed - b.g
	out := ix.carve(len(list))
	for i := len(list) - 1; i >= 0; i-- {
		on := ix.gpusOn(&ix.m.units[list[i].ui], n)
		if on <= spare {
			spare -= on
			continue
		}
		out = append(out, list[i])
	}
	slices.Reverse(out)
	return out
}

// prunedBlock is how many victims a block of pruned lists holds.
const prunedBlock = 1024

// carve returns an empty list with room for k victims, carved from a
// block shared by the plan's pruned lists rather than allocated alone (a
// fleet plan pruned 6,000 lists, and their allocation cost 1.6 M
// instructions). Each list has a part of the block of its own: its
// capacity ends where the next list's part begins, so an append beyond
// it allocates anew.
func (ix *nodeIndex) carve(k int) []victim { return carveFrom(&ix.pruned, k, prunedBlock) }

// carveFrom returns an empty list with room for k, the next part of
// *block, which it replaces by a new block of size (or k) when short.
func carveFrom[T any](block *[]T, k, size int) []T {
	at := len(*block)
	if at+k > cap(*block) {
		*block, at = make([]T, 0, max(k, size)), 0
	}
	*block = (*block)[:at+k]
	return (*block)[at : at : at+k]
}

func (ix *nodeIndex) gpusOn(u *unit, n int32) int {
	if u.gang < 0 {
		if u.node == n {
			return u.gpus
		}
		return 0
	}
	return ix.gangGPUsOn(u, n)
}

// gangGPUsOn is gpusOn for a gang, apart so that gpusOn's common case is
// inlined (addVictim asks it of every victim it lists).
func (ix *nodeIndex) gangGPUsOn(u *unit, n int32) int {
	on := 0
	ix.m.nodesOf(u, func(m int32, g int) {
		if m == n {
			on += g
		}
	})
	return on
}
