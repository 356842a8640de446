package engine

import "time"

// A victim freed for other work gets a checkpoint grace: the policy's
// preemption.grace, or its pool's grace when backfill is taken back. An
// urgent tier (policy.Tier.PreemptGrace) caps it for victims freed for its
// own work: serving cannot wait minutes for a training job to checkpoint.
// Preemptions made for no other work (limits, idle rules) keep theirs.
//
// A victim with no more work at risk than the grace (started, or last
// checkpointed, no longer ago than it: Alloc.StartedAt, Alloc.CheckpointAt)
// is stopped at once whoever it is freed for: the grace would hold its
// GPUs, and the beneficiary, longer than the work a checkpoint could save,
// and the work it does after the signal is lost anyway (issue 31: on
// Philly with example.hcl, 5 % of the drains high-tier work waited on).

// victimGrace returns the grace unit u gets when freed for b under rule,
// and the grace it would get were b's tier not urgent.
func (c *cluster) victimGrace(b *bene, u *unit, rule Rule) (grace, usual time.Duration) {
	usual = c.e.p.Preemption.Grace
	if rule == RuleBackfill {
		usual = c.backfillGrace(u)
	}
	grace = c.e.tiers[b.tier].t.CapGrace(usual)
	if grace > 0 && c.atRiskFor(u) <= grace {
		return 0, usual // nothing a checkpoint would save is worth the wait
	}
	return grace, usual
}

// atRiskFor is the work a stop of u now loses: the time since its start or
// its last checkpoint, per GPU (atRisk).
func (c *cluster) atRiskFor(u *unit) time.Duration {
	return time.Duration(c.atRisk(u)) * time.Second
}

// graceNote says, for a victim's reason, that b's tier cut its grace
// short: "; grace 0s: inference work waits for no checkpoint", or that the
// victim had too little work at risk to be worth one: "; grace 0s: 1m30s
// of work since its start at risk, no more than the grace of 2m would
// hold its GPUs". It is empty when the victim got its usual grace, or
// would have had none anyway (its job takes no checkpoint signal).
func (o *output) graceNote(b *bene, u *unit, job *Job, grace, usual time.Duration) string {
	if grace >= usual {
		return ""
	}
	if sig, _ := o.m.e.checkpoint(job, usual); sig == "" {
		return ""
	}
	tier := o.m.e.tiers[b.tier].name
	if capped := o.m.e.tiers[b.tier].t.CapGrace(usual); grace <= 0 && capped > 0 {
		var m msg
		since := "start"
		if a := &o.m.s.Allocs[u.first]; u.gang < 0 && a.CheckpointAt.After(a.StartedAt) {
			since = "last checkpoint"
		} else if u.gang >= 0 {
			since = "start or checkpoint"
		}
		m.s("; grace 0s: ").dur(o.m.atRiskFor(u)).s(" of work since its ", since, " at risk, no more than the grace of ").dur(capped).
			s(" would hold its GPUs: stopped at once for ", tier, " work")
		return string(m.b)
	}
	if grace <= 0 {
		return "; grace 0s: " + tier + " work waits for no checkpoint"
	}
	var m msg
	m.s("; grace ").dur(grace).s(" (not ").dur(usual).s("): ", tier, " work waits no longer for a checkpoint")
	return string(m.b)
}

// drainFor is how long the victims chosen for b take to stop: the longest
// grace among them (0 when all stop at once: idle work, jobs that take no
// checkpoint signal, victims of an urgent tier).
func (c *cluster) drainFor(b *bene, vs []victim) time.Duration {
	longest := time.Duration(0)
	for _, v := range vs {
		if v.rule == RuleIdle {
			continue // released at once, without a grace
		}
		u := &c.units[v.ui]
		grace, _ := c.victimGrace(b, u, v.rule)
		if _, g := c.e.checkpoint(c.jobOf(u), grace); g > longest {
			longest = g
		}
	}
	return longest
}
