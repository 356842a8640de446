package controller

import (
	"time"

	"github.com/hashicorp/go-hclog"
)

// A new leader's first rounds are its failover: what each of their phases
// took is logged, one line a round ("round phases"), so that a slow
// takeover says where its time went (issue 33: at 250 nodes the first
// clean round came 10-46 s after the old leader died, and only the first
// action's log line dated anything in between).

// phaseRounds is how many rounds of a lead term log their phases.
const phaseRounds = 3

// slowRound is how long a later round runs before its phases are logged
// too (issue 33: decisions at 250 nodes waited 22-31 s at p99, and the log
// showed lulls of about 10 s with no round in them; a slow round now says
// which phase held it). Timing a round is a few clock reads.
const slowRound = 250 * time.Millisecond

// phaseClock counts a lead term's rounds and times the phases of its
// first phaseRounds. It is the control loop's alone: lead starts a term,
// reconcile times its rounds, both on the loop's goroutine; nothing else
// (HTTP handlers, status views, the stepdown watch) reads it.
type phaseClock struct {
	term   time.Time // when the lead term began
	rounds int       // the term's rounds timed so far
	ended  time.Time // when the term's last round ended
	// current times the running round (nil between rounds): its phases
	// note their parts there.
	current *phaseTimer
}

// termStarted starts a lead term now: its next phaseRounds rounds are
// logged.
func (pc *phaseClock) termStarted(now time.Time) {
	pc.term, pc.rounds, pc.ended = now, 0, time.Time{}
}

// start returns the timer of a round that starts now, or nil when there
// is no term (tests that run rounds alone). The term's first phaseRounds
// rounds are logged whatever they take, later ones when slow.
func (pc *phaseClock) start() *phaseTimer {
	if pc.term.IsZero() {
		return nil
	}
	pc.rounds++
	now := time.Now()
	t := &phaseTimer{clock: pc, round: pc.rounds, term: pc.term, start: now, last: now, always: pc.rounds <= phaseRounds}
	if !pc.ended.IsZero() {
		t.idle = now.Sub(pc.ended)
	}
	pc.current = t
	return t
}

// phaseTimer times one round's phases, each from the end of the one
// before; a nil timer times nothing.
type phaseTimer struct {
	clock             *phaseClock
	always            bool          // a first round: logged however long it took
	idle              time.Duration // since the round before ended (zero: the first)
	round             int
	term, start, last time.Time
	took              []any // phase, duration, ... as hclog fields
	acted, failed     int
}

// done ends a phase now.
func (t *phaseTimer) done(phase string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.took = append(t.took, phase, now.Sub(t.last).Round(time.Millisecond))
	t.last = now
}

// part notes a part of a phase that ran from since to now, logged with
// the phases (the recover phase's finished preemptions and its second
// observe).
func (t *phaseTimer) part(name string, since time.Time) {
	if t == nil {
		return
	}
	t.took = append(t.took, name, time.Since(since).Round(time.Millisecond))
}

// observed notes what the round's observe did (observeCost), logged
// with the phases.
func (t *phaseTimer) observed(c observeCost) {
	if t == nil {
		return
	}
	t.took = append(t.took, "observe_waited", c.waited.Round(time.Millisecond), "observe_full_read", c.full,
		"observe_job_reads", c.jobReads, "observe_summary_reads", c.summaries,
		"observe_summaries_overtaken", c.overtaken)
}

// count notes what the round did: calls that acted and calls that failed.
func (t *phaseTimer) count(r *round) {
	if t != nil && r != nil {
		t.acted, t.failed = r.acted, r.failed
	}
}

// log writes the round's line: each phase that ran, the whole round, and
// how long after the term began it ended (the failover, but for the wait
// for the lock); err when the round failed (its later phases absent).
// A later round is logged when it took slowRound or more, or failed, with
// how long the loop idled before it (idle: waiting for an event, the
// resync or a due time, or a failed round's backoff).
func (t *phaseTimer) log(l hclog.Logger, err error) {
	if t == nil {
		return
	}
	now := time.Now()
	t.clock.ended, t.clock.current = now, nil
	total := now.Sub(t.start)
	if !t.always && total < slowRound && err == nil {
		return
	}
	fields := append([]any{"round", t.round}, t.took...)
	fields = append(fields, "total", total.Round(time.Millisecond), "idle_before", t.idle.Round(time.Millisecond),
		"since_lead", now.Sub(t.term).Round(time.Millisecond), "acted", t.acted, "failed", t.failed)
	if err != nil {
		fields = append(fields, "error", err)
	}
	l.Info("round phases", fields...)
}
