package controller

import (
	"context"
	"sync"
	"time"
)

// The checkpoint-written poll (written.go is its core): a goroutine of the
// lead term that reads, several times a second, the files of the tasks a
// drain waits for, and wakes the control loop when one answers. The
// round's period (and the event stream, which says nothing of files) would
// leave the stop seconds behind the checkpoint: the GPUs' beneficiary
// waits, and the victim runs work its checkpoint does not hold.

// DefaultWrittenPoll is how often the files are read: with a round and
// Nomad's stop after it, the victim stops well within 2 s of its answer.
const DefaultWrittenPoll = 250 * time.Millisecond

// writtenCallTimeout is the deadline of each read: the file is on the
// victim's client, through a server; one that does not answer by then
// (a client gone, or a task that made its file a FIFO, which Nomad's stat
// opens to sniff its type and would block on) is not read again for this
// drain: its task then stops at the end of its grace, as without the
// contract, and no more of the client's handlers wait on it.
const writtenCallTimeout = 2 * time.Second

// writtenStore passes the targets from the rounds to the poll, and the
// answers back. Its zero value is ready to use.
type writtenStore struct {
	mu      sync.Mutex
	targets []writtenTarget
	// answers: allocation ID → task → when it said its checkpoint is
	// written. givenUp: allocation ID → task, reads that timed out.
	answers map[string]map[string]time.Time
	givenUp map[string]map[string]bool
}

// setTargets replaces what the poll reads, and forgets the answers and
// timeouts of allocations no drain waits for any more.
func (w *writtenStore) setTargets(targets []writtenTarget) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.targets = targets
	keep := map[string]bool{}
	for _, t := range targets {
		keep[t.AllocID] = true
	}
	for id := range w.answers {
		if !keep[id] {
			delete(w.answers, id)
		}
	}
	for id := range w.givenUp {
		if !keep[id] {
			delete(w.givenUp, id)
		}
	}
}

// pending are the targets without an answer for their drain yet, that
// have not timed out.
func (w *writtenStore) pending() []writtenTarget {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []writtenTarget
	for _, t := range w.targets {
		if at, ok := w.answers[t.AllocID][t.Task]; ok && !at.Before(t.Since) {
			continue
		}
		if w.givenUp[t.AllocID][t.Task] {
			continue
		}
		out = append(out, t)
	}
	return out
}

// answer records a task's answer.
func (w *writtenStore) answer(t writtenTarget, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.answers == nil {
		w.answers = map[string]map[string]time.Time{}
	}
	if w.answers[t.AllocID] == nil {
		w.answers[t.AllocID] = map[string]time.Time{}
	}
	w.answers[t.AllocID][t.Task] = at
}

// giveUp stops reading a task's file for its drain.
func (w *writtenStore) giveUp(t writtenTarget) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.givenUp == nil {
		w.givenUp = map[string]map[string]bool{}
	}
	if w.givenUp[t.AllocID] == nil {
		w.givenUp[t.AllocID] = map[string]bool{}
	}
	w.givenUp[t.AllocID][t.Task] = true
}

// answered returns a copy of the answers, for a round.
func (w *writtenStore) answered() map[string]map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]map[string]time.Time, len(w.answers))
	for id, tasks := range w.answers {
		m := make(map[string]time.Time, len(tasks))
		for task, at := range tasks {
			m[task] = at
		}
		out[id] = m
	}
	return out
}

// pollWritten reads the pending files every period until ctx ends.
func (dr *drainer) pollWritten(ctx context.Context, period time.Duration) {
	if period <= 0 {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if dr.readWritten(ctx, dr.written.pending(), &warned) {
			dr.poke()
		}
	}
}

// readWritten reads each target's file once and reports whether one
// answered. A token without read-fs is said once per lead term: the early
// stop then comes only through steward-exec's events.
func (dr *drainer) readWritten(ctx context.Context, targets []writtenTarget, warned *bool) bool {
	answered := false
	for _, t := range targets {
		cctx, cancel := context.WithTimeout(ctx, writtenCallTimeout)
		info, err := dr.nomad().StatAllocFile(cctx, t.Namespace, t.AllocID, writtenPath(t.Task))
		timedOut := cctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return answered
		}
		switch {
		case err != nil && isForbidden(err):
			if !*warned {
				*warned = true
				dr.log().Warn("cannot read checkpoint-written files: tasks of drivers other than steward-exec stop at the end of their grace", "error", err)
			}
			return answered
		case err != nil && timedOut:
			dr.log().Warn("checkpoint-written file not read in time: not read again for this preemption; the task stops at the end of its grace",
				"alloc", t.AllocID, "task", t.Task, "timeout", writtenCallTimeout)
			dr.written.giveUp(t)
			continue
		case err != nil:
			dr.log().Debug("read checkpoint-written file", "alloc", t.AllocID, "task", t.Task, "error", err)
			continue
		}
		if at, ok := writtenAnswer(info, t.Since, dr.now()); ok {
			dr.written.answer(t, at)
			dr.log().Info("checkpoint written (the task's file says so)", "alloc", t.AllocID, "task", t.Task, "at", at.UTC().Format(time.RFC3339Nano))
			answered = true
		}
	}
	return answered
}
