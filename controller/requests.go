package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// People pause and resume jobs with `steward pause|resume JOB`. The CLI
// does not act itself: it leaves a request in a variable in the job's
// namespace (requestPath), and the leader carries it out, so a pause works
// the same whichever copy of the controller leads, and needs no access to
// it.
//
// Whoever may write steward/requests/* in a namespace may pause and resume
// that namespace's jobs, and no other: the job is named by the request's
// path and namespace, never by its content, and the "by" a request claims
// is not believed (Nomad does not say who wrote a variable). The job's
// record says the pause came through a request in its namespace.
const requestPrefix = "steward/requests/"

func requestPath(jobID string) string { return varPath(requestPrefix, jobID) }

// requestJob is the job a request path names in its namespace: the path
// itself, or for an ID too long for a path, the content's job when it
// hashes to that path.
func requestJob(path string, items map[string]string) (string, bool) {
	rest, ok := strings.CutPrefix(path, requestPrefix)
	if !ok {
		return "", false
	}
	id := unescapePath(rest)
	if strings.HasPrefix(rest, "~~") {
		id = items["job"]
	}
	return id, id != "" && requestPath(id) == path
}

// The actions a person requests (Request.Action): pause, resume and
// snooze are the engine's declared rules of the same names, the reasons
// their holds, releases and snoozes carry.
const (
	RequestPause  = string(engine.RulePause)
	RequestResume = string(engine.RuleResume)
	RequestSnooze = string(engine.RuleSnooze)
	RequestMove   = "move" // a queue move (queuemove.go)
)

// Request is a person's pause, resume, snooze or queue move.
type Request struct {
	Action string `json:"action"` // RequestPause, RequestResume, RequestSnooze or RequestMove
	Job    string `json:"job"`
	// Duration is a snooze's ("2h"; "0s" ends one).
	Duration time.Duration `json:"duration,omitempty"`
	// Before is a move's job to move before, in the same namespace; ""
	// moves to the top (queuemove.go).
	Before string    `json:"before,omitempty"`
	By     string    `json:"by"` // shown in the CLI's own output only; not believed
	At     time.Time `json:"at"`
}

// RequestItems encodes a request as variable items.
func RequestItems(r Request) map[string]string {
	items := map[string]string{"action": r.Action, "job": r.Job, "by": r.By, "at": r.At.UTC().Format(time.RFC3339)}
	switch r.Action {
	case RequestSnooze:
		items["duration"] = r.Duration.String()
	case RequestMove:
		if r.Before != "" {
			items["before"] = r.Before
		} else {
			items["top"] = "true"
		}
	}
	return items
}

// SubmitRequest leaves a pause or resume request for the leader.
func SubmitRequest(ctx context.Context, n Nomad, namespace, jobID string, r Request) error {
	if r.Action != RequestPause && r.Action != RequestResume && r.Action != RequestSnooze && r.Action != RequestMove {
		return fmt.Errorf("request %q: want pause, resume, snooze or move", r.Action)
	}
	if r.Action == RequestMove && len(r.Before) > moveRefMax {
		return fmt.Errorf("move of %s/%s before a job ID of %d bytes: over %d", namespace, jobID, len(r.Before), moveRefMax)
	}
	r.Job = jobID
	_, err := n.PutVar(ctx, namespace, requestPath(jobID), RequestItems(r), false, 0)
	if isForbidden(err) {
		// The CLI's caller, not the controller, lacks the right: say
		// which (PutVar's own hint is the controller's).
		return fmt.Errorf("%s of %s/%s: Nomad refused the request (403 Permission denied): the token, a person's or a job's "+
			"workload identity, needs write on variables steward/requests/* in namespace %s (acl/steward-user.policy.hcl; "+
			"for a job's actions in the Nomad UI, bound to its namespace: nomad acl policy apply -namespace %s)", r.Action, namespace, jobID, namespace, namespace)
	}
	return err
}

