package controller

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// Start and finish messages (notify events start and finish), for jobs
// that name a recipient (steward.notify) that some per-job block takes:
// Slurm's --mail-type=BEGIN,END. A job's state remembers which it was
// sent (JobState.Life), so each goes once per job, across restarts and
// leaders; jobs no block would tell get no state for it.

// Life values: the start message was decided, then the finish.
const (
	lifeStarted  = "started"
	lifeFinished = "finished"
)

// ruleLifecycle is the rule of start and finish messages.
const ruleLifecycle = "lifecycle"

// lifecycleNotices decides the round's start and finish messages.
func (c *Controller) lifecycleNotices(ctx context.Context, r *round, pol *policy.Policy) {
	if !lifecycleWanted(pol) {
		return
	}
	type work struct{ live, running, gpus int }
	gpuWork := map[jobKey]*work{}
	for _, a := range r.obs.Allocs {
		if len(a.GPUIDs) == 0 {
			continue
		}
		k := jobKey{a.Namespace, a.JobID}
		w := gpuWork[k]
		if w == nil {
			w = &work{}
			gpuWork[k] = w
		}
		w.live++
		if a.ClientStatus == "running" {
			w.running++
			w.gpus += len(a.GPUIDs)
		}
	}
	for _, k := range sortedKeys(r.obs.Jobs) {
		job := r.obs.Jobs[k]
		set := pol.ResolveJob(job.Namespace, job.Meta)
		if set.Recipient == "" {
			continue
		}
		st := c.states()[k]
		life := ""
		if st != nil {
			life = st.Life
		}
		w := gpuWork[k]
		if w == nil {
			w = &work{}
		}
		var event, msg string
		switch {
		case life == "" && w.running > 0 && !job.Stopped:
			event, msg = policy.NotifyStart, fmt.Sprintf("its GPU work started: %s running with %s", plural(w.running, "allocation"), plural(w.gpus, "GPU"))
		case life == lifeStarted && w.live == 0 && jobEnded(r.obs, st, job):
			how := "completed"
			if job.Stopped {
				how = "stopped"
			}
			event, msg = policy.NotifyFinish, "its GPU work ended: "+how
		default:
			continue
		}
		n := noticeFor(pol, job, event, event, "", w.gpus, engine.Reason{Rule: ruleLifecycle, Message: msg}, r.now)
		if n == nil && life == "" {
			continue // no block tells this job's start: no state for it
		}
		st = c.state(k)
		st.Life = lifeStarted
		if event == policy.NotifyFinish {
			st.Life = lifeFinished
		}
		if n != nil {
			c.notices.addNotice(st, n)
		}
		if err := c.save(ctx, st); err != nil {
			c.log().Error("save a job's start or finish message", "job", k, "event", event, "error", err)
			r.failed++
			continue
		}
		c.log().Info("job "+event, "job", k, "reason", msg)
	}
}

// jobEnded reports whether a job that ran has no GPU work left to run:
// stopped, or a batch job whose GPU groups are done, and nothing of it
// held, paused, draining or queued.
func jobEnded(obs *Observation, st *JobState, job *ObservedJob) bool {
	k := jobKey{job.Namespace, job.ID}
	if st != nil && (st.Paused || st.heldCount() > 0 || len(st.Draining) > 0) {
		return false
	}
	for _, q := range obs.Queued[k] {
		if q.Count > 0 {
			return false
		}
	}
	if job.Stopped {
		return true
	}
	if job.Type != "batch" {
		return false
	}
	for g, spec := range job.Groups {
		if spec.GPUsPerAlloc > 0 && obs.Done[k][g] < spec.Count {
			return false
		}
	}
	return true
}

// lifecycleWanted reports whether any per-job block takes start or finish.
func lifecycleWanted(pol *policy.Policy) bool {
	for _, n := range pol.Notify {
		if n.PerJob && (slices.Contains(n.Events, policy.NotifyStart) || slices.Contains(n.Events, policy.NotifyFinish)) {
			return true
		}
	}
	return false
}
