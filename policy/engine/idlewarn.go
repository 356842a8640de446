package engine

import (
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// IdleWarning tells a job's owners that an idle rule will release its GPUs
// soon: its rule's warn_before before the release, once per idle stretch.
// It changes nothing in the cluster; the caller records it (Alloc.
// IdleWarned), so that the next plans do not warn again.
type IdleWarning struct {
	Job    JobRef
	Group  string   // "" for a gang (the whole job)
	Allocs []string // the allocations whose GPUs would go back, sorted
	GPUs   int
	// Since is when the idle stretch began; ReclaimAt when the rule's
	// after is up (in mode pressure the GPUs go back then only if other
	// work waits for them).
	Since     time.Time
	ReclaimAt time.Time
	Reason    Reason
}

// idleWarnings warns of idle work whose rule releases its GPUs within its
// warn_before, unless the plan takes it already (the release itself then
// tells) or it was warned in this idle stretch: a warning given at or
// after the stretch began (Alloc.IdleWarned) on every member.
func (o *output) idleWarnings() {
	if !slices.ContainsFunc(o.m.e.p.Idle, func(r *policy.IdleRule) bool { return r.WarnBefore > 0 }) {
		return // no rule warns: no pass over the units
	}
	for ui := range o.m.units {
		u := &o.m.units[ui]
		rule := o.m.e.idleRule(u)
		if u.taken || rule == nil || rule.WarnBefore <= 0 {
			continue
		}
		idle, warned := true, true
		var since time.Time
		o.m.allocsOf(u, func(ai int32) {
			a := &o.m.s.Allocs[ai]
			s, ok := IdleSince(a.Usage, rule.Threshold)
			idle = idle && ok
			if s.After(since) {
				since = s
			}
			warned = warned && !a.IdleWarned.IsZero()
		})
		// A snooze puts the release off to its end: warn that long
		// before it instead, not while the snooze holds.
		reclaimAt := since.Add(rule.After)
		if end := SnoozeEnd(o.m.jobOf(u).Snooze, rule); end.After(reclaimAt) {
			reclaimAt = end
		}
		if !idle || o.m.now.Before(reclaimAt.Add(-rule.WarnBefore)) {
			continue
		}
		if warned {
			// Warned in this stretch only if every member was warned
			// since it began (the latest member's idleness).
			o.m.allocsOf(u, func(ai int32) { warned = warned && !o.m.s.Allocs[ai].IdleWarned.Before(since) })
			if warned {
				continue
			}
		}
		job := o.m.jobOf(u)
		o.out.Warnings = append(o.out.Warnings, IdleWarning{Job: job.Ref, Group: o.m.groupOf(u), Allocs: o.m.allocIDs(u, nil),
			GPUs: u.gpus, Since: since, ReclaimAt: reclaimAt, Reason: o.idleWarningReason(u, rule, since, reclaimAt)})
	}
}

// idleWarningReason: "GPU utilisation 2% (under 10%) for 10m (idle rule
// notebooks: after 15m, mode always): its 1 GPU goes back in 5m unless it
// gets busy; the job is then requeued, held until its owner resumes it".
func (o *output) idleWarningReason(u *unit, rule *policy.IdleRule, since, reclaimAt time.Time) Reason {
	m := &o.text
	is := o.m.idleOf(u, rule)
	m.start("GPU utilisation ", percent(is.mean), "% (under ", percent(rule.Threshold), "%) for ").dur(o.m.now.Sub(since)).
		s(" (idle rule ", rule.Name, ": after ").dur(rule.After).s(", mode ", string(rule.Mode), "): its ").gpus(u.gpus)
	verb, it := " go back", "them"
	if u.gpus == 1 {
		verb, it = " goes back", "it"
	}
	m.s(verb)
	if reclaimAt.After(since.Add(rule.After)) {
		m.s(" when its snooze ends")
	}
	left := reclaimAt.Sub(o.m.now)
	switch {
	case left > 0 && rule.Mode == policy.IdleModeAlways:
		m.s(" in ").dur(left).s(" unless it gets busy")
	case left > 0:
		m.s(" in ").dur(left).s(" if other work waits for ", it, ", unless it gets busy")
	default:
		m.s(" as soon as other work waits for ", it, ", unless it gets busy")
	}
	switch {
	case rule.Action == policy.IdleActionStop:
		m.s("; the job is then stopped")
	case rule.Mode == policy.IdleModeAlways:
		m.s("; the job is then requeued, held until its owner resumes it") // waitsForOwner
	default:
		m.s("; the job is then requeued")
	}
	return m.reason(RuleIdle)
}
