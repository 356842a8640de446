package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestDecisionSplit: a slow decision's latency, from the work's blocking
// to the first call on a victim, split into the stream's lag, the loop
// idle, earlier rounds, and the deciding round's phases (issue 33).
func TestDecisionSplit(t *testing.T) {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	cases := []struct {
		name        string
		ended       []span
		start       int // the deciding round's start, its observe, recover and plan ends
		phases      [3]int
		since, seen int // seen < 0: a full read brought the blocking
		now         int
		want        decisionSplit
	}{
		{name: "work blocked while a round ran waits for the rest of it",
			ended: []span{{at(-200), at(400)}}, start: 410, phases: [3]int{470, 490, 590},
			since: 0, seen: 50, now: 600,
			want: decisionSplit{stream: ms(50), inRounds: ms(350), rounds: 1, idle: ms(10),
				observe: ms(60), recover: ms(20), plan: ms(100), act: ms(10)}},
		{name: "a round that did not decide it, and the loop idle between",
			ended: []span{{at(-500), at(-100)}, {at(20), at(300)}, {at(320), at(700)}}, start: 900, phases: [3]int{950, 960, 1000},
			since: 0, seen: 10, now: 1005,
			want: decisionSplit{stream: ms(10), inRounds: ms(660), rounds: 2, idle: ms(230),
				observe: ms(50), recover: ms(10), plan: ms(40), act: ms(5)}},
		{name: "a full read brought it: the stream's lag is in what came before the round",
			ended: []span{{at(-100), at(300)}}, start: 305, phases: [3]int{400, 410, 450},
			since: 0, seen: -1, now: 460,
			want: decisionSplit{stream: -1, inRounds: ms(300), rounds: 1, idle: ms(5),
				observe: ms(95), recover: ms(10), plan: ms(40), act: ms(10)}},
		{name: "brought during the deciding round's observe: its phases count from there",
			ended: []span{{at(-900), at(-10)}}, start: 0, phases: [3]int{300, 320, 400},
			since: 0, seen: 100, now: 410,
			want: decisionSplit{stream: ms(100), observe: ms(200), recover: ms(20), plan: ms(80), act: ms(10)}},
		{name: "Nomad's clock ahead of the controller's: no lag below zero",
			start: 100, phases: [3]int{150, 160, 200},
			since: 50, seen: 30, now: 210,
			want: decisionSplit{stream: 0, idle: ms(50), observe: ms(50), recover: ms(10), plan: ms(40), act: ms(10)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := roundSpans{}
			for _, e := range tc.ended {
				s.begin(e.start)
				s.end(e.end)
			}
			s.begin(at(tc.start))
			s.observed, s.recovered, s.planned = at(tc.phases[0]), at(tc.phases[1]), at(tc.phases[2])
			var seen time.Time
			if tc.seen >= 0 {
				seen = at(tc.seen)
			}
			if got := s.split(at(tc.since), seen, at(tc.now)); got != tc.want {
				t.Errorf("split:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestRoundSpansKept: the spans of the last spanKeep rounds are kept.
func TestRoundSpansKept(t *testing.T) {
	var s roundSpans
	for i := range spanKeep + 10 {
		s.begin(t0.Add(time.Duration(i) * time.Second))
		s.end(t0.Add(time.Duration(i)*time.Second + time.Millisecond))
	}
	if len(s.ended) != spanKeep || !s.ended[0].start.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("kept %d spans from %v", len(s.ended), s.ended[0].start)
	}
}

// TestSlowDecisionLogsItsSplit: over the fake Nomad, a preemption for
// work blocked long ago logs its split on a line of its own, after the
// preemption's; a full read brought the blocking (the fake sends no
// events). Failed before: no such line.
func TestSlowDecisionLogsItsSplit(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	var out lockedLog
	r := newRoundRunner(t, f, withLogger(hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})))
	for i := range 3 {
		if _, err := r.round(time.Duration(i) * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	got := out.lines("decision split")
	if len(got) != 1 {
		t.Fatalf("want one split line for ml/nb's preemption, got %q", got)
	}
	for _, w := range []string{"job=ml/train", "for=ml/nb", `stream="unknown (a full read)"`, "idle=", "in_rounds=", "rounds_before=",
		"observe=", "recover=", "plan=", "act_before="} {
		if !strings.Contains(got[0], w) {
			t.Errorf("lacks %s: %q", w, got[0])
		}
	}
}

// TestBlockingSeenByTheStream: the cache keeps when the event stream
// first brought each blocked evaluation (a decision's stream lag), through
// Nomad's re-sends of it and through a resync's full read; one a full
// read brought has none.
func TestBlockingSeenByTheStream(t *testing.T) {
	empty := func(index uint64, blocked map[string]blockedEval) *clusterRead {
		return &clusterRead{index: index, nodes: map[string]cachedNode{}, jobs: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{},
			blocked: blocked, seen: map[string]uint64{}}
	}
	c := newClusterCache("steward")
	c.replace(empty(100, map[string]blockedEval{"ev0": {ns: "ml", job: "old"}}))
	before := time.Now()
	c.apply(event(t, 110, "Evaluation", "EvaluationUpdated", "Evaluation", fmt.Sprintf(evalJSON, "blocked")))
	first := c.blocked["ev1"].applied
	if first.Before(before) || first.After(time.Now()) {
		t.Fatalf("the stream's blocking was not noted when applied: %v", first)
	}
	time.Sleep(time.Millisecond)
	c.apply(event(t, 112, "Evaluation", "EvaluationUpdated", "Evaluation", fmt.Sprintf(evalJSON, "blocked")))
	if got := c.blocked["ev1"].applied; !got.Equal(first) {
		t.Errorf("a re-sent blocking moved when it was seen: %v, was %v", got, first)
	}
	c.replace(empty(120, map[string]blockedEval{"ev0": {ns: "ml", job: "old"}, "ev1": {ns: "ml", job: "train"}}))
	if got := c.blocked["ev1"].applied; !got.Equal(first) {
		t.Errorf("a resync lost when the stream brought the blocking: %v, was %v", got, first)
	}
	if got := c.blocked["ev0"].applied; !got.IsZero() {
		t.Errorf("a blocking only full reads brought has a time: %v", got)
	}
}
