package engine

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/gpu-steward/steward/policy"
)

// checkPriorities brings every job's Nomad priority back to its tier's (or
// its promoted priority): Nomad's own scheduler and preemption then rank
// jobs the way the policy does. A job that named a tier it does not get
// (one its tenant may not use, or one the policy lacks) is told so first:
// "tier inference is not allowed for tenant research: runs as training;
// tier training runs at priority 40; the job had priority 90".
func (st *state) checkPriorities() {
	seen := map[JobRef]bool{}
	check := func(job *Job, tier, tenant int) {
		if job.Priority == st.e.effectivePriority(tier, job) || seen[job.Ref] {
			return
		}
		seen[job.Ref] = true
		t := st.e.tiers[tier]
		why := fmt.Sprintf("tier %s runs at priority %d; the job had priority %d", t.name, t.priority, job.Priority)
		if _, problem := st.e.p.TenantTier(st.tenants[tenant].t, job.Tier); problem != "" {
			why = problem + "; " + why
		}
		st.emit(Action{Kind: SetPriority, Job: job.Ref, Priority: t.priority, Reason: Reason{RuleTier, why}})
	}
	for i := range st.units {
		if u := &st.units[i]; u.misranked {
			check(st.jobOf(u), u.tier, u.tenant) // the tier of that very job
		}
	}
	for i, r := range st.resolveWaiting() {
		check(&st.s.Waiting[i].Job, int(r.tier), int(r.tenant))
	}
}

// promote raises a starved demand's priority when the policy says so and
// returns its effective priority.
func (st *state) promote(d *Demand, tier int) int {
	prio, target, rule := st.promotion(d, tier)
	if rule == "" {
		return prio
	}
	pr := st.e.p.Preemption.Promote
	var why Reason
	if rule == RulePromoteRun {
		why = st.text.start("preempted ").n(len(d.Job.Preemptions)).s(" times (promote after ").n(pr.AfterPreemptions).
			s("): priority ").n(prio).s(" → ").n(target).reason(RulePromoteRun)
	} else {
		why = st.text.start("waiting ").dur(st.clock.since(d.Since)).s(" for ").gpus(demandGPUs(d)).s(" (promote after ").dur(pr.AfterWait).
			s("): priority ").n(prio).s(" → ").n(target).reason(RulePromoteAge)
	}
	st.emit(Action{Kind: Promote, Job: d.Job.Ref, Priority: target, Reason: why})
	return target
}

// promotion is a demand's effective priority and, when the policy
// promotes it now, the priority it is promoted to and the rule that does
// (else "").
func (c *cluster) promotion(d *Demand, tier int) (prio, target int, rule Rule) {
	prio = c.e.effectivePriority(tier, &d.Job)
	pr := c.e.p.Preemption.Promote
	target = promotedPriority(c.e.tiers[tier].priority, pr.Boost)
	if pr.Boost <= 0 || prio >= target {
		return prio, prio, ""
	}
	switch {
	case pr.AfterPreemptions > 0 && len(d.Job.Preemptions) >= pr.AfterPreemptions:
		return prio, target, RulePromoteRun
	case pr.AfterWait > 0 && !d.Since.IsZero() && c.clock.since(d.Since) >= pr.AfterWait:
		// (A demand that does not say since when it waits has not waited
		// long: the zero time is not a wait of 292 years.)
		return prio, target, RulePromoteAge
	}
	return prio, prio, ""
}

// liftPromoted ranks the running work of jobs this plan promotes (part of
// a job waits, part runs) at their promoted priority from the start of
// the plan, as the next plan will see it. Ranked at their old one, two
// such jobs of one tier each took the other's running allocations for
// their waiting ones in the same plan, and again in the next.
//
// Usually no promoted job runs: the units are tested against a bit set of
// the promoted jobs' tags, and only those that pass are looked up among
// the promoted, sorted by tag (no map per plan; nothing sorted when no
// unit passes).
func (m *model) liftPromoted() {
	if m.e.p.Preemption.Promote.Boost <= 0 || len(m.s.Waiting) == 0 || len(m.units) == 0 {
		return
	}
	type promoted struct {
		tag    uint64
		w      int32 // its index in Snapshot.Waiting
		target int32
	}
	var ps []promoted
	var seen *[liftBits / 64]uint64
	for i, r := range m.resolveWaiting() {
		d := &m.s.Waiting[i]
		if d.GPUsPerAlloc <= 0 || d.Count <= 0 || d.Job.Ref.ID == "" {
			continue // skipped by orderDemands
		}
		if _, target, rule := m.promotion(d, int(r.tier)); rule != "" {
			if seen == nil {
				seen = new([liftBits / 64]uint64)
			}
			tag := jobTag(d.Job.Ref)
			ps = append(ps, promoted{tag, int32(i), int32(target)})
			b := liftBit(tag)
			seen[b/64] |= 1 << (b % 64)
		}
	}
	if ps == nil {
		return
	}
	var hits []int32 // units that may be of a promoted job
	for ui := range m.units {
		if b := liftBit(m.units[ui].jobTag); seen[b/64]&(1<<(b%64)) != 0 {
			hits = append(hits, int32(ui))
		}
	}
	if hits == nil {
		return
	}
	// The promoted by tag: chains through ps from a power-of-two table of
	// heads, each chain in Snapshot.Waiting order (sorting 5,000
	// promoted demands and a binary search for each of 14,000 units
	// cost 5 M instructions of a fleet plan).
	lb := uint(bitsFor(2 * len(ps)))
	head := make([]int32, 1<<lb)
	for i := range head {
		head[i] = -1
	}
	next := make([]int32, len(ps))
	for i := len(ps) - 1; i >= 0; i-- {
		h := liftSlot(ps[i].tag, lb)
		next[i], head[h] = head[h], int32(i)
	}
	for _, ui := range hits {
		u := &m.units[ui]
		for i := head[liftSlot(u.jobTag, lb)]; i >= 0; i = next[i] {
			if ps[i].tag == u.jobTag && m.s.Waiting[ps[i].w].Job.Ref == m.jobOf(u).Ref {
				u.prio = max(u.prio, int(ps[i].target))
				break
			}
		}
	}
}