// applyRequests carries out pending pause, resume and snooze requests: at
// most requestsPerNamespace of each namespace, requestsPerRound in all,
// within requestBudget (bounds.go). Anyone who may write a namespace's
// requests may write thousands of them: they then wait their turn in that
// namespace, while each other namespace's requests, and the round's plan,
// go on.
func (rq *requester) applyRequests(ctx context.Context, r *round) {
	rq.endSnoozes(ctx, r)
	refs, err := rq.nomad().ListVars(ctx, "*", requestPrefix)
	if err != nil {
		rq.log().Error("list pause/resume requests", "error", err)
		r.failed++
		return
	}
	deadline := time.Now().Add(requestBudget)
	taken, left := 0, 0
	for _, ref := range requestTurns(refs, requestsPerNamespace, &left) {
		if taken >= requestsPerRound || time.Now().After(deadline) {
			left++
			continue
		}
		taken++
		rq.applyRequest(ctx, r, ref)
	}
	if left > 0 {
		rq.log().Warn("requests wait for later rounds", "read", taken, "waiting", left,
			"per_namespace", requestsPerNamespace, "per_round", requestsPerRound)
		r.wake(r.now.Add(time.Second))
	}
}

// requestTurns orders the requests so that each namespace's first few come
// first, round-robin, and counts in left those past the namespace's cap.
func requestTurns(refs []VarRef, perNamespace int, left *int) []VarRef {
	byNS := map[string][]VarRef{}
	var names []string
	for _, ref := range refs {
		if _, ok := byNS[ref.Namespace]; !ok {
			names = append(names, ref.Namespace)
		}
		byNS[ref.Namespace] = append(byNS[ref.Namespace], ref)
	}
	sort.Strings(names)
	var out []VarRef
	for i := 0; i < perNamespace; i++ {
		for _, ns := range names {
			if i < len(byNS[ns]) {
				out = append(out, byNS[ns][i])
			}
		}
	}
	for _, ns := range names {
		*left += max(len(byNS[ns])-perNamespace, 0)
	}
	return out
}

// applyRequest carries out one request and deletes it.
func (rq *requester) applyRequest(ctx context.Context, r *round, ref VarRef) {
	if rest, ok := strings.CutPrefix(ref.Path, requestPrefix); ok && !strings.HasPrefix(rest, "~~") {
		// The path names the job: one that does not run costs no read.
		if job := r.obs.Jobs[jobKey{ref.Namespace, unescapePath(rest)}]; job == nil || job.Stopped {
			rq.log().Warn("ignoring a request for a job that does not run in its namespace", "namespace", ref.Namespace, "path", clip(ref.Path, quoteMax))
			if err := rq.nomad().DeleteVar(ctx, ref.Namespace, ref.Path, 0); err != nil {
				rq.log().Error("delete request", "path", clip(ref.Path, quoteMax), "error", err)
			}
			return
		}
	}
	items, index, err := rq.nomad().GetVar(ctx, ref.Namespace, ref.Path)
	if err != nil || items == nil {
		return
	}
	id, ok := requestJob(ref.Path, items)
	k := jobKey{ref.Namespace, id}
	job := r.obs.Jobs[k]
	switch {
	case !ok:
		rq.log().Warn("ignoring a request whose path names no job", "namespace", ref.Namespace, "path", ref.Path)
	case job == nil || job.Stopped:
		rq.log().Warn("ignoring a request for a job that does not run in its namespace", "job", clip(k.String(), quoteMax), "action", clip(items["action"], quoteMax))
	default:
		st := rq.state(k)
		by := "a request in namespace " + ref.Namespace
		switch items["action"] {
		case RequestPause:
			rq.pause(ctx, r, st, job, by)
		case RequestResume:
			rq.resume(ctx, st, job, by, r.now)
		case RequestSnooze:
			rq.snooze(ctx, r, st, job, items["duration"], by)
		case RequestMove:
			rq.queueMove(ctx, r, st, job, items, by)
		default:
			rq.log().Warn("ignoring unknown request", "job", clip(k.String(), quoteMax), "action", clip(items["action"], quoteMax))
		}
	}
	// Only the request read: one written since stays for the next round.
	if err := rq.nomad().DeleteVar(ctx, ref.Namespace, ref.Path, index); err != nil && !isConflict(err) {
		rq.log().Error("delete request", "path", ref.Path, "error", err)
	}
}

