package engine

import "time"

// A victim freed for other work gets a checkpoint grace: the policy's
// preemption.grace, or its pool's grace when backfill is taken back. An
// urgent tier (policy.Tier.PreemptGrace) caps it for victims freed for its
// own work: serving cannot wait minutes for a training job to checkpoint.
// Preemptions made for no other work (limits, idle rules) keep theirs.

// victimGrace returns the grace unit u gets when freed for b under rule,
// and the grace it would get were b's tier not urgent.
func (c *cluster) victimGrace(b *bene, u *unit, rule Rule) (grace, usual time.Duration) {
	usual = c.e.p.Preemption.Grace
	if rule == RuleBackfill {
		usual = c.backfillGrace(u)
	}
	return c.e.tiers[b.tier].t.CapGrace(usual), usual
}

// graceNote says, for a victim's reason, that b's tier cut its grace
// short: "; grace 0s: inference work waits for no checkpoint". It is empty
// when the victim got its usual grace, or would have had none anyway (its
// job takes no checkpoint signal).
func (o *output) graceNote(b *bene, job *Job, grace, usual time.Duration) string {
	if grace >= usual {
		return ""
	}
	if sig, _ := o.m.e.checkpoint(job, usual); sig == "" {
		return ""
	}
	tier := o.m.e.tiers[b.tier].name
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
