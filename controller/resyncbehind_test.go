package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// slowNodes is the fake whose node list waits for release: a full read
// that takes its time, as at 250 nodes under load (0.9-4.9 s).
type slowNodes struct {
	*fakeNomad
	release chan struct{}
	mu      sync.Mutex
	lists   int
}

func (s *slowNodes) ListNodes(ctx context.Context, fresh bool) ([]*api.NodeListStub, uint64, error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	return s.fakeNomad.ListNodes(ctx, fresh)
}

func (s *slowNodes) listed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

// A resync (the full read every -resync, 30 s) was made by the round it
// fell due in, before its plan: at 250 nodes a round's observe took 4.9 s
// with it, and the work that blocked meanwhile waited for it (issue 33).
// Where the stream keeps the cache, the read now runs behind the rounds
// and is merged when it ends; a round reads in full itself only when it
// cannot trust the cache (not followed, or its own writes not back).
func TestResyncBehindRounds(t *testing.T) {
	cases := []struct {
		name      string
		following bool
		wantWait  bool // the round waits for the full read
	}{
		{name: "the stream keeps the cache: the round plans on it, the resync merged when read", following: true},
		{name: "no stream: the round reads in full itself", following: false, wantWait: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := newFakeNomad()
			preemptionCluster(f)
			n := &slowNodes{fakeNomad: f, release: make(chan struct{})}
			o := newObserver(n, "steward")
			o.resync, o.behind = 30*time.Second, true
			close(n.release)
			if _, err := o.observe(ctx, t0, false); err != nil { // the start's read
				t.Fatal(err)
			}
			n.release = make(chan struct{})
			o.cache.setFollowing(tc.following)
			// Nomad shows a job the stream did not bring: a resync finds it.
			f.mu.Lock()
			f.cl().jobs["ml/late"] = apiJob("ml", "late", "interactive", 60, 1, 1)
			f.mu.Unlock()

			done := make(chan *Observation, 1)
			go func() {
				obs, err := o.observe(ctx, t0.Add(31*time.Second), false) // the resync is due
				if err != nil {
					t.Error(err)
				}
				done <- obs
			}()
			var obs *Observation
			select {
			case obs = <-done:
				if tc.wantWait {
					t.Fatal("the round did not read the cluster in full")
				}
			case <-time.After(2 * time.Second):
				if !tc.wantWait {
					t.Fatal("the round waited for the resync's full read")
				}
			}
			if !tc.wantWait {
				if _, seen := obs.Jobs[jobKey{"ml", "late"}]; seen {
					t.Error("the round saw the resync's job before the read")
				}
				waitUntil(t, "the resync's read to start", func() bool { return n.listed() == 2 })
				// A round while the read runs starts no second one.
				if _, err := o.observe(ctx, t0.Add(62*time.Second), false); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond) // time for a second read to list the nodes
				if got := n.listed(); got != 2 {
					t.Errorf("%d node lists, want 2 (the start's and one resync)", got)
				}
			}
			close(n.release)
			if tc.wantWait {
				obs = <-done
			} else {
				waitUntil(t, "the resync behind the rounds to be merged", func() bool {
					o.mu.Lock()
					defer o.mu.Unlock()
					return o.stats.fullReads == 2 && !o.resyncing
				})
				var err error
				// No resync due since the last began.
				if obs, err = o.observe(ctx, t0.Add(45*time.Second), false); err != nil {
					t.Fatal(err)
				}
			}
			if _, seen := obs.Jobs[jobKey{"ml", "late"}]; !seen {
				t.Error("the resync's read did not reach the cache")
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			if got := o.stats.fullReads; got != 2 {
				t.Errorf("%d full reads, want 2", got)
			}
		})
	}
}

// A resync behind the rounds that fails leaves the next round to read in
// full itself: a Nomad that stopped answering fails the rounds, and the
// term ends within about -resync + -round-timeout (stepdown.go), as when
// the rounds made the resync; a Nomad back by then gives the round its
// read.
func TestResyncBehindFails(t *testing.T) {
	cases := []struct {
		name     string
		stillOut bool // Nomad still does not answer at the next round
	}{
		{name: "Nomad back: the next round reads in full itself and the resync is done"},
		{name: "Nomad still out: the next round fails on its read", stillOut: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFakeNomad()
			preemptionCluster(f)
			o := newObserver(f, "steward")
			o.resync, o.behind = 30*time.Second, true
			if _, err := o.observe(ctx, t0, false); err != nil { // the start's read
				t.Fatal(err)
			}
			o.cache.setFollowing(true)
			f.mu.Lock()
			f.fail = map[string]error{"read nodes": errInjected}
			f.mu.Unlock()
			if _, err := o.observe(ctx, t0.Add(31*time.Second), false); err != nil {
				t.Fatalf("the round failed on the resync behind it: %v", err)
			}
			waitUntil(t, "the resync behind the rounds to end", func() bool {
				o.mu.Lock()
				defer o.mu.Unlock()
				return !o.resyncing
			})
			if !tc.stillOut {
				f.mu.Lock()
				f.fail = map[string]error{}
				f.mu.Unlock()
			}
			_, err := o.observe(ctx, t0.Add(32*time.Second), false)
			if tc.stillOut != (err != nil) {
				t.Fatalf("the next round's read: error %v, want one: %v", err, tc.stillOut)
			}
			if want := map[bool]int{false: 2, true: 1}[tc.stillOut]; o.stats.fullReads != want {
				t.Errorf("%d full reads, want %d", o.stats.fullReads, want)
			}
		})
	}
}
