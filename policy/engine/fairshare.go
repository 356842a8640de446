package engine

import (
	"math"
	"strconv"
	"time"
)

// Fair share over time (policy.Preemption.FairShareHalfLife). The engine
// remembers nothing between plans: the caller accounts each tenant's use
// of borrowed GPUs, decayed (DecayUsage), and passes it in Snapshot.Usage
// as of the plan's time. Between tenants whose waiting work the rest of
// the order ranks equal, the one that used the least per unit of weight
// goes first (shareRanks); capacity reasons say where the tenant stands.

// DecayUsage advances a tenant's decayed usage u (GPU-seconds) by dt
// during which it held borrowed GPUs (beyond its reserve), halving every
// halfLife: the exact integral of a constant rate over dt, so that rounds
// of any length account alike (two steps of dt/2 give one step of dt).
// halfLife 0 (off) returns u unchanged.
func DecayUsage(u, borrowed float64, dt, halfLife time.Duration) float64 {
	if halfLife <= 0 || dt <= 0 {
		return u
	}
	lambda := math.Ln2 / halfLife.Seconds()
	keep := math.Exp(-lambda * dt.Seconds())
	return u*keep + max(borrowed, 0)*(1-keep)/lambda
}

// standing is a tenant's use against its fair share, for reasons,
// Plan.Tenants and the order.
type standing struct {
	usage float64 // decayed borrowed GPU-seconds (Snapshot.Usage)
	// fair is its weight over the weights of the tenants counted (those
	// that used, hold or wait for GPUs); used its part of their usage.
	fair, used float64
	counted    bool
}

// ratio is how many times its fair share the tenant used (0 when nothing
// was used).
func (s standing) ratio() float64 {
	if s.fair <= 0 {
		return 0
	}
	return s.used / s.fair
}

// fairOn says whether the policy asks for fair share over time.
func (e *Engine) fairOn() bool { return e.p.Preemption.FairShareHalfLife > 0 }

// standings computes each tenant's standing once per plan, after the
// demands are ordered (their waiting GPUs counted).
func (l *ledger) standings() []standing {
	if l.fair != nil || !l.e.fairOn() {
		return l.fair
	}
	l.fair = make([]standing, len(l.tenants))
	var weights, usage float64
	for ti := range l.tenants {
		t := &l.tenants[ti]
		u := l.s.Usage[t.t.Name]
		if !(u > 0) || math.IsInf(u, 0) {
			u = 0
		}
		l.fair[ti].usage = u
		if u > 0 || t.use > 0 || t.waiting > 0 {
			l.fair[ti].counted = true
			weights += t.t.Weight
			usage += u
		}
	}
	for ti := range l.fair {
		s := &l.fair[ti]
		if !s.counted {
			continue
		}
		if weights > 0 {
			s.fair = l.tenants[ti].t.Weight / weights
		}
		if usage > 0 {
			s.used = s.usage / usage
		}
	}
	return l.fair
}

// usageKey orders tenants by decayed usage per unit of weight.
func (l *ledger) usageKey(ti int) uint64 {
	u := l.s.Usage[l.tenants[ti].t.Name]
	if !(u > 0) || math.IsInf(u, 0) {
		u = 0
	}
	return floatKey(u / l.tenants[ti].t.Weight)
}

// fairNote appends, for a tenant that used more than its fair share, where
// it stands: "; tenant research used 3.2× its fair share over time (41.3
// of 129.6 decayed borrowed GPU-hours, fair share 1/2 at weight 1;
// half-life 24h): tenants that used less go first". Nothing when fair
// share over time is off or the tenant used no more than its share.
func (l *ledger) fairNote(b []byte, ti int) []byte {
	s := l.standings()
	if s == nil || ti >= len(s) || !s[ti].counted || s[ti].ratio() <= 1.05 {
		return b
	}
	t := l.tenants[ti].t
	var total float64
	for i := range s {
		if s[i].counted {
			total += s[i].usage
		}
	}
	b = append(b, "; tenant "...)
	b = append(b, t.Name...)
	b = append(b, " used "...)
	b = strconv.AppendFloat(b, s[ti].ratio(), 'f', 1, 64)
	b = append(b, "× its fair share over time ("...)
	b = strconv.AppendFloat(b, s[ti].usage/3600, 'f', 1, 64)
	b = append(b, " of "...)
	b = strconv.AppendFloat(b, total/3600, 'f', 1, 64)
	b = append(b, " decayed borrowed GPU-hours, fair share "...)
	b = strconv.AppendFloat(b, 100*s[ti].fair, 'f', 0, 64)
	b = append(b, "% at weight "...)
	b = strconv.AppendFloat(b, t.Weight, 'g', -1, 64)
	b = append(b, "; half-life "...)
	b = appendDuration(b, l.e.p.Preemption.FairShareHalfLife)
	return append(b, "): tenants that used less go first"...)
}
