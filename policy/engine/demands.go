package engine

import (
	"cmp"
	"github.com/gpu-steward/steward/policy"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// pending is a demand with what the engine worked out about it.
type pending struct {
	d      *Demand
	tier   int
	tenant int
	prio   int
	under  bool   // it keeps its tenant within its reservation (one allocation; a gang whole)
	back   bool   // requeued after an idle release: behind all other work
	w      int32  // its index in Snapshot.Waiting
	jobTag uint64 // jobTag(d.Job.Ref), while the demand is at hand
}

// orderDemands ranks waiting work: work requeued after an idle release
// last; then the highest tier first; within a tier, work that keeps its
// tenant within its reservation first (reserved GPUs are served before
// borrowed ones, so admitting one tenant's borrowing never has to be undone
// for another's reservation — a promotion lifts a job above the rest of
// its tier, never above what a reservation guarantees); then the highest
// (promoted) priority, the tenant with the smallest weighted share of
// borrowed GPUs; then, with resume_order "preempted-first", work preempted
// mid-run before work that never ran (it has progress waiting; after the
// shares, so that the order between tenants stays the fair one); and the
// longest waiting. Ties fall back to names so that the order is
// deterministic.
func (st *state) orderDemands() []pending {
	out := make([]pending, 0, len(st.s.Waiting))
	resolved := st.resolveWaiting()
	for i := range st.s.Waiting {
		d := &st.s.Waiting[i]
		switch {
		case d.GPUsPerAlloc <= 0 || d.Count <= 0:
			st.skip("demand "+d.String(), "needs a positive GPU count and allocation count")
			continue
		case d.Job.Ref.ID == "":
			st.skip("demand #"+itoa(i), "has no job ID")
			continue
		}
		tenant, tier := int(resolved[i].tenant), int(resolved[i].tier)
		t := &st.tenants[tenant]
		du := st.pl.setUnits(st.pl.demandSet[i])
		t.waiting += demandGPUs(d) * du
		prio := st.promote(d, tier)
		// A gang is placed all or nothing: it keeps its tenant within its
		// reservation only if all of it does. (Counted per allocation, a
		// gang borrowing beyond the reservation ranked with reserved work,
		// and, ranked first as preempted work, took back at once the GPUs
		// just reclaimed from it, over and over.)
		first := d.GPUsPerAlloc
		if d.Job.Gang {
			first = demandGPUs(d)
		}
		out = append(out, pending{
			d: d, tier: tier, tenant: tenant, prio: prio, w: int32(i),
			under:  t.use+first*du <= t.reserve || st.e.depts != nil && st.deptUnder(tenant, first*du),
			back:   d.Requeued,
			jobTag: jobTag(d.Job.Ref),
		})
	}
	return st.sortDemands(out)
}

// resolved is a waiting demand's tenant and tier.
type resolved struct{ tenant, tier int32 }

// resolveWaiting returns the tenant and tier of each waiting demand,
// looked up by name once per plan (checkPriorities and orderDemands both
// need them: on a long queue the lookups add up). Tenants that no policy
// tenant names are added in Snapshot.Waiting order.
func (m *model) resolveWaiting() []resolved {
	if m.waitingOf == nil {
		m.waitingOf = make([]resolved, len(m.s.Waiting))
		for i := range m.s.Waiting {
			job := &m.s.Waiting[i].Job
			tenant, tier := m.names.of(m, job.Ref.Namespace, job.Tier)
			m.waitingOf[i] = resolved{tenant: int32(tenant), tier: int32(tier)}
		}
	}
	return m.waitingOf
}

// sortDemands puts pending demands in the order orderDemands describes, in
// two steps. The order compares a demand's class first (requeued, tier,
// reservation, priority, its tenant's share, fresh), which changes from
// plan to plan as tenants' use and promotions change, and only then its
// place in time (since when it waits, then names), which stays the same
// as long as it waits. So the demands are put in time order first — with
// the caller's hint (Snapshot.WaitingOrder) that is a check, not a sort,
// of a queue that may be thousands long — and then sorted stably by
// class, a packed integer in which few bits vary, with a radix sort. The
// result is the order of one sort by class, then time.
func (st *state) sortDemands(out []pending) []pending {
	order := st.byTime(out)
	codes := st.classCodes(out)
	order = st.sc.radixByCode(order, codes)
	order = honourMoves(out, order, codes)
	permute(out, order)
	return out
}

// permute puts ps in order, in place: ps[i] becomes what was ps[order[i]].
// It follows each cycle of the permutation once, marking the places it
// fills as their own (order is used up). In place, because a long queue's
// pending demands are a large allocation to make twice per plan.
func permute(ps []pending, order []int32) {
	for i := range ps {
		if int(order[i]) == i {
			continue
		}
		first := ps[i]
		j := i
		for {
			k := int(order[j])
			order[j] = int32(j)
			if k == i {
				ps[j] = first
				break
			}
			ps[j] = ps[k]
			j = k
		}
	}
}

// timeKey is a pending demand's place in time: since when it waits, then
// (when that ties) its job's and group's names and its index p among the
// pending, which is in Snapshot.Waiting order, as a stable sort would keep.
type timeKey struct {
	sec  int64
	nsec int32
	p    int32
}

// byTime returns the indices of the pending demands in time order: the
// longest waiting first, ties by names, then by index.
func (m *model) byTime(out []pending) []int32 {
	order := m.hintedOrder(out)
	keys := slices.Grow(m.sc.times[:0], len(order))
	for _, p := range order {
		since := out[p].d.Since
		keys = append(keys, timeKey{sec: since.Unix(), nsec: int32(since.Nanosecond()), p: p})
	}
	m.sc.times = keys
	compare := func(a, b timeKey) int {
		if c := cmp.Compare(a.sec, b.sec); c != 0 {
			return c
		}
		if c := cmp.Compare(a.nsec, b.nsec); c != 0 {
			return c
		}
		da, db := out[a.p].d, out[b.p].d
		if c := compareJoined(da.Job.Ref.Namespace, da.Job.Ref.ID, db.Job.Ref.Namespace, db.Job.Ref.ID); c != 0 {
			return c
		}
		if c := cmp.Compare(da.Group, db.Group); c != 0 {
			return c
		}
		return cmp.Compare(a.p, b.p)
	}
	if !slices.IsSortedFunc(keys, compare) {
		m.sc.sortTimes(keys, compare)
	}
	for i, k := range keys {
		order[i] = k.p
	}
	return order
}

// sortTimes sorts keys by compare, as slices.SortFunc would (compare is a
// total order: it ends with the index). The instants are radix-sorted,
// nanoseconds first and then seconds (the sort is stable, so that is by
// both), and only the runs of one instant, few and short, go through
// compare and its names.
func (sc *scratch) sortTimes(keys []timeKey, compare func(a, b timeKey) int) {
	ks, tmp := sc.radixBuffers(len(keys))
	for i, k := range keys {
		ks[i] = candKey{key: uint64(uint32(k.nsec)), ui: int32(i)}
	}
	ks, tmp = radixSort(ks, tmp)
	for i := range ks {
		ks[i].key = uint64(keys[ks[i].ui].sec) ^ 1<<63 // signed order
	}
	ks, _ = radixSort(ks, tmp)
	sorted := grow(sc.timesSorted, len(keys))
	sc.timesSorted = sorted
	for i := range ks {
		sorted[i] = keys[ks[i].ui]
	}
	for lo := 0; lo < len(sorted); {
		hi := lo + 1
		for hi < len(sorted) && sorted[hi].sec == sorted[lo].sec && sorted[hi].nsec == sorted[lo].nsec {
			hi++
		}
		if hi-lo > 1 {
			slices.SortFunc(sorted[lo:hi], compare)
		}
		lo = hi
	}
	copy(keys, sorted)
}

// hintedOrder returns the pending demands' indices in the order of
// Snapshot.WaitingOrder when that lists every waiting demand once, and in
// Snapshot.Waiting order otherwise. Only the time byTime takes depends on
// it: byTime checks the order and sorts when it is wrong.
func (c *cluster) hintedOrder(out []pending) []int32 {
	order := make([]int32, 0, len(out))
	hint := c.s.WaitingOrder
	if len(hint) == len(c.s.Waiting) {
		// pendingOf: each waiting demand's index among the pending, -1
		// for one skipped; -2 once the hint has named it.
		pendingOf := make([]int32, len(c.s.Waiting))
		for i := range pendingOf {
			pendingOf[i] = -1
		}
		for i := range out {
			pendingOf[out[i].w] = int32(i)
		}
		valid := true
		for _, w := range hint {
			if w < 0 || int(w) >= len(pendingOf) || pendingOf[w] == -2 {
				valid = false
				break
			}
			if p := pendingOf[w]; p >= 0 {
				order = append(order, p)
			}
			pendingOf[w] = -2
		}
		if valid {
			return order
		}
		order = order[:0]
	}
	for i := range out {
		order = append(order, int32(i))
	}
	return order
}

// compareJoined compares a1+"/"+a2 with b1+"/"+b2, the way job references
// are ordered by name, without building either string.
func compareJoined(a1, a2, b1, b2 string) int {
	if a1 == b1 {
		return strings.Compare(a2, b2)
	}
	la, lb := len(a1)+1+len(a2), len(b1)+1+len(b2)
	for i := range min(la, lb) {
		if ca, cb := joinedByte(a1, a2, i), joinedByte(b1, b2, i); ca != cb {
			return cmp.Compare(ca, cb)
		}
	}
	return cmp.Compare(la, lb)
}

// joinedByte is byte i of s1+"/"+s2.
func joinedByte(s1, s2 string, i int) byte {
	switch {
	case i < len(s1):
		return s1[i]
	case i == len(s1):
		return '/'
	}
	return s2[i-len(s1)-1]
}

// classCodes packs each pending demand's class into an integer that
// orders as the class does: from the highest bits, requeued (last), tier
// priority (highest first), not within the reservation, priority (highest
// first), the rank of its tenant's weighted share of borrowed GPUs
// (smallest first), and fresh: under resume_order "preempted-first", work
// not preempted mid-run (after preempted work).
func (st *state) classCodes(out []pending) []uint64 {
	shares, shareBits := st.shareRanks(out)
	codes := make([]uint64, len(out))
	for i := range out {
		p := &out[i]
		var c uint64
		if p.back {
			c |= 1 << 17
		}
		c |= (0xff - clampByte(st.e.tiers[p.tier].priority)) << 9
		if !p.under {
			c |= 1 << 8
		}
		c |= 0xff - clampByte(p.prio)
		order := policy.PoolOrderDefault
		if st.e.orderPools != nil {
			order = st.orderOf(st.pl.demandSet[p.w])
			c = c<<sizeBits | sizeKey(order, demandGPUs(p.d))
		}
		c <<= shareBits
		if order != policy.PoolOrderFIFO {
			c |= shares[p.tenant]
		}
		c <<= 1
		if st.e.preemptedFirst && !p.d.Preempted && order != policy.PoolOrderFIFO {
			c |= 1
		}
		codes[i] = c
	}
	return codes
}

// sizeBits is the width of a demand's size in its class code: sizes
// beyond are ranked as the largest.
const sizeBits = 16

// sizeKey ranks a demand of gpus GPUs by its pool's order: larger first
// (a smaller key), smaller first, or all alike.
func sizeKey(order policy.PoolOrder, gpus int) uint64 {
	size := uint64(min(max(gpus, 0), 1<<sizeBits-1))
	switch order {
	case policy.PoolOrderLargestFirst:
		return 1<<sizeBits - 1 - size
	case policy.PoolOrderSmallestFirst:
		return size
	}
	return 0
}

// orderOf is the order of the waiting work that can run only on the
// nodes of set s: that of the first pool (by name) with an order that
// holds all of s's nodes; the default order otherwise (work that may
// also run outside any ordered pool, or no node at all).
func (ix *nodeIndex) orderOf(s int32) policy.PoolOrder {
	m := ix.m
	if ix.setOrder == nil {
		ix.setOrder = map[int32]policy.PoolOrder{}
	}
	if o, ok := ix.setOrder[s]; ok {
		return o
	}
	order := policy.PoolOrderDefault
	if m.pl.any(s) {
		for _, p := range m.e.orderPools {
			holds := true
			for cell, in := range m.pl.in[s] {
				if in && !p.Holds(m.pools[m.pl.cellPool[cell]], m.pl.models[m.pl.cellClass[cell]]) {
					holds = false
					break
				}
			}
			if holds {
				order = p.Order
				break
			}
		}
	}
	ix.setOrder[s] = order
	return order
}

// shareRanks ranks the weighted shares of borrowed GPUs of the tenants
// with pending demands, smallest first, equal shares equal: [tenant] its
// rank, and the bits a rank takes. A share is the tenant's, the same for
// all its demands (orderDemands changes no tenant's use).
func (l *ledger) shareRanks(out []pending) ([]uint64, int) {
	ranks := make([]uint64, len(l.tenants))
	seen := make([]bool, len(l.tenants))
	var keys []shareKey
	for i := range out {
		if ti := out[i].tenant; !seen[ti] {
			seen[ti] = true
			keys = append(keys, l.shareKey(ti))
		}
	}
	slices.SortFunc(keys, compareShareKeys)
	keys = slices.Compact(keys)
	for ti := range l.tenants {
		if seen[ti] {
			r, _ := slices.BinarySearchFunc(keys, l.shareKey(ti), compareShareKeys)
			ranks[ti] = uint64(r)
		}
	}
	return ranks, bits.Len(uint(len(keys)))
}

// shareKey orders tenants in the waiting order: with fair share over time
// by decayed usage per unit of weight, then by the share borrowed now;
// without, by the share borrowed now alone (usage stays 0).
// With departments, the department's decayed usage per unit of its
// weight comes first (dept; 0 without departments).
type shareKey struct{ dept, usage, now uint64 }

func (l *ledger) shareKey(ti int) shareKey {
	k := shareKey{now: floatKey(l.share(ti))}
	if l.e.fairOn() {
		k.usage = l.usageKey(ti)
		if l.e.depts != nil {
			k.dept = l.deptUsageKey(ti)
		}
	}
	return k
}

func compareShareKeys(a, b shareKey) int {
	if c := cmp.Compare(a.dept, b.dept); c != 0 {
		return c
	}
	if c := cmp.Compare(a.usage, b.usage); c != 0 {
		return c
	}
	return cmp.Compare(a.now, b.now)
}

// share is a tenant's GPUs beyond its reservation per unit of weight.
func (l *ledger) share(ti int) float64 {
	t := &l.tenants[ti]
	return float64(t.use-t.reserve) / t.t.Weight
}

// radixByCode sorts order (indices into codes) stably by code, with
// radixSort (a plan has few tiers, priorities and tenants, so it passes
// over two or three bytes).
func (sc *scratch) radixByCode(order []int32, codes []uint64) []int32 {
	keys, tmp := sc.radixBuffers(len(order))
	for i, p := range order {
		keys[i] = candKey{key: codes[p], ui: p}
	}
	keys, _ = radixSort(keys, tmp)
	for i := range keys {
		order[i] = keys[i].ui
	}
	return order
}

// clampByte clamps a priority into a byte for a packed key.
func clampByte(v int) uint64 { return uint64(max(0, min(v, 0xff))) }

// floatKey maps a float64 to an integer of the same order as cmp.Compare
// gives: NaN first, -0 equal to 0.
func floatKey(f float64) uint64 {
	switch {
	case f != f:
		return 0
	case f == 0:
		f = 0
	}
	b := math.Float64bits(f)
	if b>>63 == 1 {
		return ^b
	}
	return b | 1<<63
}

// failures remembers beneficiaries that found no victims, so that the rest
// of the plan does not search again for any that cannot fare better: of the
// same tenant, pool and entitlement, no higher priority and no fewer GPUs
// per allocation. (Placements later in the plan can make a tenant borrow
// more and so expose more victims; the next plan sees that.) They are kept
// per tenant, in the order they were found: a tenant has few pools and
// entitlements, and a scan of its few failures is cheaper than hashing a
// key for each of thousands of demands.
type failures [][]failure // [tenant]

type failKey struct {
	tenant   int
	pool     int32
	entitled bool
	within   bool // a swap within the tenant's limit (swapWithin)
	deptOnly bool // entitled by its department's reserve alone (bene.deptOnly)
	// tier: the beneficiary's tier where the policy lets some tier preempt
	// within reserves (preempts_reserved), since then who may be taken
	// depends on the tier and not on the priority alone; else -1.
	tier int
	// holds: where fair-share reclaim runs, what the tenant would hold
	// with the demand placed (held, set aside, and the whole ask: a
	// gang's rest), else 0. Its final-share test weighs that: a failure
	// of a tenant that would hold more (a gang, or a gang's second
	// allocation, placed beside its first and then undone) says nothing
	// of a smaller ask, which may reclaim where that one may not
	// (TestFairReclaimOneNode).
	holds int
}

type failure struct {
	pool             int32
	entitled, within bool
	tier             int
	prio, base, g    int
	holds            int
	why              Reason
}

// find returns the reason of the first failure under key k that a
// beneficiary of priority prio, of a tier of priority base, needing g GPUs
// an allocation cannot beat. (A promotion outranks only work of its own
// tier or below, Engine.outranks: a beneficiary of a higher tier may take
// what a promoted one of a lower tier may not.)
func (f failures) find(k failKey, prio, base, g int) (Reason, bool) {
	if k.tenant >= len(f) {
		return Reason{}, false
	}
	for _, x := range f[k.tenant] {
		// A promoted one's reason says so: it is shared only with the
		// same promotion.
		beats := x.prio >= prio && x.base >= base && (x.prio == x.base || x.prio == prio && x.base == base)
		if x.pool == k.pool && x.entitled == k.entitled && x.within == k.within && x.tier == k.tier && beats && x.g <= g &&
			x.holds <= k.holds {
			return x.why, true
		}
	}
	return Reason{}, false
}

// add remembers a failure under key k.
func (f *failures) add(k failKey, prio, base, g int, why Reason) {
	if k.tenant >= len(*f) {
		*f = append(*f, make([][]failure, k.tenant+1-len(*f))...)
	}
	(*f)[k.tenant] = append((*f)[k.tenant], failure{pool: k.pool, entitled: k.entitled, within: k.within, tier: k.tier,
		prio: prio, base: base, g: g, holds: k.holds, why: why})
}

// serveDemands serves waiting work in order. Its actions are written by an
// explainer (explain.go), which owns the plan's actions meanwhile.
func (st *state) serveDemands() {
	failed := &failures{}
	order := st.orderDemands()
	st.explainer = st.startExplainer(len(order) >= explainAsyncFrom)
	defer st.explainer.stop()
	for _, p := range order {
		st.serve(p, failed)
	}
	st.out.Actions = st.explainer.finish()
	st.moves = st.explainer.moves
	st.explainer = nil
}

// serve places as much of one demand as capacity, limits and preemption
// allow, and emits what that takes.
func (st *state) serve(p pending, failed *failures) {
	d := p.d
	if why, ok := st.waitsForOwner(p); ok {
		st.wait(d, d.Count, why)
		return
	}
	b := &bene{d: d, tier: p.tier, tenant: p.tenant, prio: p.prio, g: d.GPUsPerAlloc, jobTag: p.jobTag,
		holds: st.tenants[p.tenant].use}
	b.base = st.pl.demandSet[p.w] // may be the empty set: noNodeReason says why
	b.pool = b.base
	b.unitsPer = st.pl.setUnits(b.base)
	if why, ok := st.protectedWaits(b, demandGPUs(d)*max(b.unitsPer, gpuUnit)); ok {
		if !d.Held {
			st.explainer.hold(b, d.Count, why)
		}
		st.wait(d, d.Count, why)
		return
	}
	st.releaseSurplus(b)
	b.marks = st.takeMarks(p.w)
	if len(b.marks) == 0 && st.e.precedence != nil && st.precede(p, b) {
		return
	}

	sv := &st.serving
	victims := sv.victims[:0]
	placed := 0
	afterVictims := false   // some allocation goes on GPUs still draining for it
	onFree := sv.onFree[:0] // nodes of allocations placed on free GPUs alone
	var why Reason
	// A gang's allocations are all or nothing: try every one, then keep
	// or undo the lot.
	gang := d.Job.Gang && d.Count > 1
	nodes := sv.nodes[:0]
	marks := len(st.out.Earmarks)
	for placed < d.Count {
		need := d.GPUsPerAlloc
		if gang {
			need = (d.Count - placed) * d.GPUsPerAlloc // the rest of the gang, for its limit
		}
		n, vs, r, ok := st.placeOne(b, need, failed)
		if !ok {
			why = r
			break
		}
		victims = append(victims, vs...)
		if gang {
			nodes = append(nodes, n)
		}
		st.markBeside(b, n, vs)
		if len(vs) == 0 {
			onFree = append(onFree, n)
		}
		afterVictims = afterVictims || st.drainsOn(p.w, n)
		placed++
	}
	if gang && placed < d.Count {
		st.undoGang(b, nodes, victims)
		st.out.Earmarks = st.out.Earmarks[:marks] // and the GPUs set aside for them
		onFree, victims, placed = onFree[:0], victims[:0], 0
	}
	if len(victims) > 0 {
		// The preemption counts on these too: a gang, or the other
		// allocations of the demand, run only with them.
		st.markFree(b, onFree)
	}
	st.emitVictims(b, victims)
	st.served(p, b, victims, placed, afterVictims, why)
	sv.victims, sv.nodes, sv.onFree = victims[:0], nodes[:0], onFree[:0]
}

// served writes what serving p came to, once its placed allocations and
// their victims are emitted: a held job resumes; a new one whose victims
// checkpoint waits held until they stop; the rest of it waits, why says
// why.
func (st *state) served(p pending, b *bene, victims []victim, placed int, afterVictims bool, why Reason) {
	d := p.d
	if placed > 0 && d.Held {
		st.explainer.add(decision{kind: decideResume, b: *b, count: placed, use: st.tenants[b.tenant].use, fixed: st.tenants[b.tenant].fixed,
			preempted: len(victims) > 0 || afterVictims, ahead: len(victims) > 0 || afterVictims || len(b.marks) > 0 || b.took})
	}
	if placed > 0 && !d.Held {
		if grace := st.drainFor(b, victims); grace > 0 {
			// Nomad would place it on the first GPUs anyone frees
			// while its victims checkpoint, GPUs freed for other work
			// among them: it waits held, and resumes as they stop.
			why := st.drainingReason(b, victims, grace)
			st.explainer.hold(b, placed, why)
			st.wait(d, placed, why)
		}
	}
	if placed < d.Count {
		if note := st.setAside(p, b, d.Count-placed, why); note != "" {
			why.Message += note
		}
		if !d.Held {
			st.explainer.hold(b, d.Count-placed, why)
		}
		st.noteBlocked(b, (d.Count-placed)*d.GPUsPerAlloc, why)
		st.wait(d, d.Count-placed, why)
		if a := st.aside.of(b.tenant); a != nil && a.w == p.w {
			a.wait = len(st.out.Waiting) - 1 // takeAside notes there who took them
		}
	}
}

// undoGang takes back what a gang's allocations took before one found
// no room: their places and their victims.
func (m *model) undoGang(b *bene, nodes []int32, victims []victim) {
	if gangUndone != nil {
		gangUndone(len(nodes), len(victims))
	}
	for _, n := range nodes {
		m.unplace(b, n)
	}
	for _, v := range victims {
		m.untake(v.ui)
	}
}

// gangUndone, where a test sets it, hears of each gang undoGang takes
// back: the allocations it had placed and the victims it had taken. Only
// tests set it (countGangUndos), never while a plan runs; nil, it costs
// one comparison a gang that does not fit.
var gangUndone func(placed, victims int)

// placeOne finds room for one allocation of b: free GPUs, or GPUs freed by
// preempting victims (first sparing work younger than min_runtime). need is
// what the tenant still takes in all (the rest of a gang), for the limit and
// the reservation.
func (st *state) placeOne(b *bene, need int, failed *failures) (int32, []victim, Reason, bool) {
	t := &st.tenants[b.tenant]
	if b.unitsPer == 0 {
		b.unitsPer = gpuUnit
	}
	need *= b.unitsPer // GPUs to units (units.go)
	if tier := &st.e.tiers[b.tier]; !tier.preemptible && t.fixed+need > t.reserve {
		if tier.waitsBeyond {
			return 0, nil, st.reserveReason(b, need), false
		}
		b.beyond = true // runs beyond the reserve, where reclaims take it back
	} else {
		b.beyond = false
	}
	if t.use+t.marked+need > t.limit() {
		if n, ok := st.onMarksAtLimit(b); ok {
			return n, nil, Reason{}, true
		}
		return st.swapWithin(b, need, failed)
	}
	b.entitled, b.deptOnly = t.use+need <= t.reserve, false
	if st.e.depts != nil {
		if st.overDeptLimit(b.tenant, need) {
			return 0, nil, st.deptLimitReason(b, need), false
		}
		if !b.entitled && st.deptUnder(b.tenant, need) {
			// Below its department's reserve: entitled against tenants
			// outside the department only.
			b.entitled, b.deptOnly = true, true
		}
	}
	if t.quotas != nil {
		set, full := st.limitedSet(b)
		if full >= 0 {
			return 0, nil, st.quotaLimitReason(b, full), false
		}
		b.pool = set
	}
	return st.findRoom(b, need, failed)
}

// findRoom finds room for one allocation of b that its tenant's reserve
// and limits admit: GPUs set aside for it, free GPUs, or GPUs freed by
// preempting victims, in that order.
func (st *state) findRoom(b *bene, need int, failed *failures) (int32, []victim, Reason, bool) {
	t := &st.tenants[b.tenant]
	if n, ok := st.markedFit(b); ok {
		st.place(b, n)
		return n, nil, Reason{}, true
	}
	if n, ok := st.cap.bestFit(b.pool, b.g); ok {
		st.place(b, n)
		return n, nil, Reason{}, true
	}
	if n, ok := st.takeAside(b); ok {
		return n, nil, Reason{}, true
	}
	if b.d.Requeued {
		// It gave its GPUs back as idle work: taking GPUs from others to
		// run idle again would only start the loop over.
		return 0, nil, Reason{RuleCapacity, "requeued after an idle release: it takes only free GPUs, and none are free" +
			" (needs " + itoa(b.g) + " on one node)"}, false
	}
	if b.protected {
		return 0, nil, st.text.freeOnlyReason(b), false // it takes no one's GPUs (protect.go)
	}
	if b.pool == st.pl.empty {
		return 0, nil, st.noNodeReason(b.d), false // no node may run it: nothing to free
	}
	if t.quotas != nil {
		if n, vs, ok := st.reclaimInPool(b, need); ok {
			return st.placeWith(b, n, vs)
		}
	}
	key := failKey{tenant: b.tenant, pool: b.pool, entitled: b.entitled, deptOnly: b.deptOnly, tier: st.e.failTier(b.tier)}
	if st.e.p.Preemption.FairShareReclaimAbove > 0 && st.e.fairOn() {
		key.holds = t.use + t.earmarked + need
	}
	r, known := failed.find(key, b.prio, st.e.tiers[b.tier].priority, b.g)
	if !known {
		for _, young := range []bool{false, true} {
			if n, vs, ok := st.findVictims(b, young); ok {
				return st.placeWith(b, n, vs)
			}
		}
		if n, vs, ok := st.fairReclaim(b, need); ok {
			return st.placeWith(b, n, vs)
		}
		r = st.capacityReason(b, st.promotionBlocker(b))
		failed.add(key, b.prio, st.e.tiers[b.tier].priority, b.g, r)
	}
	if w, n, ok := st.takeMarksBelow(b); ok {
		st.unmark(b, w, n)
		return n, nil, Reason{}, true
	}
	return 0, nil, r, false
}

// onMarksAtLimit places one allocation of b, whose tenant would exceed its
// limit, on GPUs set aside for it, and gives back the tenant's newest work
// (other than b's own job) as far as it is then over its limit, counting
// what is set aside for its other waiting work. The GPUs were freed for b
// while the tenant was within its limit; work placed since (Nomad places
// what fits between two plans) put it over. Swapping more of the
// tenant's own work for b instead would leave them idle, the preemption
// that freed them wasted, and the newest work, which made the tenant go
// over, in place. Only if not enough can be given back (the eviction cap)
// does b swap.
func (st *state) onMarksAtLimit(b *bene) (int32, bool) {
	n, ok := st.markedFit(b)
	if !ok {
		return 0, false
	}
	t := &st.tenants[b.tenant]
	over := func(extra int) bool { return t.use+t.marked+b.g*st.pl.unitsOn(n)+extra > t.limit() }
	holds := t.use + t.marked + b.g*st.pl.unitsOn(n)
	taken, _ := st.giveBack(b.tenant, over, func(u *unit) bool { return st.sameJob(u, b) }, false)
	if over(0) {
		for _, ui := range taken {
			st.untake(ui)
		}
		return 0, false
	}
	st.emitGiveBack(b.tenant, taken, t.t.Limit, func(m *msg) {
		m.start("tenant ", t.t.Name, " would hold ").u(holds).s(" GPUs with ").s(b.d.Job.Ref.String()).s("/").s(b.d.Group).
			s(" on the GPUs set aside for it")
	}, func(a Action) { st.explainer.add(decision{kind: decideReady, ready: &a}) })
	st.place(b, n)
	return n, true
}

// placeWith takes b's victims out of the model cluster and places one
// allocation of b on node n: placeOne's answer when it preempts.
func (m *model) placeWith(b *bene, n int32, vs []victim) (int32, []victim, Reason, bool) {
	if b.deptOnly {
		// Reclaims on the department's account say so, with its use
		// before this demand (its victims are outside it).
		di := m.e.dept(b.tenant)
		for i := range vs {
			if vs[i].rule == RuleReclaim && vs[i].pool == 0 {
				vs[i].dept, vs[i].beneHolds = int32(di+1), int32(m.deptUse(di))
			}
		}
	}
	for i, v := range vs {
		vs[i].ui = m.take(v.ui) // the same unless a chain's order says otherwise
	}
	m.place(b, n)
	return n, vs, Reason{}, true
}

// emitVictims hands the victims chosen for one demand to the explainer:
// one action per victim job, group and rule, in the order they were
// chosen. A demand has few victims, so groups are gathered by scanning the
// rest of the list rather than through a map.
func (st *state) emitVictims(b *bene, victims []victim) {
	if len(victims) == 1 {
		st.markPlanned(st.jobOf(&st.units[victims[0].ui]))
		st.explainer.addVictims(b, victims)
		return
	}
	grouped := make([]bool, len(victims))
	for i, v := range victims {
		if grouped[i] {
			continue
		}
		group := append(st.group[:0], v)
		u := &st.units[v.ui]
		for j := i + 1; j < len(victims); j++ {
			if w := &victims[j]; !grouped[j] && w.rule == v.rule && st.sameJobGroup(u, &st.units[w.ui]) {
				group = append(group, *w)
				grouped[j] = true
			}
		}
		st.group = group
		st.markPlanned(st.jobOf(u))
		st.explainer.addVictims(b, group)
	}
}

// sameJobGroup reports whether two units belong to the same job and group
// (tags first: most pairs differ there).
func (c *cluster) sameJobGroup(u, w *unit) bool {
	return u.jobTag == w.jobTag && c.groupOf(u) == c.groupOf(w) && c.jobOf(u).Ref == c.jobOf(w).Ref
}

// backfillGrace is the grace of the policy pool the backfill unit runs in.
// A gang may span nodes of several pools, some of which the policy does
// not name (they have no grace of their own): the first node in a policy
// pool decides.
func (c *cluster) backfillGrace(u *unit) time.Duration {
	grace, found := time.Duration(0), false
	c.nodesOf(u, func(n int32, _ int) {
		if p := c.poolOf[n]; !found && p > 0 && int(p) < len(c.e.poolGrace) {
			grace, found = c.e.poolGrace[p], true
		}
	})
	return grace
}

func (c *cluster) firstNode(u *unit) int32 {
	if u.gang >= 0 {
		return c.gangs[u.gang].spread[0].node
	}
	return u.node
}

// checkpoint returns the signal and grace for a victim: none and zero for a
// job that opts out of checkpointing.
func (e *Engine) checkpoint(job *Job, grace time.Duration) (string, time.Duration) {
	sig := e.p.Preemption.CheckpointSignal
	if job.Checkpoint != "" {
		sig = job.Checkpoint
	}
	if sig == "" || sig == policy.CheckpointNone || grace <= 0 {
		return "", 0
	}
	return sig, grace
}

// emit adds an action decided outside the serve pass (which hands its
// decisions to the explainer).
func (o *output) emit(a Action) {
	o.out.Actions = appendAction(o.out.Actions, a)
}

// appendAction appends a to a plan's actions, doubling their room when it
// runs out. Append grows a large slice by a quarter at a time, which
// copies a plan of thousands of actions many times; room for every
// waiting demand up front would clear megabytes for the few actions of a
// plan with a long queue that is mostly held already.
func appendAction(actions []Action, a Action) []Action {
	if len(actions) == cap(actions) {
		actions = slices.Grow(actions, max(16, len(actions)))
	}
	return append(actions, a)
}

// wait lists count allocations of d as waiting, for why. Out of line:
// inlined, its Waiting literal took some 600 bytes of code in serve and
// served at each of their four calls, code the loop serving every demand
// fetched again for each.
//
//go:noinline
func (o *output) wait(d *Demand, count int, why Reason) {
	if o.out.Waiting == nil {
		// Most of a long queue stays waiting: room for every demand at
		// once (each waits once at most) rather than growing a step at a
		// time.
		o.out.Waiting = make([]Waiting, 0, len(o.m.s.Waiting))
	}
	o.out.Waiting = append(o.out.Waiting, Waiting{Job: d.Job.Ref, Group: d.Group,
		GPUs: count * d.GPUsPerAlloc, Held: true, Reason: why})
}