// resume lets a paused job, or one an idle rule requeued, run again: a
// paused job waits for capacity like any held job; a requeued one
// (Held.OwnerResumed) takes free GPUs, which in mode always it would not
// without its owner (engine.Demand.OwnerResumed). A request for a job
// that is neither changes nothing.
func (rq *requester) resume(ctx context.Context, st *JobState, job *ObservedJob, by string, now time.Time) {
	msg := ""
	for _, h := range st.Held {
		// (Paused while requeued, it still holds the idle groups.)
		if h.Count > 0 && h.Rule == string(engine.RuleIdle) && !h.OwnerResumed {
			h.OwnerResumed = true
			msg = fmt.Sprintf("resumed by %s after an idle requeue: runs again as soon as GPUs are free", by)
		}
	}
	if st.Paused {
		st.Paused = false
		msg = fmt.Sprintf("resumed by %s: waits for capacity", by)
	}
	if msg == "" {
		return
	}
	why := engine.Reason{Rule: engine.RuleResume, Message: msg}
	st.note(StatusHeld, why, now)
	gpus := 0
	for g, h := range st.Held {
		gpus += h.Count * job.Groups[g].GPUsPerAlloc
	}
	d := Decision{At: now, Kind: RequestResume, Job: st.key().String(), GPUs: gpus, Rule: string(why.Rule), Reason: why.Message}
	if err := rq.save(ctx, st); err != nil {
		rq.log().Error("save resumed job", "job", st.key(), "error", err)
		d.Error = err.Error()
	}
	rq.remember(d)
}

// pause holds every GPU group of the job until a person resumes it. Work
// gets its checkpoint signal and grace, as in a preemption.
func (rq *requester) pause(ctx context.Context, r *round, st *JobState, job *ObservedJob, by string) {
	if st.Paused {
		return
	}
	if err := r.rerun(st.key(), drainGroups(job, "")...); err != nil {
		rq.log().Warn("pause refused", "job", st.key(), "by", by, "error", err)
		rq.remember(Decision{At: r.now, Kind: RequestPause, Job: st.key().String(), Rule: ruleCompleted, Reason: err.Error(), Error: err.Error()})
		return
	}
	pol, _ := rq.engineNow()
	st.Paused = true
	// A paused job waits for nothing: GPUs set aside for it while its
	// victims drained (a preemption it won) are free to waiting work.
	rq.forgetMarks(ctx, st, st.key().String())
	reason := engine.Reason{Rule: engine.RulePause, Message: fmt.Sprintf("paused by %s: resumes only with steward resume", by)}
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
		Requeue: true, Kind: DrainPause, Rule: string(reason.Rule), Reason: reason.Message}
	st.Draining = append(st.Draining, d)
	if signal != "" {
		st.Resumes++ // its start after the owner's resume resumes (record.go)
	}
	st.keepWork(signal != "", r.ranOf(allocs))
	st.note(StatusPaused, reason, r.now)
	gpus := 0
	for _, a := range r.obs.Allocs {
		if a.Namespace == job.Namespace && a.JobID == job.ID {
			gpus += len(a.GPUIDs)
		}
	}
	dec := Decision{At: r.now, Kind: RequestPause, Job: st.key().String(), GPUs: gpus, Rule: string(reason.Rule), Reason: reason.Message}
	defer func() { rq.remember(dec) }()
	if err := rq.save(ctx, st); err != nil {
		rq.log().Error("save paused job", "job", st.key(), "error", err)
		dec.Error = err.Error()
		return
	}
	rq.log().Info("pause", "job", st.key(), "by", by)
	if signal != "" {
		rq.pub.writeRecord(ctx, r, pol, st)
		r.wake(r.now.Add(signalDelay))
		return
	}
	if err := rq.drains.finishDrain(ctx, r, st, d); err != nil {
		rq.log().Error("pause", "job", st.key(), "error", err)
		r.failed++
	}
	st.Status = StatusPaused
}

// requester carries out people's requests (pause, resume, snooze, queue
// moves) through the actor, which writes each one's intent first.
type requester struct {
	*actor
}
