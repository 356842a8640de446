package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLoadStatesReadsAtOnce: a new leader reads the job states
// stateReads at a time (a failover at 250 nodes waited seconds on one at
// a time), loads every one, and fails as a whole when a read fails.
func TestLoadStatesReadsAtOnce(t *testing.T) {
	cases := []struct {
		name string
		jobs int
		fail bool
	}{
		{"none", 0, false},
		{"fewer than the reads in flight", 3, false},
		{"many more than the reads in flight", 5 * stateReads, false},
		{"a read fails", 5 * stateReads, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			for i := range tc.jobs {
				st := &JobState{Namespace: "ml", ID: fmt.Sprintf("train-%03d", i), Status: StatusHeld, Reason: "r", Updated: t0}
				items, err := st.encode()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.PutVar(context.Background(), "steward", statePath(st.key()), items, false, 0); err != nil {
					t.Fatal(err)
				}
			}
			f.getDelay = time.Millisecond
			if tc.fail {
				f.fail["get steward steward/jobs/ml/train-007"] = errInjected
			}
			err := c.loadStates(context.Background())
			if tc.fail {
				if !errors.Is(err, errInjected) {
					t.Fatalf("load with a failed read: %v, want the read's error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.states()) != tc.jobs {
				t.Fatalf("%d states loaded, want %d", len(c.states()), tc.jobs)
			}
			for k, st := range c.states() {
				if !strings.HasPrefix(k.ID, "train-") || st.Status != StatusHeld || c.index[k] == 0 {
					t.Errorf("state %s: %+v, index %d", k, st, c.index[k])
				}
			}
		})
	}
}
