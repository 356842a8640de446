package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestResyncKeepsABlockingsStart: issue 33's "seen_after=10.361s,
// rounds_waiting=0". The event stream carries Nomad's timestamps through
// float64 (…674123457 arrives as …674123500), a list read to the
// nanosecond; a resync's read of a blocking the stream had brought moved
// its start by 43 ns, and the next preemption for it measured the same
// blocking again, from the same start, as if no round had seen it (its
// wait forgotten). Either path first, the other after: one blocking, one
// start, one measured decision.
func TestResyncKeepsABlockingsStart(t *testing.T) {
	const created = int64(1796061802674123457) // 2026-11-29T22:03:22.674123457Z: not on the stream's grid
	k := jobKey{"ml", "nb"}
	cases := []struct {
		name string
		// streamFirst: the stream brings the blocking, then a resync
		// reads it; else a full read brings it, then the stream brings
		// it again (Nomad re-blocks it: same evaluation, same creation).
		streamFirst bool
	}{
		{name: "the stream brings the blocking, a resync reads it: the same start, not decided again", streamFirst: true},
		{name: "a full read brings the blocking, the stream brings it re-blocked: the same start, not decided again"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cl := f.cl()
			cl.nodes = []*api.NodeListStub{apiNode("n1", 1)}
			nb := apiJob("ml", "nb", "interactive", 60, 1, 1)
			cl.jobs["ml/nb"] = nb
			ev, sum := apiBlockedEval(nb, 1, time.Unix(0, created))
			cl.summary["ml/nb"] = sum
			o := newObserver(f, "steward")
			streamed := func(index int) {
				o.cache.apply(event(t, index, "Evaluation", "EvaluationUpdated", "Evaluation",
					fmt.Sprintf(`{"ID":%q,"Namespace":"ml","JobID":"nb","Status":"blocked","CreateTime":%d,"ModifyTime":%d}`, ev.ID, created, created)))
			}
			at := time.Unix(0, created).Add(time.Second)
			// The cache starts from a full read, and follows the stream.
			if !tc.streamFirst {
				cl.evals = []*api.Evaluation{ev}
			}
			if _, err := o.observe(context.Background(), at, true); err != nil {
				t.Fatal(err)
			}
			o.cache.setFollowing(true)
			if tc.streamFirst {
				streamed(int(cl.index) + 10)
				// What the next full read lists: the evaluation as of
				// that event (its modify index), so the read's version
				// wins the merge as Nomad's does.
				ev.ModifyIndex = cl.index + 10
				cl.evals = []*api.Evaluation{ev}
				cl.index += 100
			}
			var l decisionLatency
			var out lockedLog
			log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})
			preempt := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, For: &engine.JobRef{Namespace: "ml", ID: "nb"}, ForGroup: "work"}
			var starts []time.Time
			for round := range 3 {
				now := at.Add(time.Duration(round+1) * time.Second)
				// Round 1 decides from what the first path brought;
				// before round 2 the other path brings it again.
				if round == 1 {
					if tc.streamFirst {
						if _, err := o.observe(context.Background(), now, true); err != nil { // the resync
							t.Fatal(err)
						}
					} else {
						streamed(int(cl.index) + 20)
					}
				}
				obs, err := o.observe(context.Background(), now, false)
				if err != nil {
					t.Fatal(err)
				}
				q, ok := obs.Queued[k]["work"]
				if !ok {
					t.Fatalf("round %d: nb not queued", round)
				}
				starts = append(starts, q.Since)
				r := newRound(now, obs, nil)
				if round >= 1 {
					// Rounds after the decision preempt for it again (a
					// second victim): the same blocking, not measured.
					if s := l.start(r, preempt); !s.IsZero() {
						log.Info("preempt", append([]any{"decision_latency", now.Sub(s)}, l.waitFields(k, s, now)...)...)
					}
				} else if s := l.start(r, preempt); s.IsZero() {
					t.Fatalf("round 0: the first decision for nb was not measured")
				}
				r.plan = &engine.Plan{}
				l.prune(r)
				l.noteWaits(r)
			}
			for i, s := range starts[1:] {
				if !s.Equal(starts[0]) {
					t.Errorf("round %d: nb's blocking starts at %d, round 0 at %d: moved by %v",
						i+1, s.UnixNano(), starts[0].UnixNano(), s.Sub(starts[0]))
				}
			}
			if got := out.lines("preempt"); len(got) > 0 {
				t.Errorf("the blocking decided in round 0 measured again: %s", strings.Join(got, "; "))
			}
			if w := l.waits[k]; w == nil || w.rounds != 3 {
				t.Errorf("nb's wait = %+v, want followed through 3 rounds", w)
			}
		})
	}
}
