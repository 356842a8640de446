package sim

import (
	"container/heap"
	"math"
	"time"
)

// Waking Steward when decayed usages cross (fair share over time, issue 31).
//
// The simulator plans on events only: arrivals, ends and the wake-ups of
// time-based rules. With fair_share_half_life set, the usages the engine
// orders tenants by keep changing between events (each decays, and grows
// with the GPUs its tenant borrows), so two moments pass unnoticed until
// some other event, hours later on a quiet day:
//
//   - two tenants swap places by decayed usage per unit of weight (their
//     waiting work's order flips, and whether one may reclaim from the
//     other by fair share: fairVictims compares the two);
//   - a tenant's part of the usage crosses fair_share_reclaim_above times
//     its fair part: fair-share reclaim from it becomes due (or stops).
//
// The real controller plans every interval whatever happens, so it acts
// at most one interval after such a moment; a wake-up at the moment
// (deferred to the plan interval like any other, settleSteward) models
// that, without planning on a clock tick.
//
// Between two events every tenant's usage follows one curve: with the
// GPUs it borrows now b (constant until the next event) and λ = ln 2 /
// half-life, u(τ) = u(0)·k + b·(1−k)/λ, k = e^(−λτ) (engine.DecayUsage).
// That is linear in k, and so is every difference or weighted sum of
// usages: each crossing is the root of a + g·k, found in closed form.

// fairCurve is a decayed usage as a function of k = e^(−λτ): a + g·k.
type fairCurve struct{ a, g float64 }

func curveOf(usage, borrowed, lambda float64) fairCurve {
	c := borrowed / lambda
	return fairCurve{a: c, g: usage - c}
}

func (c fairCurve) plus(d fairCurve, f float64) fairCurve {
	return fairCurve{a: c.a + f*d.a, g: c.g + f*d.g}
}

// root is the k in [kMin, 1) at which the curve crosses zero, if any. A
// root at k ≥ 1 is now or past: it changes nothing ahead.
func (c fairCurve) root(kMin float64) (float64, bool) {
	if c.g == 0 {
		return 0, false
	}
	k := -c.a / c.g
	return k, k >= kMin && k < 1
}

// fairTenant is what one tenant's usage does until the next event.
type fairTenant struct {
	usage    float64 // decayed borrowed GPU-seconds now
	borrowed float64 // GPUs held beyond its reserve now
	weight   float64
	dept     int  // its department, an index into fairCrossing.deptWeights; -1: none
	holds    bool // holds GPUs now
	waits    bool // has work waiting
}

// fairCrossing is the input of nextFairCrossing.
type fairCrossing struct {
	tenants     []fairTenant
	deptWeights []float64
	halfLife    time.Duration
	above       float64 // fair_share_reclaim_above; 0: off
	// horizon bounds how far ahead a crossing is looked for: beyond it
	// some event is all but sure to come first and to look again.
	horizon time.Duration
}

// nextFairCrossing returns how long from now until the earliest moment
// within the horizon at which (a) two tenants (or departments) that hold
// or wait for GPUs, one of them waiting, swap order by decayed usage per
// unit of weight, or (b) a tenant that holds or waits crosses above times
// its fair part of the usage (as the engine's standings count it: the
// tenants that used, hold or wait for GPUs). false: none, or fair share
// over time is off. Pure: the table-driven tests call it directly.
func nextFairCrossing(in fairCrossing) (time.Duration, bool) {
	if in.halfLife <= 0 || in.horizon <= 0 {
		return 0, false
	}
	lambda := math.Ln2 / in.halfLife.Seconds()
	kMin := math.Exp(-lambda * in.horizon.Seconds())
	best, found := 0.0, false // the largest root k: the earliest moment
	consider := func(c fairCurve) {
		if k, ok := c.root(kMin); ok && (!found || k > best) {
			best, found = k, true
		}
	}
	per := make([]fairCurve, len(in.tenants))
	depts := make([]fairCurve, len(in.deptWeights))
	deptHolds := make([]bool, len(in.deptWeights))
	deptWaits := make([]bool, len(in.deptWeights))
	for i, t := range in.tenants {
		c := curveOf(max(t.usage, 0), max(t.borrowed, 0), lambda)
		per[i] = fairCurve{a: c.a / t.weight, g: c.g / t.weight}
		if t.dept >= 0 {
			depts[t.dept] = depts[t.dept].plus(c, 1)
			deptHolds[t.dept] = deptHolds[t.dept] || t.holds || t.waits
			deptWaits[t.dept] = deptWaits[t.dept] || t.waits
		}
	}
	// (a) Tenants, and departments (whose order comes first), swapping.
	for i, ti := range in.tenants {
		for j := i + 1; j < len(in.tenants); j++ {
			tj := in.tenants[j]
			if (ti.holds || ti.waits) && (tj.holds || tj.waits) && (ti.waits || tj.waits) {
				consider(per[i].plus(per[j], -1))
			}
		}
	}
	for d := range depts {
		depts[d] = fairCurve{a: depts[d].a / in.deptWeights[d], g: depts[d].g / in.deptWeights[d]}
	}
	for d := range depts {
		for e := d + 1; e < len(depts); e++ {
			if deptHolds[d] && deptHolds[e] && (deptWaits[d] || deptWaits[e]) {
				consider(depts[d].plus(depts[e], -1))
			}
		}
		// A tenant in no department is a department of its own.
		for i, t := range in.tenants {
			if t.dept < 0 && deptHolds[d] && (t.holds || t.waits) && (deptWaits[d] || t.waits) {
				consider(depts[d].plus(per[i], -1))
			}
		}
	}
	if in.above > 0 {
		fairThreshold(in, lambda, consider)
	}
	if !found {
		return 0, false
	}
	return time.Duration(-math.Log(best) / lambda * float64(time.Second)), true
}

