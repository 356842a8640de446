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

// IdleWarning is the warning that stands for a job: about its
// allocations that are still idle since before they were warned. At is
// when it was first given, which the driver takes as the warning's name:
// allocations of the job warned while it stands join it, and the driver
// of an allocation that was told already does not tell again.
type IdleWarning struct {
	At        time.Time `json:"at"`
	Allocs    []string  `json:"allocs"` // short IDs
	ReclaimAt time.Time `json:"reclaim_at"`
	Reason    string    `json:"reason"`
}

// warnedAt is when an allocation was warned, saved as unix seconds
// (rounded up, so that it is never before the warning): a gang's 64
// allocations take 1.4 KB rather than 2.5.
type warnedAt int64

func warnedTime(t time.Time) warnedAt {
	return warnedAt((t.UnixNano() + int64(time.Second) - 1) / int64(time.Second))
}

// time is the zero time for an allocation never warned.
func (w warnedAt) time() time.Time {
	if w == 0 {
		return time.Time{}
	}
	return time.Unix(int64(w), 0).UTC()
}

// warnIdle records and reports one warning of the plan.
func (ac *actor) warnIdle(ctx context.Context, r *round, pol *policy.Policy, w engine.IdleWarning) {
	k := jobKey{w.Job.Namespace, w.Job.ID}
	job := r.obs.Jobs[k]
	if job == nil {
		return
	}
	st := ac.state(k)
	if st.Warned == nil {
		st.Warned = map[string]warnedAt{}
	}
	short := shortIDs(w.Allocs)
	for _, id := range short {
		st.Warned[id] = warnedTime(r.now)
	}
	if iw := st.IdleWarning; iw != nil {
		for _, id := range short {
			if !slices.Contains(iw.Allocs, id) {
				iw.Allocs = append(iw.Allocs, id)
			}
		}
		slices.Sort(iw.Allocs)
		iw.ReclaimAt, iw.Reason = w.ReclaimAt, w.Reason.Message
	} else {
		st.IdleWarning = &IdleWarning{At: r.now, Allocs: short, ReclaimAt: w.ReclaimAt, Reason: w.Reason.Message}
	}
	n := noticeFor(pol, job, policy.NotifyIdleWarning, idleWarningAction, w.Group, w.GPUs, w.Reason, r.now)
	if n != nil {
		n.ReclaimAt = w.ReclaimAt
		ac.notices.addNotice(st, n)
	}
	ac.log().Info(idleWarningAction, "job", k, "group", w.Group, "gpus", w.GPUs, "reclaim_at", w.ReclaimAt, "reason", w.Reason.Message)
	d := Decision{At: r.now, Kind: idleWarningAction, Job: w.Job.String(), Group: w.Group, GPUs: w.GPUs,
		Rule: string(w.Reason.Rule), Reason: w.Reason.Message}
	if err := ac.save(ctx, st); err != nil {
		// Not recorded: the next plan warns again, with a new message.
		ac.notices.dropUnsaved(st, n)
		d.Error = err.Error()
		ac.log().Error("save idle warning", "job", k, "error", err)
		r.failed++
	}
	ac.remember(d)
}

// pruneIdleWarnings forgets when allocations that are gone were warned,
// and takes out of a job's warning each allocation that is gone or busy
// again (its idle stretch began after it was warned): the warning is
// withdrawn with the last.
func (ac *actor) pruneIdleWarnings(r *round, pol *policy.Policy) {
	usage := ac.usage.samples(pol)
	for _, st := range ac.states() {
		for id := range st.Warned {
			if len(r.aliveOf(st.key(), []string{id})) == 0 {
				delete(st.Warned, id)
			}
		}
		w := st.IdleWarning
		if w == nil {
			continue
		}
		var rule *policy.IdleRule
		if job := r.obs.Jobs[st.key()]; job != nil {
			rule = pol.ResolveJob(job.Namespace, job.Meta).IdleRule
		}
		w.Allocs = slices.DeleteFunc(w.Allocs, func(short string) bool {
			alive := r.aliveOf(st.key(), []string{short})
			if rule == nil || len(alive) == 0 {
				return true
			}
			warned := st.Warned[short].time()
			for _, id := range alive {
				if since, idle := engine.IdleSince(usage[id], rule.Threshold); !idle || since.After(warned) {
					return true
				}
			}
			return false
		})
		if len(w.Allocs) == 0 {
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
	items["steward_idle_warning_allocs"] = strings.Join(w.Allocs, ",")
}
