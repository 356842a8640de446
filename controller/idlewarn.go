package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// Idle warnings (an idle rule's warn_before): the engine says which work
// to warn, the controller records when each allocation was warned (so the
// engine warns once per idle stretch, across restarts too), puts the
// warning in the job's record (where the job's template renders it into
// the file the steward-exec driver reads, which turns it into one task
// event), and sends it to the webhooks that take idle_warning.

// IdleWarning is the warning that stands for a job: its allocations are
// still idle since before it was given.
type IdleWarning struct {
	At        time.Time `json:"at"`
	Allocs    []string  `json:"allocs"` // short IDs
	ReclaimAt time.Time `json:"reclaim_at"`
	Reason    string    `json:"reason"`
}

// warnIdle records and reports one warning of the plan.
func (c *Controller) warnIdle(ctx context.Context, r *round, pol *policy.Policy, w engine.IdleWarning) {
	k := jobKey{w.Job.Namespace, w.Job.ID}
	job := r.obs.Jobs[k]
	if job == nil {
		return
	}
	st := c.state(k)
	if st.Warned == nil {
		st.Warned = map[string]time.Time{}
	}
	short := shortIDs(w.Allocs)
	for _, id := range short {
		st.Warned[id] = r.now
	}
	st.IdleWarning = &IdleWarning{At: r.now, Allocs: short, ReclaimAt: w.ReclaimAt, Reason: w.Reason.Message}
	n := noticeFor(pol, job, policy.NotifyIdleWarning, idleWarningAction, w.Group, w.GPUs, w.Reason, r.now)
	if n != nil {
		n.ReclaimAt = w.ReclaimAt
		c.addNotice(st, n)
	}
	c.log.Info(idleWarningAction, "job", k, "group", w.Group, "gpus", w.GPUs, "reclaim_at", w.ReclaimAt, "reason", w.Reason.Message)
	d := Decision{At: r.now, Kind: idleWarningAction, Job: w.Job.String(), Group: w.Group, GPUs: w.GPUs,
		Rule: string(w.Reason.Rule), Reason: w.Reason.Message}
	if err := c.save(ctx, st); err != nil {
		// Not recorded: the next plan warns again, with a new message.
		c.dropUnsaved(st, n)
		d.Error = err.Error()
		c.log.Error("save idle warning", "job", k, "error", err)
		r.failed++
	}
	c.remember(d)
}

// pruneIdleWarnings forgets when allocations that are gone were warned,
// and withdraws a job's warning once any of its allocations is busy again
// (its idle stretch began after the warning) or gone.
func (c *Controller) pruneIdleWarnings(r *round, pol *policy.Policy) {
	usage := c.usage.samples()
	for _, st := range c.states {
		for id := range st.Warned {
			if len(r.short[id]) == 0 {
				delete(st.Warned, id)
			}
		}
		w := st.IdleWarning
		if w == nil {
			continue
		}
		job := r.obs.Jobs[st.key()]
		var rule *policy.IdleRule
		if job != nil {
			rule = pol.ResolveJob(job.Namespace, job.Meta).IdleRule
		}
		stands := rule != nil
		for _, short := range w.Allocs {
			if !stands {
				break
			}
			alive := r.aliveOf([]string{short})
			if len(alive) == 0 {
				stands = false
				break
			}
			for _, id := range alive {
				since, idle := engine.IdleSince(usage[id], rule.Threshold)
				stands = stands && idle && !since.After(w.At)
			}
		}
		if !stands {
			st.IdleWarning = nil
		}
	}
}

// idleWarningItems are the record's keys for a standing warning: the
// reason, when it was given (the driver emits one task event per
// warning), and the allocations it is about.
func idleWarningItems(st *JobState, items map[string]string) {
	w := st.IdleWarning
	if w == nil {
		return
	}
	items["steward_idle_warning"] = w.Reason
	items["steward_idle_warning_at"] = w.At.UTC().Format(time.RFC3339Nano)
	items["steward_idle_warning_allocs"] = strings.Join(slices.Sorted(slices.Values(w.Allocs)), ",")
}