// bitsFor is the bits of the least power of two at least n (n ≥ 1).
func bitsFor(n int) int { return bits.Len(uint(n - 1)) }

// liftSlot is a job tag's chain in liftPromoted's table of 1<<b heads.
func liftSlot(tag uint64, b uint) uint64 { return (tag * 0x9e3779b97f4a7c15) >> (64 - b) }

// liftBits is the size of liftPromoted's bit set (8 KiB).
const (
	liftLog  = 16
	liftBits = 1 << liftLog
)

// liftBit is a job tag's bit in liftPromoted's set.
func liftBit(tag uint64) uint64 { return (tag * 0x9e3779b97f4a7c15) >> (64 - liftLog) }

// releaseIdleAlways releases the GPUs of work idle past an "always" rule.
// In a group of several allocations, only from the top of its chain down
// (chains.go): an idle allocation below one that is busy keeps its GPUs,
// as lowering the count would stop the busy one.
func (st *state) releaseIdleAlways() {
	release := func(ui int32) bool {
		u := &st.units[ui]
		if u.idle != idleAlways || u.taken || !st.chainNext(ui) || st.capped(u) || st.protectedJob(u) {
			return false
		}
		st.take(ui)
		job := st.jobOf(u)
		a := Action{Kind: IdleStop, Job: job.Ref, Group: st.groupOf(u), GPUs: u.gpus, Allocs: st.allocIDs(u, nil),
			Requeue: st.e.idleRule(u).Action == policy.IdleActionRequeue, Reason: st.idleReason(&st.text, u, nil)}
		st.markPlanned(job)
		st.emit(a)
		return true
	}
	for ui := range st.units {
		if !release(int32(ui)) || st.units[ui].chain < 0 {
			continue
		}
		// Down its chain while the next is idle too (it may come
		// before this one in the units' order).
		ch := &st.chains[st.units[ui].chain]
		for int(ch.next) < len(ch.units) && release(ch.units[ch.next]) {
		}
	}
}

// enforceLimits preempts a tenant's newest work (the lowest tier first
// among work started together) while it holds more than its limit: Nomad
// placed work between two plans (the controller always sees work after
// Nomad placed it), or the limit was lowered. What was placed last goes
// first: it made the tenant go over, and it has made the least progress.
// min_runtime does not apply. The eviction cap spares a job while work
// below the cap can bring the tenant back under its limit; where only
// capped work can, the limit wins over the cap (issue 29): a tenant that
// re-registers or re-scales its held work after each hold would otherwise
// run over its limit, exempt, for the rest of the hour. The cap protects
// work from other tenants' demands, never a tenant from its own limit.
func (st *state) enforceLimits() {
	for ti := range st.tenants {
		t := &st.tenants[ti]
		if t.use <= t.limit() {
			continue
		}
		holds := t.use
		over := func(extra int) bool { return t.use+extra > t.limit() }
		taken, capped := st.giveBack(ti, over, nil, false)
		if over(0) && capped > 0 {
			more, _ := st.giveBack(ti, over, nil, true)
			taken = append(taken, more...)
		}
		st.emitGiveBack(ti, taken, t.t.Limit, func(m *msg) { m.start("tenant ", t.t.Name, " holds ").u(holds).s(" GPUs") }, st.emit)
	}
	if st.e.depts != nil {
		st.enforceDeptLimits()
	}
	for ti := range st.tenants {
		st.enforcePoolLimits(ti)
	}
}

// giveBack takes tenant ti's newest preemptible work (the lowest tier first
// among work started together), other than what skip says, while over(0)
// reports it over its limit, then gives back what was not needed, newest
// choice first (over(x): still over were x more GPUs held). It returns the
// units taken, and the GPUs of work it could not take for the eviction cap.
// pastCap takes work at the eviction cap too (a limit over the cap).
func (m *model) giveBack(ti int, over func(extra int) bool, skip func(u *unit) bool, pastCap bool) (taken []int32, capped int) {
	return m.giveBackOf(ti, nil, over, skip, pastCap)
}

