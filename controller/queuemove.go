package controller

import (
	"context"
	"fmt"
	"time"
)

// People reorder their own waiting jobs with `steward queue move JOB
// -before OTHER` (or -top). Like a pause, the CLI leaves a request in the
// job's namespace (requests.go) and the leader carries it out: whoever may
// write steward/requests/* in a namespace may reorder that namespace's
// waiting jobs, among themselves, and no other. OTHER is looked up in the
// request's namespace only, so a request names no other team's job.
//
// A move sets the job's QueueMove: the time it ranks at among its
// tenant's waiting work (engine.Demand.QueueAt): just before OTHER's, or
// just before the earliest of its namespace's waiting jobs. The engine
// applies it only within the places its tenant's demands of the same
// class already hold (engine.honourMoves), so the order between tenants,
// and every other tenant's place, stay as fairness put them.

// ruleQueueMove is the rule of a move's decision and record line.
const ruleQueueMove = "queue-move"

// QueueMove is where the job's owner moved it in the waiting order.
type QueueMove struct {
	// At is the time the job ranks at among its tenant's waiting work
	// of its class, instead of since when it waits.
	At time.Time `json:"at"`
	// Reason says who moved it where, with the times (shown in the
	// job's record as steward_queue_move).
	Reason string `json:"reason"`
}

// queueMoveItem is the record's key for a move in force.
const queueMoveItem = "steward_queue_move"

// moveGap is how far before the first job (or OTHER, with none before
// it) a move ranks: a second, so that later moves between have room
// (each halves a gap in nanoseconds).
const moveGap = time.Second

// moveRefMax bounds the OTHER a move request names: a job ID no longer
// than a state carries as it is (stateIDMax). A longer one is refused.
const moveRefMax = stateIDMax

// waitingSince is since when the job waits for GPUs, the earliest of its
// GPU groups', as buildSnapshot counts it (held by Steward or queued by
// Nomad), and false when none of them waits. A paused job waits for
// nobody.
func waitingSince(obs *Observation, st *JobState, job *ObservedJob) (time.Time, bool) {
	k := jobKey{job.Namespace, job.ID}
	var since time.Time
	found := false
	take := func(t time.Time) {
		if !found || t.Before(since) {
			since, found = t, true
		}
	}
	if st != nil && st.Paused {
		return time.Time{}, false
	}
	for g, spec := range job.Groups {
		if spec.GPUsPerAlloc == 0 {
			continue
		}
		if st != nil {
			if h := st.Held[g]; h != nil && h.Count > 0 && h.Rule != ruleControllerPool {
				take(h.Since)
				continue
			}
		}
		if q, ok := obs.Queued[k][g]; ok && q.Count > 0 {
			s := q.Since
			if st != nil {
				if w, ok := st.Waiting[g]; ok && w.Before(s) {
					s = w
				}
			}
			take(s)
		}
	}
	return since, found
}

// rankOf is the time a waiting job ranks at in its tenant's order: where
// its owner moved it, else since when it waits.
func (ac *actor) rankOf(r *round, job *ObservedJob) (time.Time, bool) {
	st := ac.states()[jobKey{job.Namespace, job.ID}]
	since, ok := waitingSince(r.obs, st, job)
	if !ok {
		return time.Time{}, false
	}
	if st != nil && st.QueueMove != nil {
		return st.QueueMove.At, true
	}
	return since, true
}

