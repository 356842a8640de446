package controller

import (
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// A job that starts to wait gets its record written once with its
// decision, its first place in the queue and its first forecast, rather
// than once for each as they come a round apart (issue 33: "a decision's
// record, then its first place a round later"):
//   - a job that this round's act phase made wait (a preemption or an idle
//     stop without a checkpoint grace stops it in the round it is decided)
//     has no place in the round's queue, since the plan that decided it
//     saw it running: the next round's plan lists it;
//   - a job whose first place the round shows has no forecast yet when a
//     forecast that includes it is running (started in the round it
//     joined the queue): it finishes within a second or so, and the round
//     it pokes shows it.
//
// Its record waits for what is coming, placeWait at most. The record is
// history for people, not the write-ahead log: the job's state, written
// before any Nomad call, is that (docs/design.md, "The write-ahead
// protocol"), and a crash in between loses nothing, since a new leader
// writes the record of every state it inherits. What a job's tasks must
// read before Nomad acts (a checkpoint's grace, the resume count) is
// written before the signal (writeRecord), never held back; so is any
// other change of a job whose record is held back: a later decision
// writes it at once.

// placeWait bounds how long a record waits for the job's first place
// and forecast: a round or two.
const placeWait = 2 * time.Second

// holdForPlace reports whether the record of st, due in round r, waits
// for the job's first place in the queue or its first forecast (see
// above).
func (p *publisher) holdForPlace(r *round, st *JobState) bool {
	k := st.key()
	if since, ok := p.placeHeld[k]; ok {
		if since.Equal(r.now) || (r.now.Sub(since) < placeWait && st.Updated.Equal(since) && p.queue.forecastComing(k, since)) {
			return true
		}
		delete(p.placeHeld, k)
		return false
	}
	// Waiting, but not in line: a pause waits for its owner, and a
	// beneficiary held while its victims checkpoint is left out of the
	// queue (stabiliseQueue): neither gets a place to wait for.
	if !st.Updated.Equal(r.now) || st.heldCount() == 0 || st.Paused || st.Rule == string(engine.RuleDraining) {
		return false
	}
	if p.store.stateErr[k] != "" || p.store.writes.writeError(k) != "" {
		return false // why its state or a write failed: its owner learns at once
	}
	// Its place comes when the plan's queue did not list it because the
	// plan saw it running (stopped after it, in this round); a hold that
	// no plan lists (the pool guard's) has none to come.
	listed := p.queue.listed(k)
	placeComing := !listed && evictedAt(st, r.now)
	if !placeComing && !(listed && p.queue.forecastComing(k, r.now)) {
		return false
	}
	p.placeHeld[k] = r.now
	r.wake(r.now.Add(placeWait))
	return true
}

// evictedAt reports whether the job's latest preemption (an idle stop
// counts) took effect at now: stopped in this round, after its plan.
func evictedAt(st *JobState, now time.Time) bool {
	n := len(st.Preemptions)
	return n > 0 && st.Preemptions[n-1].Equal(now)
}
