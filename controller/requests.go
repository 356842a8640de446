package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// People pause and resume jobs with `steward pause|resume JOB`. The CLI
// does not act itself: it leaves a request in a variable in the job's
// namespace (requestPath), and the leader carries it out, so a pause works
// the same whichever copy of the controller leads, and needs no access to
// it.
const requestPrefix = "steward/requests/"

func requestPath(jobID string) string { return varPath(requestPrefix, jobID) }

// Request is a person's pause or resume.
type Request struct {
	Action string    `json:"action"` // pause or resume
	Job    string    `json:"job"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
}

// RequestItems encodes a request as variable items.
func RequestItems(r Request) map[string]string {
	return map[string]string{"action": r.Action, "job": r.Job, "by": r.By, "at": r.At.UTC().Format(time.RFC3339)}
}

// SubmitRequest leaves a pause or resume request for the leader.
func SubmitRequest(ctx context.Context, n Nomad, namespace, jobID string, r Request) error {
	if r.Action != "pause" && r.Action != "resume" {
		return fmt.Errorf("request %q: want pause or resume", r.Action)
	}
	r.Job = jobID
	return n.PutVar(ctx, namespace, requestPath(jobID), RequestItems(r), false, 0)
}

// applyRequests carries out pending pause and resume requests.
func (c *Controller) applyRequests(ctx context.Context, r *round) {
	refs, err := c.nomad.ListVars(ctx, requestPrefix)
	if err != nil {
		c.log.Error("list pause/resume requests", "error", err)
		r.failed++
		return
	}
	for _, ref := range refs {
		items, _, err := c.nomad.GetVar(ctx, ref.Namespace, ref.Path)
		if err != nil || items == nil {
			continue
		}
		id := items["job"]
		if id == "" {
			id = unescapePath(ref.Path[len(requestPrefix):])
		}
		k := jobKey{ref.Namespace, id}
		job := r.obs.Jobs[k]
		if job != nil && !job.Stopped {
			st := c.state(k)
			switch items["action"] {
			case "pause":
				c.pause(ctx, r, st, job, items["by"])
			case "resume":
				if st.Paused {
					st.Paused = false
					why := engine.Reason{Rule: "resume", Message: fmt.Sprintf("resumed by %s: waits for capacity", who(items["by"]))}
					st.note(StatusHeld, why, r.now)
					gpus := 0
					for g, h := range st.Held {
						gpus += h.Count * job.Groups[g].GPUsPerAlloc
					}
					d := Decision{At: r.now, Kind: "resume", Job: k.String(), GPUs: gpus, Rule: string(why.Rule), Reason: why.Message}
					if err := c.save(ctx, st); err != nil {
						c.log.Error("save resumed job", "job", k, "error", err)
						d.Error = err.Error()
					}
					c.remember(d)
				}
			default:
				c.log.Warn("ignoring unknown request", "job", k, "action", items["action"])
			}
		}
		if err := c.nomad.DeleteVar(ctx, ref.Namespace, ref.Path); err != nil {
			c.log.Error("delete request", "path", ref.Path, "error", err)
		}
	}
}

// pause holds every GPU group of the job until a person resumes it. Work
// gets its checkpoint signal and grace, as in a preemption.
func (c *Controller) pause(ctx context.Context, r *round, st *JobState, job *ObservedJob, by string) {
	if st.Paused {
		return
	}
	pol, _ := c.engineNow()
	st.Paused = true
	reason := engine.Reason{Rule: "pause", Message: fmt.Sprintf("paused by %s: resumes only with steward resume", who(by))}
	var allocs []string
	for _, a := range r.obs.Allocs {
		if a.Namespace == job.Namespace && a.JobID == job.ID {
			allocs = append(allocs, a.ID)
		}
	}
	// The job's own signal when it is a valid one (ResolveJob), else the
	// policy's.
	signal := pol.ResolveJob(job.Namespace, job.Meta).CheckpointSignal
	grace := pol.Preemption.Grace
	if signal == "" || len(allocs) == 0 {
		signal, grace = "", 0
	}
	d := &Drain{Group: "", Allocs: allocs, Signal: signal, Grace: grace, Decided: r.now,
		Requeue: true, Kind: "pause", Rule: string(reason.Rule), Reason: reason.Message}
	st.Draining = append(st.Draining, d)
	st.note(StatusPaused, reason, r.now)
	gpus := 0
	for _, a := range r.obs.Allocs {
		if a.Namespace == job.Namespace && a.JobID == job.ID {
			gpus += len(a.GPUIDs)
		}
	}
	dec := Decision{At: r.now, Kind: "pause", Job: st.key().String(), GPUs: gpus, Rule: string(reason.Rule), Reason: reason.Message}
	defer func() { c.remember(dec) }()
	if err := c.save(ctx, st); err != nil {
		c.log.Error("save paused job", "job", st.key(), "error", err)
		dec.Error = err.Error()
		return
	}
	c.log.Info("pause", "job", st.key(), "by", who(by))
	if signal != "" {
		c.writeRecord(ctx, r, pol, st)
		r.wake(r.now.Add(signalDelay))
		return
	}
	if err := c.finishDrain(ctx, r, st, d); err != nil {
		c.log.Error("pause", "job", st.key(), "error", err)
		r.failed++
	}
	st.Status = StatusPaused
}

func who(by string) string {
	if by == "" {
		return "an operator"
	}
	return by
}
