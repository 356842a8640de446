package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// A job's owner snoozes its idle rule with `steward snooze JOB 2h` (or the
// "keep-my-notebook" action in the Nomad UI): a request like a pause
// (requests.go), carried out by the leader. Until the snooze ends, the
// rule does not reclaim the job's GPUs however idle they are; a snooze
// longer than the rule's max_snooze is cut to it. The snooze lives in the
// job's state (JobState.Snooze), so it outlasts a controller restart, and
// reaches the engine through the snapshot (engine.Job.Snooze).

// SnoozeState is a snooze of the job's idle rule.
type SnoozeState struct {
	// At is when the controller carried the request out (never the time
	// the request claims: its writer is the tenant); Until is when the
	// snooze ends, already cut to max_snooze.
	At    time.Time `json:"at"`
	Until time.Time `json:"until"`
	// Asked is the duration the request asked for, for the record.
	Asked time.Duration `json:"asked"`
	// Since is when this run of snoozes began: a snooze asked for while
	// one is in force, or within the rule's after of its end (before the
	// job could have been idle that long again), continues the run, and
	// a run ends at most max_snooze after Since. Without it, asking again
	// every few hours would keep idle GPUs for good: the cap is the
	// operator's, not the tenant's. Zero in states written before it:
	// At.
	Since time.Time `json:"since,omitzero"`
	// Ended: the snooze has ended and its record says so; it is kept
	// only to continue its run.
	Ended bool `json:"ended,omitempty"`
	// By says where the request came from ("a request in namespace ml").
	By string `json:"by"`
}

// snoozeItem is the record's key for a snooze in force.
const snoozeItem = "steward_snooze"

// engineSnooze is what the engine needs of a state's snooze.
func engineSnooze(st *JobState) engine.Snooze {
	if st == nil || st.Snooze == nil {
		return engine.Snooze{}
	}
	// The run's start: a max_snooze lowered since cuts the whole run.
	return engine.Snooze{At: st.Snooze.runStart(), Until: st.Snooze.Until}
}

// snoozeDecision works out what a snooze request does: the new snooze
// (nil: none, the request cancels one or is refused) and the decision's
// reason. err says why a request is refused. It is pure: the tests call
// it directly.
func snoozeDecision(rule *policy.IdleRule, prev *SnoozeState, job jobKey, duration string, by string, now time.Time) (*SnoozeState, engine.Reason, error) {
	if rule == nil {
		return nil, engine.Reason{}, fmt.Errorf("no idle rule covers %s: there is nothing to snooze", job)
	}
	asked, err := time.ParseDuration(duration)
	switch {
	case err != nil:
		return nil, engine.Reason{}, fmt.Errorf("snooze of %s: duration %q is no duration such as \"2h\" or \"90m\"", job, duration)
	case asked < 0:
		return nil, engine.Reason{}, fmt.Errorf("snooze of %s: duration %s is negative", job, duration)
	case asked == 0:
		return nil, engine.Reason{Rule: "snooze", Message: fmt.Sprintf("idle reclaim snooze ended by %s: idle rule %s applies again", by, rule.Name)}, nil
	case rule.MaxSnooze == 0:
		return nil, engine.Reason{}, fmt.Errorf("idle rule %s allows no snooze (max_snooze 0s): %s is not snoozed", rule.Name, job)
	}
	since := now
	if start := prev.runStart(); !start.IsZero() && now.Before(prev.Until.Add(rule.After)) {
		since = start
	}
	until := now.Add(min(asked, since.Add(rule.MaxSnooze).Sub(now)))
	if !until.After(now) {
		return nil, engine.Reason{}, fmt.Errorf("idle rule %s allows snoozes of at most %s in a row, and %s has been snoozed since %s: "+
			"it can be snoozed again once it has been busy, or idle for %s after the snooze ends",
			rule.Name, shortDuration(rule.MaxSnooze), job, since.UTC().Format("15:04 UTC"), shortDuration(rule.After))
	}
	s := &SnoozeState{At: now, Since: since, Until: until, Asked: asked, By: by}
	return s, engine.Reason{Rule: "snooze", Message: snoozeText(s, rule, now)}, nil
}

// runStart is when the run of snoozes s belongs to began (zero: none).
func (s *SnoozeState) runStart() time.Time {
	if s == nil {
		return time.Time{}
	}
	if s.Since.IsZero() {
		return s.At
	}
	return s.Since
}

