package controller

import (
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// A slow decision's split (issue 33): at 250 simulated nodes the
// controller's own part of the decision latency was 0.6-1.7 s at p99 in
// one run and up to 9.9 s in another, and the preemption's line said only
// when a round first saw the work (seen_after). Each decision that took
// slowDecision or more now logs, on its own line ("decision split"), where
// its time went between the blocking and the first call on a victim:
//
//   - stream: from Nomad's blocking to the event stream bringing it to
//     this controller (absent when a full read brought it);
//   - idle: no round of this controller running (the debounce, the loop
//     waiting; for a new leader, the time before it led: the lease);
//   - in_rounds: earlier rounds running (one that was running when the
//     work blocked, and rounds that did not decide it), and how many;
//   - observe, recover, plan, act_before: the deciding round's phases up
//     to the call.
//
// The parts add up to the latency, but for the clocks of Nomad and the
// controller differing (a stream lag below zero reads as zero).

// slowDecision is how long a decision takes before its split is logged.
const slowDecision = 500 * time.Millisecond

// spanKeep is how many ended rounds roundSpans keeps: at scale rounds
// follow each other in 0.3-3 s, and a decision's wait is seconds long.
const spanKeep = 256

// span is when a round ran, on this controller's clock.
type span struct{ start, end time.Time }

// roundSpans keeps when the recent rounds ran and when the running
// round's phases ended. It is the control loop's: reconcile writes it;
// the act phase's goroutines read it while the loop waits for them.
type roundSpans struct {
	ended                        []span // oldest first
	cur                          span   // the running round (end zero)
	observed, recovered, planned time.Time
}

// begin starts a round at now.
func (s *roundSpans) begin(now time.Time) {
	s.cur = span{start: now}
	s.observed, s.recovered, s.planned = time.Time{}, time.Time{}, time.Time{}
}

// end ends the running round at now.
func (s *roundSpans) end(now time.Time) {
	if s.cur.start.IsZero() {
		return
	}
	s.cur.end = now
	s.ended = append(s.ended, s.cur)
	if n := len(s.ended); n > spanKeep {
		s.ended = append(s.ended[:0], s.ended[n-spanKeep:]...)
	}
	s.cur = span{}
}

// decisionSplit is a decision's latency in parts (see above).
type decisionSplit struct {
	stream   time.Duration // -1: unknown (a full read brought the blocking)
	idle     time.Duration
	inRounds time.Duration
	rounds   int
	observe  time.Duration
	recover  time.Duration
	plan     time.Duration
	act      time.Duration
}

// split splits the latency of a decision taken now, in the running
// round, for work Nomad blocked at since and the stream brought at seen
// (zero: unknown).
func (s *roundSpans) split(since, seen, now time.Time) decisionSplit {
	d := decisionSplit{stream: -1}
	from := since
	if !seen.IsZero() {
		d.stream = max(seen.Sub(since), 0)
		from = laterOf(since, seen)
	}
	start := s.cur.start
	if start.IsZero() {
		start = now // no round timed (cannot happen in reconcile)
	}
	for _, r := range s.ended {
		if r.end.After(from) && r.start.Before(start) {
			d.inRounds += laterOf(from, earlierOf(r.end, start)).Sub(laterOf(from, r.start))
			d.rounds++
		}
	}
	d.idle = max(start.Sub(from)-d.inRounds, 0)
	// The deciding round's phases, from the later of their start and the
	// work's arrival (a blocking the recover phase's second read saw
	// counts from there).
	part := func(a, b time.Time) time.Duration {
		if a.IsZero() || b.IsZero() {
			return 0
		}
		return max(b.Sub(laterOf(a, from)), 0)
	}
	d.observe = part(start, s.observed)
	d.recover = part(s.observed, s.recovered)
	d.plan = part(s.recovered, s.planned)
	d.act = part(s.planned, now)
	return d
}

// fields are the split as log fields.
func (d decisionSplit) fields() []any {
	ms := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
	var f []any
	if d.stream >= 0 {
		f = append(f, "stream", ms(d.stream))
	} else {
		f = append(f, "stream", "unknown (a full read)")
	}
	return append(f, "idle", ms(d.idle), "in_rounds", ms(d.inRounds), "rounds_before", d.rounds,
		"observe", ms(d.observe), "recover", ms(d.recover), "plan", ms(d.plan), "act_before", ms(d.act))
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlierOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// splitFields are the fields of a slow decision's split line: a's job,
// the work it is for, the latency from start, and its parts.
func (l *decisionLatency) splitFields(r *round, a engine.Action, start time.Time, latency time.Duration) []any {
	f := []any{"job", clip(a.Job.String(), quoteMax)}
	var seen time.Time
	if a.For != nil {
		f = append(f, "for", clip(a.For.String(), quoteMax))
		seen = r.obs.Queued[jobKey{a.For.Namespace, a.For.ID}][a.ForGroup].Seen
	}
	f = append(f, "decision_latency", latency.Round(time.Millisecond))
	return append(f, l.spans.split(start, seen, time.Now()).fields()...)
}
