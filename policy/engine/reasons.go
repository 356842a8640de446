package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Reasons are what users read in the Nomad UI, so each one carries the
// numbers behind the decision. A large plan carries tens of thousands of
// them, so the frequent ones are assembled in a buffer the plan reuses
// (msg): one allocation per reason, for its final text, where fmt or
// concatenation allocated for every number and every part.

// msg is a reason's text being assembled.
type msg struct{ b []byte }

// s appends strings.
//
//go:noinline
func (m *msg) s(parts ...string) *msg {
	for _, p := range parts {
		m.b = append(m.b, p...)
	}
	return m
}

// n appends a number.
//
//go:noinline
func (m *msg) n(i int) *msg {
	m.b = strconv.AppendInt(m.b, int64(i), 10)
	return m
}

// gpus appends "1 GPU" or "4 GPUs".
//
//go:noinline
func (m *msg) gpus(n int) *msg {
	if n == 1 {
		return m.s("1 GPU")
	}
	return m.n(n).s(" GPUs")
}

// dur appends a duration as appendDuration writes it.
//
//go:noinline
func (m *msg) dur(d time.Duration) *msg {
	m.b = appendDuration(m.b, d)
	return m
}

// demand appends a demand's job and group: "ns/job/group".
//
//go:noinline
func (m *msg) demand(d *Demand) *msg {
	return m.s(d.Job.Ref.Namespace, "/", d.Job.Ref.ID, "/", d.Group)
}

// start begins a new text in m's buffer.
//
//go:noinline
func (m *msg) start(parts ...string) *msg {
	m.b = m.b[:0]
	return m.s(parts...)
}

// reason ends a text: a Reason that owns a copy of it.
//
//go:noinline
func (m *msg) reason(r Rule) Reason { return Reason{r, string(m.b)} }

func (o *output) victimReason(m *msg, b *bene, v victim, gpus int) Reason {
	u := &o.m.units[v.ui]
	// Only the tenants' policies: their use changes while this is written.
	vt, bt := o.m.tenants[u.tenant].t, o.m.tenants[b.tenant].t
	switch v.rule {
	case RuleReclaim:
		if v.pool > 0 {
			return o.poolReclaimReason(m, b, v, gpus)
		}
		if v.dept > 0 {
			return o.deptReclaimReason(m, b, v, gpus)
		}
		m.start("tenant ", vt.Name, " holds ").gpusU(v.holdsPrev).s(", reserve ").n(vt.Reserve).s(": reclaiming ")
		if !o.where(m, u, gpus) {
			m.n(gpus)
		}
		m.s(" for ").demand(b.d).
			s(" (tenant ", bt.Name, " holds ").u(b.holds).s(", reserve ").n(bt.Reserve).s(")")
		o.exposedNote(m, u)
		o.protectedNote(m, u, RuleReclaim)
		return m.reason(RuleReclaim)
	case RulePriority:
		vtier, btier := &o.m.e.tiers[u.tier], &o.m.e.tiers[b.tier] // read in place, not copied (64 bytes each)
		m.start("tier ", vtier.name, " (priority ").n(u.prio).s(") yields ")
		if !o.where(m, u, gpus) {
			m.gpus(gpus)
		}
		m.s(" to ").demand(b.d).
			s(", tier ", btier.name, " (priority ").n(b.prio).s(")")
		switch {
		case u.tenant == b.tenant:
		case v.holdsPrev > o.m.tenants[u.tenant].reserve:
			m.s("; tenant ", vt.Name, " holds ").gpusU(v.holdsPrev).s(", above its reserve of ").n(vt.Reserve)
		default:
			m.s("; tenant ", vt.Name, " holds ").gpusU(v.holdsPrev).s(", within its reserve of ").n(vt.Reserve).
				s(", but tier ", btier.name, " may preempt ", vtier.name, " within reserves (preempts_reserved)")
		}
		if v.room {
			m.s("; tenant ", vt.Name, " holds ").gpusU(v.holdsPrev).s(", limit ").n(vt.Limit).
				s(": they make room under it for ").demand(b.d).s(", which goes on free GPUs")
		}
		o.exposedNote(m, u)
		o.protectedNote(m, u, RulePriority)
		return m.reason(RulePriority)
	case RuleBackfill:
		pool := o.m.pools[o.m.poolOf[o.m.firstNode(u)]]
		m.start("node pool ", pool, " is kept for tier ", o.m.e.tiers[b.tier].name,
			": backfill by tier ", o.m.e.tiers[u.tier].name, " gives ").gpus(gpus).s(" back to ").demand(b.d)
		o.protectedNote(m, u, RuleBackfill)
		return m.reason(RuleBackfill)
	case RuleFairShare:
		return o.fairReclaimReason(m, b, v, gpus)
	case RuleIdle:
		r := o.idleReason(m, u, b)
		var note msg
		if o.protectedNote(&note, u, RuleIdle); len(note.b) > 0 {
			r.Message += string(note.b)
		}
		return r
	}
	return m.start("preempted for ").demand(b.d).reason(v.rule)
}

