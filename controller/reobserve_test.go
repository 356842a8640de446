package controller

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"
)

// The recover phase reads the cluster again when it changed something
// (holds, stops, checkpoint signals), so that the plan sees its writes and
// the work that blocked meanwhile. With the event stream that read is of
// the cache; but a resync (a full read of every node, job, allocation and
// evaluation) that fell due during the round was made there, in the middle
// of the round: at 250 nodes a 3.09 s second read after six checkpoint
// signals, the largest part of eight decisions of 1.1-1.7 s (issue 33).
// The resync now waits for the next round's first read.
func TestRecoverRereadLeavesResync(t *testing.T) {
	cases := []struct {
		name string
		// resyncDue: the round's recover phase (its checkpoint signal)
		// ends past the resync period, begun before it.
		resyncDue bool
		// wantFull: full reads by the signal's round, and by the next.
		wantFull [2]int
	}{
		{name: "a resync due during the recover phase waits for the next round; the work that blocked meanwhile is planned on the cache",
			resyncDue: true, wantFull: [2]int{0, 1}},
		{name: "no resync due in either round: no full read", wantFull: [2]int{0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFakeNomad()
			preemptionCluster(f)
			// ml/nb2 (interactive, 2 GPUs) is submitted; Nomad blocks it
			// while the recover phase signals ml/train's checkpoint.
			nb2 := apiJob("ml", "nb2", "interactive", 60, 1, 2)
			f.cl().jobs["ml/nb2"] = nb2
			f.cl().index = 1000 // above the jobs' modify indexes, which the fake's writes return
			var mu sync.Mutex
			now := t0
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			setClock := func(at time.Time) { mu.Lock(); now = at; mu.Unlock() }
			c := testController(t, f, withClock(clock))
			c.reload = true
			c.obs.resync = 30 * time.Second
			if !tc.resyncDue {
				c.obs.resync = time.Hour
			}
			if _, err := c.obs.observe(ctx, t0, true); err != nil { // the follower's first read
				t.Fatal(err)
			}
			c.obs.cache.setFollowing(true)
			// The stream brings a round's writes: the cache as Nomad shows
			// it after them, at its index (so settle finds them).
			streamed := func() {
				rd, err := c.obs.readAll(ctx, false)
				if err != nil {
					t.Fatal(err)
				}
				c.obs.cache.replace(rd)
			}
			blockedAt := t0.Add(29800 * time.Millisecond)
			f.siteHook = func(call string) {
				if call != "signal ml a-train SIGUSR1" {
					return
				}
				if tc.resyncDue {
					setClock(t0.Add(31 * time.Second)) // the recover phase's calls took their time
				}
				ev, sum := apiBlockedEval(nb2, 1, blockedAt)
				f.mu.Lock()
				f.cl().evals, f.cl().summary["ml/nb2"] = append(f.cl().evals, ev), sum
				f.cl().index++
				index := f.cl().index
				f.mu.Unlock()
				payload, err := json.Marshal(ev)
				if err != nil {
					t.Error(err)
					return
				}
				c.obs.cache.apply(event(t, int(index), "Evaluation", "EvaluationUpdated", "Evaluation", string(payload)))
			}
			round := func(at time.Duration) int {
				setClock(t0.Add(at))
				before := c.obs.stats.fullReads
				if _, err := c.reconcile(ctx); err != nil {
					t.Fatalf("round at %s: %v", at, err)
				}
				streamed()
				f.cl().schedule(clock())
				return c.obs.stats.fullReads - before
			}
			round(28 * time.Second) // preempts ml/train for ml/nb
			full := round(28*time.Second + signalDelay + 500*time.Millisecond)
			if !callsHave(f, "signal ml a-train SIGUSR1") {
				t.Fatal("the recover phase sent no checkpoint signal")
			}
			if full != tc.wantFull[0] {
				t.Errorf("the signal's round read the cluster in full %d times, want %d", full, tc.wantFull[0])
			}
			w := c.latency.waits[jobKey{"ml", "nb2"}]
			if w == nil || !w.since.Equal(blockedAt) || w.rounds != 1 {
				t.Errorf("the work that blocked during the recover phase was not planned by its round: %+v", w)
			}
			if full := round(33 * time.Second); full != tc.wantFull[1] {
				t.Errorf("the next round read the cluster in full %d times, want %d", full, tc.wantFull[1])
			}
		})
	}
}

func callsHave(f *fakeNomad, call string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if c == call {
			return true
		}
	}
	return false
}
