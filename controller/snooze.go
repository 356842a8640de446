package controller

import (
	"context"
	"fmt"
	"strconv"
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
	// Busy is the longest stretch in which the job's GPUs were busy (at
	// or above the idle rule's threshold, every sample of the stretch)
	// seen since the run began (busyStretch). The run ends only once it
	// reaches the rule's after: asked for again after mere wall-clock
	// time, with the GPUs idle all along, a snooze continues the run, so
	// a script asking every few hours cannot keep idle GPUs for good.
	Busy time.Duration `json:"busy,omitempty"`
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
		return nil, engine.Reason{Rule: engine.RuleSnooze, Message: fmt.Sprintf("idle reclaim snooze ended by %s: idle rule %s applies again", by, rule.Name)}, nil
	case rule.MaxSnooze == 0:
		return nil, engine.Reason{}, fmt.Errorf("idle rule %s allows no snooze (max_snooze 0s): %s is not snoozed", rule.Name, job)
	}
	since := now
	if start := prev.runStart(); !start.IsZero() && !prev.runOver(rule) {
		since = start
	}
	until := now.Add(min(asked, since.Add(rule.MaxSnooze).Sub(now)))
	if !until.After(now) {
		return nil, engine.Reason{}, fmt.Errorf("idle rule %s allows snoozes of at most %s in a row, and %s has been snoozed since %s: "+
			"it can be snoozed again once its GPUs have been busy (at or above %s%% utilisation) for %s in a row; the longest busy stretch since %s was %s",
			rule.Name, shortDuration(rule.MaxSnooze), job, since.UTC().Format("15:04 UTC"),
			strconv.FormatFloat(rule.Threshold, 'f', -1, 64), shortDuration(rule.After),
			since.UTC().Format("15:04 UTC"), shortDuration(prev.Busy.Round(time.Second)))
	}
	s := &SnoozeState{At: now, Since: since, Until: until, Asked: asked, By: by}
	return s, engine.Reason{Rule: engine.RuleSnooze, Message: snoozeText(s, rule, now)}, nil
}

// runOver reports whether the run of snoozes s belongs to has ended: its
// GPUs were busy for the rule's after in one stretch since it began. Time
// alone never ends a run (see Busy).
func (s *SnoozeState) runOver(rule *policy.IdleRule) bool {
	return s == nil || s.Busy >= rule.After
}

// busyStretch is the longest stretch of samples at or above threshold
// from since on: from the first busy sample of a stretch to its last. A
// single sample is a stretch of 0s: it proves nothing about "a while".
func busyStretch(samples []engine.Sample, threshold float64, since time.Time) time.Duration {
	var longest time.Duration
	var start time.Time
	for _, s := range samples {
		switch {
		case s.At.Before(since):
		case s.Util < threshold:
			start = time.Time{}
		case start.IsZero():
			start = s.At
		default:
			longest = max(longest, s.At.Sub(start))
		}
	}
	return longest
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
func (ac *actor) snooze(ctx context.Context, r *round, st *JobState, job *ObservedJob, duration, by string) {
	pol, _ := ac.engineNow()
	rule := pol.ResolveJob(job.Namespace, job.Meta).IdleRule
	s, why, err := snoozeDecision(rule, st.Snooze, st.key(), duration, by, r.now)
	d := Decision{At: r.now, Kind: RequestSnooze, Job: st.key().String(), Rule: string(engine.RuleSnooze), Reason: why.Message}
	defer func() { ac.remember(d) }()
	if err != nil {
		ac.log().Warn("snooze refused", "job", st.key(), "by", by, "error", err)
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
	if err := ac.save(ctx, st); err != nil {
		ac.log().Error("save snoozed job", "job", st.key(), "error", err)
		d.Error = err.Error()
		return
	}
	ac.log().Info("snooze", "job", st.key(), "reason", why.Message)
	ac.pub.writeRecord(ctx, r, pol, st)
}

// endSnoozes measures how long each snoozed job's GPUs have been busy
// since its run began, says in their jobs' records that snoozes have
// ended, and forgets each run once it is over (its GPUs busy for the
// rule's after: runOver), or its job or idle rule is gone.
func (ac *actor) endSnoozes(ctx context.Context, r *round) {
	pol, _ := ac.engineNow()
	for _, st := range ac.sortedStates() {
		if st.Snooze == nil {
			continue
		}
		var rule *policy.IdleRule
		if job := r.obs.Jobs[st.key()]; job != nil {
			rule = pol.ResolveJob(job.Namespace, job.Meta).IdleRule
		}
		busy := st.Snooze.Busy
		if rule != nil {
			for _, a := range r.obs.Allocs {
				if a.Namespace == st.Namespace && a.JobID == st.ID {
					busy = max(busy, busyStretch(recentSamples(ac.usage.history(a.ID), ac.usage.window), rule.Threshold, st.Snooze.runStart()))
				}
			}
		}
		changed := busy != st.Snooze.Busy
		st.Snooze.Busy = busy
		if r.now.Before(st.Snooze.Until) || st.Snooze.Ended && rule != nil && busy < rule.After {
			// In force, or its end already recorded: only the busy
			// time to keep (it outlasts the samples' window).
			if changed {
				if err := ac.save(ctx, st); err != nil {
					ac.log().Error("save a snoozed job's busy time", "job", st.key(), "error", err)
				}
			}
			continue
		}
		if rule == nil || busy >= rule.After {
			st.Snooze = nil
		} else {
			st.Snooze.Ended = true
		}
		ac.pub.writeRecord(ctx, r, pol, st)
		if err := ac.save(ctx, st); err != nil {
			ac.log().Error("save the end of a snooze", "job", st.key(), "error", err)
		}
	}
}