// poolReclaimReason explains a reclaim within a quota pool: "tenant
// research holds 3 GPUs in pool h100, reserve 0 there: reclaiming 2 H100
// GPUs on node gpu-7 for product/nb/main (tenant product holds 0 in pool
// h100, reserve 2 there)".
func (o *output) poolReclaimReason(m *msg, b *bene, v victim, gpus int) Reason {
	u := &o.m.units[v.ui]
	qi := int(v.pool - 1)
	pool := o.m.e.quotaPools[qi].name
	reserve, bReserve := o.m.e.poolReserve(u.tenant, qi), o.m.e.poolReserve(b.tenant, qi)
	m.start("tenant ", o.m.tenants[u.tenant].t.Name, " holds ").gpusU(v.holdsPrev).s(" in pool ", pool, ", reserve ").u(reserve).
		s(" there: reclaiming ")
	if !o.where(m, u, gpus) {
		m.n(gpus)
	}
	m.s(" for ").demand(b.d).s(" (tenant ", o.m.tenants[b.tenant].t.Name, " holds ").u(int(v.beneHolds)).
		s(" in pool ", pool, ", reserve ").u(bReserve).s(" there)")
	o.exposedNote(m, u)
	o.protectedNote(m, u, RuleReclaim)
	return m.reason(RuleReclaim)
}

// where writes, when the cluster has several GPU models, which GPUs a
// victim frees and where: "2 H100 GPUs on node gpu-7" (a gang spread over
// nodes: "on 3 nodes"). It reports whether it wrote anything: with one
// model the reason says only how many.
func (o *output) where(m *msg, u *unit, gpus int) bool {
	n := o.m.firstNode(u)
	model := o.m.pl.modelOf(n)
	if u.gang >= 0 {
		for _, ng := range o.m.gangs[u.gang].spread {
			if o.m.pl.modelOf(ng.node) != model {
				model = "" // a gang across models: how many GPUs is all there is to say
			}
		}
	}
	if model == "" {
		return false
	}
	if per := o.m.pl.unitsOn(n); per != gpuUnit {
		// MIG instances: how many, and the GPUs they make.
		m.n(gpus).s(" ", model, " instance")
		if gpus != 1 {
			m.s("s")
		}
		m.s(" (").gpusU(gpus * per).s(")")
	} else {
		m.n(gpus).s(" ", model, " GPU")
		if gpus != 1 {
			m.s("s")
		}
	}
	if u.gang >= 0 && len(o.m.gangs[u.gang].spread) > 1 {
		return m.s(" on ").n(len(o.m.gangs[u.gang].spread)).s(" nodes") != nil
	}
	return m.s(" on node ", o.m.nodeName(n)) != nil
}

// nodeName is how reasons name node n: its name, else its ID.
func (c *cluster) nodeName(n int32) string {
	if name := c.nodes[n].Name; name != "" {
		return name
	}
	return c.nodes[n].ID
}

func (o *output) idleReason(m *msg, u *unit, b *bene) Reason {
	r := o.m.e.idleRule(u)
	is := o.m.idleOf(u, r)
	m.start("GPU utilisation ", percent(is.mean), "% (under ", percent(r.Threshold), "%) for ").
		dur(o.m.now.Sub(is.since)).s(" (idle rule ", r.Name, ": after ").dur(r.After).s(", mode ", string(r.Mode), ")")
	if b != nil {
		verb := " go to "
		if u.gpus == 1 {
			verb = " goes to "
		}
		m.s("; ").gpus(u.gpus).s(verb).demand(b.d).s(", which waits for ").n(b.g)
	}
	switch {
	case r.Action == "stop":
		m.s("; job stopped")
	case r.Mode == policy.IdleModeAlways:
		// Nothing may need its GPUs: it does not come back by itself
		// (waitsForOwner).
		ownerResumes(m.s("; job requeued: it "), r)
	default:
		m.s("; job requeued")
	}
	return m.reason(RuleIdle)
}