// snoozeText is how the record and the decision say a snooze: "idle
// reclaim snoozed until 15:30 UTC by request in namespace ml (asked for
// 2h; idle rule notebooks allows up to 4h)", or when cut "(asked for 10h,
// cut to 4h; idle rule notebooks allows up to 4h)".
func snoozeText(s *SnoozeState, rule *policy.IdleRule, now time.Time) string {
	end := engine.SnoozeEnd(engine.Snooze{At: s.runStart(), Until: s.Until}, rule)
	layout := "15:04 UTC"
	if y, m, d := end.UTC().Date(); y != now.UTC().Year() || m != now.UTC().Month() || d != now.UTC().Day() {
		layout = "Jan 2 15:04 UTC"
	}
	// The snooze granted, when shorter than asked: cut to max_snooze,
	// to what is left of the run, or by a max_snooze lowered since.
	cut := ""
	if end.Before(s.At.Add(s.Asked)) {
		cut = ", cut to " + shortDuration(end.Sub(s.At).Round(time.Second))
	}
	run := ""
	if start := s.runStart(); start.Before(s.At) {
		run = " in a row, snoozed since " + start.UTC().Format("15:04 UTC")
	}
	return fmt.Sprintf("idle reclaim snoozed until %s by %s (asked for %s%s; idle rule %s allows up to %s%s)",
		end.UTC().Format(layout), s.By, shortDuration(s.Asked), cut, rule.Name, shortDuration(rule.MaxSnooze), run)
}

// snoozeRecord is the record's line for the job's snooze, "" when none is
// in force (none, ended, or its job no longer covered by an idle rule).
func snoozeRecord(pol *policy.Policy, st *JobState, job *ObservedJob, now time.Time) string {
	if st.Snooze == nil {
		return ""
	}
	rule := pol.ResolveJob(job.Namespace, job.Meta).IdleRule
	if !now.Before(engine.SnoozeEnd(engineSnooze(st), rule)) {
		return ""
	}
	return snoozeText(st.Snooze, rule, now)
}

// snooze carries out a snooze request for a job its namespace names.
func (c *Controller) snooze(ctx context.Context, r *round, st *JobState, job *ObservedJob, duration, by string) {
	pol, _ := c.engineNow()
	rule := pol.ResolveJob(job.Namespace, job.Meta).IdleRule
	s, why, err := snoozeDecision(rule, st.Snooze, st.key(), duration, by, r.now)
	d := Decision{At: r.now, Kind: "snooze", Job: st.key().String(), Rule: "snooze", Reason: why.Message}
	defer func() { c.remember(d) }()
	if err != nil {
		c.log.Warn("snooze refused", "job", st.key(), "by", by, "error", err)
		d.Reason, d.Error = "refused", err.Error()
		return
	}
	if s == nil && st.Snooze != nil && r.now.Before(st.Snooze.Until) {
		// 0s ends the snooze now; its run is kept (endSnoozes forgets
		// it), so that asking again soon continues it.
		s = st.Snooze
		s.Until = r.now
	}
	st.Snooze = s
	if err := c.save(ctx, st); err != nil {
		c.log.Error("save snoozed job", "job", st.key(), "error", err)
		d.Error = err.Error()
		return
	}
	c.log.Info("snooze", "job", st.key(), "reason", why.Message)
	c.writeRecord(ctx, r, pol, st)
}

// endSnoozes says in their jobs' records that snoozes have ended, and
// forgets each once a new snooze would no longer continue its run (the
// rule's after past its end).
func (c *Controller) endSnoozes(ctx context.Context, r *round) {
	pol, _ := c.engineNow()
	for _, st := range c.sortedStates() {
		if st.Snooze == nil || r.now.Before(st.Snooze.Until) {
			continue
		}
		keep := time.Duration(0)
		if job := r.obs.Jobs[st.key()]; job != nil {
			if rule := pol.ResolveJob(job.Namespace, job.Meta).IdleRule; rule != nil {
				keep = rule.After
			}
		}
		forget := !r.now.Before(st.Snooze.Until.Add(keep))
		if !forget && st.Snooze.Ended {
			continue
		}
		if forget {
			st.Snooze = nil
		} else {
			st.Snooze.Ended = true
		}
		c.writeRecord(ctx, r, pol, st)
		if err := c.save(ctx, st); err != nil {
			c.log.Error("save the end of a snooze", "job", st.key(), "error", err)
		}
	}
}