// giveBackOf is giveBack for the work of tenant ti, or, with ti -1, of the
// tenants in members (a department's: enforceDeptLimits).
func (m *model) giveBackOf(ti int, members []int, over func(extra int) bool, skip func(u *unit) bool, pastCap bool) (taken []int32, capped int) {
	var mine []int32
	for ui := range m.units {
		if u := &m.units[ui]; (u.tenant == ti || ti < 0 && slices.Contains(members, u.tenant)) && !u.taken && m.e.preemptible(u) && (skip == nil || !skip(u)) {
			if !pastCap && (m.capped(u) || m.protectedJob(u)) {
				// At the eviction cap, or protected by max_per_job:
				// last, and only when nothing else brings the tenant
				// under its limit.
				capped += int(u.units)
				continue
			}
			mine = append(mine, int32(ui))
		}
	}
	slices.SortStableFunc(mine, func(a, b int32) int {
		ua, ub := &m.units[a], &m.units[b]
		if c := cmp.Compare(ua.age, ub.age); c != 0 {
			return c // the newest first
		}
		return cmp.Compare(ua.prio, ub.prio)
	})
	for i := 0; i < len(mine) && over(0); {
		ui := mine[i]
		if m.units[ui].taken {
			i++ // taken in the place of another of its chain (chains.go)
			continue
		}
		if next := m.chainPeek(ui); !m.e.preemptible(&m.units[next]) {
			i++ // below work of its group that may not be preempted
			continue
		}
		// A chain gives its units in its order (chains.go), wherever
		// they run: for a limit in a pool, down to one in the pool, the
		// ones above it first. A unit another took the place of is
		// looked at again.
		for {
			got := m.take(ui)
			taken = append(taken, got)
			if got == ui || skip == nil || !skip(&m.units[got]) || !over(0) ||
				!m.e.preemptible(&m.units[m.chainPeek(ui)]) {
				break
			}
		}
	}
	for i := len(taken) - 1; i >= 0; i-- {
		// In a chain, the chain's last taken goes back: it takes the
		// place of this one in the list.
		if back := m.chainLast(taken[i]); !over(int(m.units[back].units)) {
			m.untake(taken[i])
			if back != taken[i] {
				taken[slices.Index(taken, back)] = taken[i]
			}
			taken = slices.Delete(taken, i, i+1)
		}
	}
	return taken, capped
}

// emitGiveBack preempts the units giveBack took from tenant ti, each with
// the reason head (who holds how much) followed by the limit, through emit.
func (st *state) emitGiveBack(ti int, taken []int32, limit int, head func(m *msg), emit func(Action)) {
	for _, ui := range taken {
		u := &st.units[ui]
		job := st.jobOf(u)
		head(&st.text)
		st.text.s(", limit ").n(limit).s(": giving back ").u(int(u.units))
		st.exposedNote(&st.text, u)
		st.protectedNote(&st.text, u, RuleLimit)
		if r, limit := int(u.recent), st.e.p.Preemption.MaxPerJobPerHour; limit > 0 && r >= limit {
			// Taken past the cap (enforceLimits): its reason says why.
			st.text.s(" (at the eviction cap of ").n(limit).
				s(" preemptions an hour, preempted ").n(r).s(" times in the last hour: a limit is kept whatever the cap)")
		}
		a := Action{Kind: Preempt, Job: job.Ref, Group: st.groupOf(u), GPUs: u.gpus, Requeue: true,
			Allocs: st.allocIDs(u, nil), Reason: st.text.reason(RuleLimit)}
		a.Signal, a.Grace = st.e.checkpoint(job, st.e.p.Preemption.Grace)
		st.markPlanned(job)
		emit(a)
	}
}

// finish completes the plan with the tenants' accounting.
func (st *state) finish() *Plan {
	fair := st.standings()
	for ti, t := range st.tenants {
		if t.use == 0 && t.waiting == 0 && t.t.Reserve == 0 && !st.e.isPolicyTenant(t.t) && (ti >= len(fair) || fair[ti].usage == 0) {
			continue
		}
		tu := TenantUsage{Tenant: t.t.Name, Reserve: t.t.Reserve,
			Limit: t.t.Limit, InUse: gpusOfUnits(t.use), Waiting: gpusOfUnits(t.waiting)}
		if ti < len(fair) {
			tu.UsageGPUHours, tu.FairShare, tu.UsedShare = fair[ti].usage/3600, fair[ti].fair, fair[ti].used
		}
		st.out.Tenants = append(st.out.Tenants, tu)
	}
	slices.SortFunc(st.out.Tenants, func(a, b TenantUsage) int { return cmp.Compare(a.Tenant, b.Tenant) })
	st.departmentUsage(fair)
	st.out.Actions = st.sc.ownActions(st.out.Actions)
	return &st.out
}

func (e *Engine) isPolicyTenant(t *policy.Tenant) bool {
	_, ok := e.p.Tenants[t.Name]
	return ok && e.p.Tenants[t.Name] == t
}