// percent prints a utilisation as fmt's %.0f would.
func percent(x float64) string { return strconv.FormatFloat(x, 'f', 0, 64) }

func (o *output) limitReason(b *bene, need int) Reason {
	t := &o.m.tenants[b.tenant]
	// A tenant at its limit often has a long queue behind it: while its
	// use stays the same, demands that need as many GPUs share the text.
	key := limitKey{tenant: b.tenant, use: t.use, marked: t.marked, need: need}
	if o.lastLimit.key != key || o.lastLimit.why.Rule == "" {
		o.lastLimit.key = key
		m := o.text.start("tenant ", t.t.Name, " holds ").u(t.use).s(" GPUs")
		if t.marked > 0 {
			m.s(" and ").u(t.marked).s(" being freed for its waiting work")
		}
		o.lastLimit.why = m.s(", limit ").n(t.t.Limit).s(": ").u(need).s(" more would exceed it").reason(RuleLimit)
	}
	return o.lastLimit.why
}

// limitKey is what a limit reason's text depends on besides the policy.
type limitKey struct{ tenant, use, marked, need int }

// capacityReason explains why b waits with nothing free and nothing to
// preempt; inWay is the unit its promotion does not let it take
// (nodeIndex.promotionBlocker), or -1.
func (o *output) capacityReason(b *bene, inWay int32) Reason {
	m := o.m
	t := m.tenants[b.tenant]
	where := " in any node"
	if p := b.d.NodePool; p != "" && p != "all" {
		where = " in node pool " + p
	}
	if b.d.Asks != "" && !m.pl.acceptsAll(b.d) {
		where = strings.TrimPrefix(where, " in any node") + " with " + b.d.Asks
	}
	if b.g > m.maxGPUs {
		return Reason{RuleCapacity, fmt.Sprintf("needs %s on one node; the largest node has %d", gpuCount(b.g), m.maxGPUs)}
	}
	return Reason{RuleCapacity, fmt.Sprintf("needs %s on one node%s; none free, and nothing may be preempted for tier %s (priority %d) of tenant %s (holds %s, reserve %d)",
		gpuCount(b.g), where, m.e.tiers[b.tier].name, b.prio, t.t.Name, unitsString(t.use), t.t.Reserve) + m.deptNote(b.tenant) +
		o.promotedOnly(b, inWay) + m.waitPromotionNote(b) + string(m.fairNote(nil, b.tenant))}
}

// promotedOnly says, for a promoted beneficiary, which work of a higher
// tier its promotion does not let it take (Engine.outranks): "; ml/b1
// (tier batch, priority 45) is not preempted for it: its priority 50 comes
// from promotion only (tier training runs at 40), and a promotion outranks
// only work of its own tier or below". "" when none is in its way (inWay
// -1: nodeIndex.promotionBlocker).
func (o *output) promotedOnly(b *bene, inWay int32) string {
	if inWay < 0 {
		return ""
	}
	m := o.m
	u := &m.units[inWay]
	return fmt.Sprintf("; %s (tier %s, priority %d) is not preempted for it: its priority %d comes from promotion only (tier %s runs at %d), and a promotion outranks only work of its own tier or below",
		m.jobOf(u).Ref, m.e.tiers[u.tier].name, u.prio, b.prio, m.e.tiers[b.tier].name, m.e.tiers[b.tier].priority)
}

// promotionBlocker is, for a promoted beneficiary, the first candidate of
// a higher tier than b's own that its promotion does not let it take; -1
// when none is in its way, or b is not promoted.
func (ix *nodeIndex) promotionBlocker(b *bene) int32 {
	m := ix.m
	base := m.e.tiers[b.tier].priority
	if b.prio <= base {
		return -1
	}
	// Candidates are sorted by priority within each segment: only those
	// of a priority from base+1 to below b's may be in its way.
	c := &ix.cands[b.pool]
	for seg := segOver; seg < segments; seg++ {
		from, _ := slices.BinarySearch(c.keys, segKey(seg, base+1))
		to, _ := slices.BinarySearch(c.keys, segKey(seg, b.prio))
		for _, ui := range c.units[from:to] {
			u := &m.units[ui]
			if u.taken || m.e.tiers[u.tier].priority <= base || m.sameJob(u, b) {
				continue
			}
			return ui
		}
	}
	return -1
}

