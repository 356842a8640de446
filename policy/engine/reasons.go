package engine

import (
	"fmt"
	"strconv"
	"time"
)

// Reasons are what users read in the Nomad UI, so each one carries the
// numbers behind the decision.

func (st *state) victimReason(b *bene, v victim, gpus int) Reason {
	u := &st.units[v.ui]
	vt := st.tenants[u.tenant].t
	bt := st.tenants[b.tenant]
	forWhat := fmt.Sprintf("%s/%s", b.d.Job.Ref, b.d.Group)
	switch v.rule {
	case RuleReclaim:
		return Reason{RuleReclaim, fmt.Sprintf("tenant %s holds %d GPUs, reserve %d: reclaiming %d for %s (tenant %s holds %d, reserve %d)",
			vt.Name, v.holdsPrev, vt.Reserve, gpus, forWhat, bt.t.Name, b.holds, bt.t.Reserve)}
	case RulePriority:
		vtier, btier := st.e.tiers[u.tier], st.e.tiers[b.tier]
		msg := fmt.Sprintf("tier %s (priority %d) yields %d GPUs to %s, tier %s (priority %d)",
			vtier.name, u.prio, gpus, forWhat, btier.name, b.prio)
		if u.tenant != b.tenant {
			msg += fmt.Sprintf("; tenant %s holds %d GPUs, above its reserve of %d", vt.Name, v.holdsPrev, vt.Reserve)
		}
		return Reason{RulePriority, msg}
	case RuleBackfill:
		pool := st.pools[st.poolOf[u.firstNode()]]
		return Reason{RuleBackfill, fmt.Sprintf("node pool %s is kept for tier %s: backfill by tier %s gives %d GPUs back to %s",
			pool, st.e.tiers[b.tier].name, st.e.tiers[u.tier].name, gpus, forWhat)}
	case RuleIdle:
		return st.idleReason(u, b)
	}
	return Reason{v.rule, "preempted for " + forWhat}
}

func (st *state) idleReason(u *unit, b *bene) Reason {
	r := u.idle.rule
	msg := fmt.Sprintf("GPU utilisation %.0f%% (under %.0f%%) for %s (idle rule %s: after %s, mode %s)",
		u.idle.mean, r.Threshold, roundDuration(st.now.Sub(u.idle.since)), r.Name, roundDuration(r.After), r.Mode)
	if b != nil {
		msg += fmt.Sprintf("; %d GPUs go to %s/%s, which waits for %d", u.gpus, b.d.Job.Ref, b.d.Group, b.g)
	}
	if r.Action == "stop" {
		msg += "; job stopped"
	} else {
		msg += "; job requeued"
	}
	return Reason{RuleIdle, msg}
}

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
	limit := "no limit"
	if t.t.Limit >= 0 {
		limit = fmt.Sprintf("limit %d", t.t.Limit)
	}
	how := "GPUs are free"
	if preempted {
		how = "GPUs are being freed"
	}
	return Reason{RuleAdmit, fmt.Sprintf("%s and tenant %s stays within its %s (holds %d with these %d): resuming %d allocation(s)",
		how, t.t.Name, limit, t.use, placed*b.g, placed)}
}

// roundDuration prints durations the way people say them: "17m", "1h12m",
// "45s", never "17m0s".
func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		d = d.Round(time.Minute)
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	case d >= time.Minute:
		d = d.Round(time.Second)
		m, s := d/time.Minute, (d%time.Minute)/time.Second
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	}
	return d.Round(time.Second).String()
}

func itoa(i int) string { return strconv.Itoa(i) }

func quote(s string) string { return strconv.Quote(s) }
