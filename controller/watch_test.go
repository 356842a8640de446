package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestResubscribeReadsInFull: the event stream is cut and resubscribed.
// Nomad may have skipped events meanwhile (its buffer holds only the last
// ones), or its state may have gone back (a snapshot restore): the cache
// follows the new stream only once a full read made it what Nomad holds.
// Before, it was marked current at once and kept what it had: an
// allocation stopped in the gap stayed running, and one the restore undid
// stayed for good (a full read merged around it, its cached index being
// newer).
func TestResubscribeReadsInFull(t *testing.T) {
	cases := []struct {
		name string
		// before runs while the first stream follows: events the cache
		// takes.
		before func(t *testing.T, cl *fakeCluster)
		// gap changes Nomad while the stream is cut, with no event.
		gap      func(cl *fakeCluster)
		gone     string // an allocation the cache must no longer hold
		resynced bool   // also after a full read (resync) that merges
	}{
		{
			name:   "an allocation stopped while the stream was cut, its event beyond Nomad's buffer",
			before: func(*testing.T, *fakeCluster) {},
			gap: func(cl *fakeCluster) {
				cl.stopAlloc("a-train")
				cl.index = 120
			},
			gone: "a-train",
		},
		{
			name: "a snapshot restore took Nomad back to before an allocation the cache holds",
			before: func(t *testing.T, cl *fakeCluster) {
				send(t, cl.events, event(t, 130, "Allocation", "AllocationUpdated", "Allocation", fmt.Sprintf(allocJSON, "running", "run")))
			},
			gap:      func(cl *fakeCluster) { cl.index = 105 },
			gone:     "a1-0000-0000",
			resynced: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			preemptionCluster(f)
			// train runs 2-GPU allocations, as the event's allocation.
			*f.cl().jobs["ml/train"].TaskGroups[0].Tasks[0].Resources.Devices[0].Count = 2
			f.cl().index = 100
			f.cl().events = make(chan *api.Events)
			c := testController(t, f, withClock(time.Now), withConfig(func(cfg *Config) { cfg.MaxBackoff = 10 * time.Millisecond }))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := c.obs.observe(ctx, time.Now(), true); err != nil {
				t.Fatal(err)
			}
			// The fake's stream ignores ctx: the watch ends with the test
			// binary.
			go c.watch(ctx)

			waitUntil(t, "the cache follows the stream", func() bool { return c.obs.cache.follows() })
			holds := func() bool {
				c.obs.cache.mu.Lock()
				defer c.obs.cache.mu.Unlock()
				_, ok := c.obs.cache.allocs[tc.gone]
				return ok
			}
			tc.before(t, f.cl())
			waitUntil(t, "the cache holds "+tc.gone, holds)
			f.mu.Lock()
			tc.gap(f.cl())
			f.mu.Unlock()
			send(t, f.cl().events, &api.Events{Err: errors.New("stream cut")})

			waitUntil(t, "the resubscribed cache no longer holds "+tc.gone, func() bool {
				return c.obs.cache.follows() && !holds()
			})
			if tc.resynced {
				if _, err := c.obs.observe(ctx, time.Now(), true); err != nil {
					t.Fatal(err)
				}
				if holds() {
					t.Errorf("a full read brought %s back into the cache", tc.gone)
				}
			}
		})
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// send delivers an event batch to the watch, or fails the test.
func send(t *testing.T, ch chan *api.Events, es *api.Events) {
	t.Helper()
	select {
	case ch <- es:
	case <-time.After(3 * time.Second):
		t.Fatal("the watch took no event for 3s")
	}
}