// noNodeReason explains why a demand waits that no node may run: none is
// in its node pool, or none there has the GPUs it asks for.
func (c *cluster) noNodeReason(d *Demand) Reason {
	pool := d.NodePool != "" && d.NodePool != "all"
	if _, known := c.poolIdx[d.NodePool]; pool && !known {
		return Reason{RuleCapacity, "no client node is in node pool " + quote(d.NodePool)}
	}
	asks := d.Asks
	if asks == "" {
		asks = "the GPUs its device request names"
	}
	where := "no client node"
	if pool {
		where += " in node pool " + quote(d.NodePool)
	}
	return Reason{RuleCapacity, where + " has " + asks + ": nothing is preempted for it"}
}

// gpuCount writes "1 GPU" or "4 GPUs".
func gpuCount(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}

// drainingReason explains why waiting work that preempted is held while
// its victims checkpoint: "GPUs are being freed for it: 4 GPUs of
// research/train checkpoint for 2m; held until they stop, so that no other
// work takes them".
func (o *output) drainingReason(b *bene, vs []victim, grace time.Duration) Reason {
	gpus := 0
	for _, v := range vs {
		gpus += o.m.units[v.ui].gpus
	}
	// The output's buffer, and the reference in parts: a fresh message
	// grew its buffer a step at a time, and String made a string only to
	// be copied (a fleet plan writes thousands of these).
	m := &o.text
	first := o.m.jobOf(&o.m.units[vs[0].ui]).Ref
	m.start("GPUs are being freed for it: ").gpus(gpus).s(" of ", first.Namespace, "/", first.ID)
	if others := o.m.otherJobs(vs, first); others > 0 {
		m.s(" and ").n(others).s(" more job")
		if others > 1 {
			m.s("s")
		}
	}
	m.s(" checkpoint for up to ").dur(grace).s("; held until they stop, so that no other work takes them")
	return m.reason(RuleDraining)
}

// otherJobs counts the jobs among vs other than first.
func (c *cluster) otherJobs(vs []victim, first JobRef) int {
	var seen []JobRef
	for _, v := range vs {
		r := c.jobOf(&c.units[v.ui]).Ref
		if r != first && !slices.Contains(seen, r) {
			seen = append(seen, r)
		}
	}
	return len(seen)
}

// admitReason explains a resume; use is the tenant's GPUs with it.
func (o *output) admitReason(m *msg, b *bene, placed, use, fixed int, preempted bool) Reason {
	t := o.m.tenants[b.tenant].t
	how := "GPUs are free"
	if b.took {
		how = "GPUs set aside for work of a lower tier are free"
	}
	if preempted {
		how = "GPUs are being freed"
	}
	m.start(how, " and tenant ", t.Name)
	if t.Limit >= 0 {
		m.s(" stays within its limit of ").n(t.Limit)
	} else {
		m.s(" has no limit")
	}
	per := b.unitsPer
	if per == 0 {
		per = gpuUnit
	}
	m.s(" (").gpusU(use).s(" with these ").u(placed * b.g * per).s("): resuming ").n(placed).s(" allocation")
	if placed != 1 {
		m.s("s")
	}
	o.beyondNote(m, b, fixed)
	return m.reason(RuleAdmit)
}

// appendDuration writes durations the way people say them: "17m",
// "1h12m", "45s", never "17m0s".
func appendDuration(b []byte, d time.Duration) []byte {
	unit := func(n time.Duration, u string) { b = append(strconv.AppendInt(b, int64(n), 10), u...) }
	switch {
	case d >= time.Hour:
		d = d.Round(time.Minute)
		unit(d/time.Hour, "h")
		if m := (d % time.Hour) / time.Minute; m != 0 {
			unit(m, "m")
		}
		return b
	case d >= time.Minute:
		d = d.Round(time.Second)
		unit(d/time.Minute, "m")
		if s := (d % time.Minute) / time.Second; s != 0 {
			unit(s, "s")
		}
		return b
	}
	return append(b, d.Round(time.Second).String()...)
}

func itoa(i int) string { return strconv.Itoa(i) }

func quote(s string) string { return strconv.Quote(s) }
