package engine

import (
	"fmt"
	"strconv"
	"time"
)

// Reasons are what users read in the Nomad UI, so each one carries the
// numbers behind the decision. The frequent ones are built by plain
// concatenation rather than fmt: a large plan carries tens of thousands of
// them, and fmt's boxing of every number made them a tenth of the work.

func (st *state) victimReason(b *bene, v victim, gpus int) Reason {
	u := &st.units[v.ui]
	vt := st.tenants[u.tenant].t
	bt := st.tenants[b.tenant]
	forWhat := b.d.Job.Ref.String() + "/" + b.d.Group
	switch v.rule {
	case RuleReclaim:
		return Reason{RuleReclaim, "tenant " + vt.Name + " holds " + gpusN(v.holdsPrev) + ", reserve " + itoa(vt.Reserve) +
			": reclaiming " + itoa(gpus) + " for " + forWhat +
			" (tenant " + bt.t.Name + " holds " + itoa(b.holds) + ", reserve " + itoa(bt.t.Reserve) + ")"}
	case RulePriority:
		vtier, btier := st.e.tiers[u.tier], st.e.tiers[b.tier]
		msg := "tier " + vtier.name + " (priority " + itoa(u.prio) + ") yields " + gpusN(gpus) + " to " + forWhat +
			", tier " + btier.name + " (priority " + itoa(b.prio) + ")"
		if u.tenant != b.tenant {
			msg += "; tenant " + vt.Name + " holds " + gpusN(v.holdsPrev) + ", above its reserve of " + itoa(vt.Reserve)
		}
		return Reason{RulePriority, msg}
	case RuleBackfill:
		pool := st.pools[st.poolOf[u.firstNode()]]
		return Reason{RuleBackfill, "node pool " + pool + " is kept for tier " + st.e.tiers[b.tier].name +
			": backfill by tier " + st.e.tiers[u.tier].name + " gives " + gpusN(gpus) + " back to " + forWhat}
	case RuleIdle:
		return st.idleReason(u, b)
	}
	return Reason{v.rule, "preempted for " + forWhat}
}

func (st *state) idleReason(u *unit, b *bene) Reason {
	r := u.idle.rule
	msg := "GPU utilisation " + percent(u.idle.mean) + "% (under " + percent(r.Threshold) + "%) for " +
		roundDuration(st.now.Sub(u.idle.since)) + " (idle rule " + r.Name + ": after " + roundDuration(r.After) +
		", mode " + string(r.Mode) + ")"
	if b != nil {
		verb := " go to "
		if u.gpus == 1 {
			verb = " goes to "
		}
		msg += "; " + gpusN(u.gpus) + verb + b.d.Job.Ref.String() + "/" + b.d.Group + ", which waits for " + itoa(b.g)
	}
	if r.Action == "stop" {
		msg += "; job stopped"
	} else {
		msg += "; job requeued"
	}
	return Reason{RuleIdle, msg}
}

// percent prints a utilisation as fmt's %.0f would.
func percent(x float64) string { return strconv.FormatFloat(x, 'f', 0, 64) }

func (st *state) limitReason(b *bene, need int) Reason {
	t := st.tenants[b.tenant]
	return Reason{RuleLimit, fmt.Sprintf("tenant %s holds %d GPUs, limit %d: %d more would exceed it",
		t.t.Name, t.use, t.t.Limit, need)}
}

func (st *state) capacityReason(b *bene) Reason {
	t := st.tenants[b.tenant]
	where := "any node"
	if b.pool != 0 {
		where = "node pool " + st.pools[b.pool]
	}
	if b.g > st.maxGPUs {
		return Reason{RuleCapacity, fmt.Sprintf("needs %d GPUs on one node; the largest node has %d", b.g, st.maxGPUs)}
	}
	return Reason{RuleCapacity, fmt.Sprintf("needs %d GPUs on one node in %s; none free, and nothing may be preempted for tier %s (priority %d) of tenant %s (holds %d, reserve %d)",
		b.g, where, st.e.tiers[b.tier].name, b.prio, t.t.Name, t.use, t.t.Reserve)}
}

func (st *state) admitReason(b *bene, placed int, preempted bool) Reason {
	t := st.tenants[b.tenant]
	how := "GPUs are free"
	if preempted {
		how = "GPUs are being freed"
	}
	within := "has no limit"
	if t.t.Limit >= 0 {
		within = "stays within its limit of " + itoa(t.t.Limit)
	}
	return Reason{RuleAdmit, how + " and tenant " + t.t.Name + " " + within + " (" + gpusN(t.use) + " with these " +
		itoa(placed*b.g) + "): resuming " + allocsN(placed)}
}

// roundDuration prints durations the way people say them: "17m", "1h12m",
// "45s", never "17m0s".
func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		d = d.Round(time.Minute)
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		if m == 0 {
			return itoa(int(h)) + "h"
		}
		return itoa(int(h)) + "h" + itoa(int(m)) + "m"
	case d >= time.Minute:
		d = d.Round(time.Second)
		m, s := d/time.Minute, (d%time.Minute)/time.Second
		if s == 0 {
			return itoa(int(m)) + "m"
		}
		return itoa(int(m)) + "m" + itoa(int(s)) + "s"
	}
	return d.Round(time.Second).String()
}

func itoa(i int) string { return strconv.Itoa(i) }

// allocsN writes "1 allocation", "4 allocations".
func allocsN(n int) string {
	if n == 1 {
		return "1 allocation"
	}
	return strconv.Itoa(n) + " allocations"
}

// gpusN writes "1 GPU", "4 GPUs".
func gpusN(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return strconv.Itoa(n) + " GPUs"
}

func quote(s string) string { return strconv.Quote(s) }