// fairThreshold considers (b): tenant t's ratio, (u_t / U) / (w_t / W)
// over the counted tenants, crosses above where u_t·W/w_t − above·U does.
func fairThreshold(in fairCrossing, lambda float64, consider func(fairCurve)) {
	var total fairCurve
	var weights float64
	for _, t := range in.tenants {
		if t.usage > 0 || t.holds || t.waits {
			total = total.plus(curveOf(max(t.usage, 0), max(t.borrowed, 0), lambda), 1)
			weights += t.weight
		}
	}
	for _, t := range in.tenants {
		if !t.holds && !t.waits {
			continue
		}
		c := curveOf(max(t.usage, 0), max(t.borrowed, 0), lambda)
		consider(fairCurve{}.plus(c, weights/t.weight).plus(total, -in.above))
	}
}

// fairWake is the one pending wake-up for a crossing.
type fairWake struct {
	pending bool
	at      time.Duration
	seq     uint64 // its event's seq, to take it out of the queue
	// depts: [tenant] its department's index in deptWeights, or -1.
	depts       []int
	deptWeights []float64
	tenants     []fairTenant // reused
}

// wakeForFairShare schedules the wake-up for the next crossing, replacing
// the pending one; with no half-life it does nothing. Called after each
// plan, once Nomad has placed what it admitted: the GPUs each tenant then
// holds are those of the stretch ahead. Not after instants with no plan
// (an arrival that just fits, an end while nothing waits): the controller
// too looks at usages only when it plans, and the next plan looks again.
// (Looking again at every instant was measured too, docs/evaluation.md:
// no better, and worse on Philly's full run.)
func (s *simulator) wakeForFairShare() {
	pol := s.pol.Preemption
	if pol.FairShareHalfLife <= 0 {
		return
	}
	w := &s.fairWake
	at, ok := time.Duration(0), false
	if len(s.queue)+len(s.heldList) > 0 { // nothing waits: no plan would follow
		var d time.Duration
		d, ok = nextFairCrossing(fairCrossing{tenants: s.fairTenants(), deptWeights: w.deptWeights,
			halfLife: pol.FairShareHalfLife, above: pol.FairShareReclaimAbove, horizon: pol.FairShareHalfLife})
		// On the next whole second, and never now: a crossing the
		// rounding puts a moment ahead is past by then, not found again.
		at = s.now + max(time.Second, (d+time.Second-1).Truncate(time.Second))
	}
	if w.pending && ok && w.at == at {
		return
	}
	s.cancelFairWake()
	if ok {
		s.schedule(event{at: at, kind: evWake, wake: eventWake{kind: wakeFair}})
		w.pending, w.at, w.seq = true, at, s.seq
	}
}

// cancelFairWake takes the pending wake-up out of the event queue.
func (s *simulator) cancelFairWake() {
	w := &s.fairWake
	if !w.pending {
		return
	}
	w.pending = false
	for i := range s.events {
		if s.events[i].seq == w.seq {
			heap.Remove(&s.events, i)
			return
		}
	}
}

// fairTenants is every tenant's usage, GPUs and department now.
func (s *simulator) fairTenants() []fairTenant {
	w := &s.fairWake
	m := s.m
	if len(w.depts) != len(m.tenants) {
		w.depts, w.deptWeights = w.depts[:0], w.deptWeights[:0]
		index := map[string]int{}
		for _, t := range m.tenants {
			d := s.pol.DepartmentOf(t.Name)
			if d == nil {
				w.depts = append(w.depts, -1)
				continue
			}
			if _, ok := index[d.Name]; !ok {
				index[d.Name] = len(w.deptWeights)
				w.deptWeights = append(w.deptWeights, d.Weight)
			}
			w.depts = append(w.depts, index[d.Name])
		}
	}
	w.tenants = w.tenants[:0]
	m.fair.grow(len(m.tenants))
	for t, ten := range m.tenants {
		use := m.tenantUse[t]
		w.tenants = append(w.tenants, fairTenant{usage: m.fair.usage[t], borrowed: float64(max(use-ten.Reserve, 0)),
			weight: ten.Weight, dept: w.depts[t], holds: use > 0, waits: m.tenantWaiting[t] > 0})
	}
	return w.tenants
}
