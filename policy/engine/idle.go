package engine

import (
	"time"

	"github.com/gpu-steward/steward/policy"
)

// IdleSince returns when the current idle stretch began: the time of the
// first sample after the last one at or above threshold (the first sample
// when none was). A single busy sample restarts the timer. ok is false when
// there are no samples or the latest one is busy.
func IdleSince(samples []Sample, threshold float64) (since time.Time, ok bool) {
	if len(samples) == 0 {
		return time.Time{}, false
	}
	last := len(samples) - 1
	if samples[last].Util >= threshold {
		return time.Time{}, false
	}
	i := last
	for i > 0 && samples[i-1].Util < threshold {
		i--
	}
	return samples[i].At, true
}

// meanUtil is the mean of the samples since a time, for reasons.
func meanUtil(samples []Sample, since time.Time) float64 {
	var sum float64
	var n int
	for _, s := range samples {
		if !s.At.Before(since) {
			sum += s.Util
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// waitsForOwner reports whether demand p, requeued by an idle rule in
// mode "always", waits held until its owner asks for it back, and why. A
// rule in mode always releases work idle for its after whether or not
// other work waits: resumed by itself onto the GPUs it just gave back, the
// same idle work would be stopped again after another after, and again,
// until the eviction cap stopped the loop. So it waits until its owner
// resumes it (Demand.OwnerResumed: then it takes free GPUs, and the rule
// may release it once more when it idles again) or snoozes the rule (the
// rule leaves it alone until the snooze ends). Work requeued in mode
// pressure gave its GPUs to waiting work, and resumes when GPUs are free
// again: the pressure has ended.
func (st *state) waitsForOwner(p pending) (Reason, bool) {
	d := p.d
	if !d.Requeued || d.OwnerResumed || !st.e.tiers[p.tier].preemptible {
		return Reason{}, false
	}
	rule := st.e.idle[p.tier][min(p.tenant, len(st.e.tenants))]
	if rule == nil || rule.Mode != policy.IdleModeAlways || st.now.Before(SnoozeEnd(d.Job.Snooze, rule)) {
		return Reason{}, false
	}
	m := &st.text
	ownerResumes(m.start("requeued by idle rule ", rule.Name, " (after ").dur(rule.After).s(", mode always): "), rule).
		s(" before it takes ").gpus(demandGPUs(d)).s(" again; resumed by itself it would idle and be stopped again")
	return m.reason(RuleIdle), true
}

// ownerResumes appends what brings back work an idle rule in mode always
// requeued: "waits held for its owner to resume it (steward resume) or
// snooze the rule (steward snooze, up to 8h)".
func ownerResumes(m *msg, rule *policy.IdleRule) *msg {
	m.s("waits held for its owner to resume it (steward resume")
	if rule.MaxSnooze > 0 {
		m.s(") or snooze the rule (steward snooze, up to ").dur(rule.MaxSnooze)
	}
	return m.s(")")
}