// queueMove carries out a move request for job: before the job named
// by items["before"] in the same namespace, or, with items["top"], before
// every waiting job of the namespace. Refused (a decision with the
// reason, nothing changed) when the job does not wait, OTHER is not a
// waiting job of the namespace, or OTHER is the job itself.
func (ac *actor) queueMove(ctx context.Context, r *round, st *JobState, job *ObservedJob, items map[string]string, by string) {
	k := st.key()
	d := Decision{At: r.now, Kind: RequestMove, Job: k.String(), Rule: ruleQueueMove}
	defer func() { ac.remember(d) }()
	refuse := func(why string) {
		ac.log().Warn("queue move refused", "job", clip(k.String(), quoteMax), "by", by, "reason", why)
		d.Reason, d.Error = "refused: "+why, why
	}
	if _, ok := waitingSince(r.obs, st, job); !ok {
		refuse(fmt.Sprintf("%s does not wait for GPUs: only a waiting job moves in the queue", clip(k.String(), quoteMax)))
		return
	}
	// The ranks of the namespace's other waiting jobs.
	ranks := map[jobKey]time.Time{}
	for ok, j := range r.obs.Jobs {
		if ok.Namespace != job.Namespace || ok == k || j.Stopped {
			continue
		}
		if t, waits := ac.rankOf(r, j); waits {
			ranks[ok] = t
		}
	}
	var at time.Time
	var where string
	switch other := items["before"]; {
	case items["top"] == "true" && other == "":
		at, _ = ac.rankOf(r, job)
		for _, t := range ranks {
			if t.Before(at) {
				at = t
			}
		}
		// A second ahead of the first: room for later moves between.
		at = at.Add(-moveGap)
		where = "to the top of namespace " + job.Namespace + "'s waiting jobs"
	case other != "" && items["top"] == "":
		var why string
		if at, where, why = moveBefore(r.obs, ranks, k, other); why != "" {
			refuse(why)
			return
		}
	default:
		refuse("a move names either a job to move before (-before) or the top (-top)")
		return
	}
	st.QueueMove = &QueueMove{At: at, Reason: fmt.Sprintf("moved by %s %s: ranks among its tenant's waiting jobs of its tier and priority "+
		"as if waiting since %s; other tenants' places are unchanged", by, where, at.UTC().Format(time.RFC3339Nano))}
	d.Reason = st.QueueMove.Reason
	if err := ac.save(ctx, st); err != nil {
		ac.log().Error("save moved job", "job", k, "error", err)
		d.Error = err.Error()
		return
	}
	ac.log().Info("queue move", "job", k, "reason", st.QueueMove.Reason)
	pol, _ := ac.engineNow()
	ac.pub.writeRecord(ctx, r, pol, st)
}

// queueAt is the rank a job's state gives its demands (zero: not moved).
func queueAt(st *JobState) time.Time {
	if st == nil || st.QueueMove == nil {
		return time.Time{}
	}
	return st.QueueMove.At
}

// moveBefore places a queue move of job k before the job named other, in
// k's namespace, among the other waiting jobs' ranks: between other and
// the job ranked just before it, so that it passes other and nothing
// else. why is, when not "", why the move is refused.
func moveBefore(obs *Observation, ranks map[jobKey]time.Time, k jobKey, other string) (at time.Time, where, why string) {
	if len(other) > moveRefMax {
		return time.Time{}, "", fmt.Sprintf("the job to move before has an ID of %d bytes, over %d", len(other), moveRefMax)
	}
	ok := jobKey{k.Namespace, other}
	if ok == k {
		return time.Time{}, "", "a job cannot move before itself"
	}
	if oj := obs.Jobs[ok]; oj == nil || oj.Stopped {
		return time.Time{}, "", fmt.Sprintf("no job %s runs in namespace %s (a move names a job of its own namespace)", clip(other, quoteMax), k.Namespace)
	}
	t, waits := ranks[ok]
	if !waits {
		return time.Time{}, "", fmt.Sprintf("%s does not wait for GPUs", clip(ok.String(), quoteMax))
	}
	// Between OTHER and the job ranked just before it, so that it
	// passes OTHER and nothing else: halfway, or a second before
	// OTHER when none is.
	at = t.Add(-moveGap)
	prev, found := time.Time{}, false
	for pk, pt := range ranks {
		if pk != ok && pt.Before(t) && (!found || pt.After(prev)) {
			prev, found = pt, true
		}
	}
	if found {
		if t.Sub(prev) < 2*time.Nanosecond {
			return time.Time{}, "", fmt.Sprintf("no room left before %s after so many moves between it and the job ranked before it: move that one instead", clip(ok.String(), quoteMax))
		}
		at = prev.Add(t.Sub(prev) / 2)
	}
	where = fmt.Sprintf("before %s (which ranks as waiting since %s)", clip(ok.String(), quoteMax), t.UTC().Format(time.RFC3339Nano))
	return at, where, ""
}
