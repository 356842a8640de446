package controller

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLifetimePreemptions: the job state counts preemptions over the job's
// life beside the recent times, keeps the state for it, passes it to the
// engine, and the record shows it and, at preemption.max_per_job, the
// protection.
func TestLifetimePreemptions(t *testing.T) {
	p := testPolicy(t)
	p.Preemption.MaxPerJob = 3
	train := job("ml", "train", "training", 40, 1, 1)
	tests := []struct {
		name          string
		recent        []time.Time // saved before this preemption
		total         int
		wantTotal     int
		wantProtected bool
	}{
		{name: "the first preemption counts 1", wantTotal: 1},
		{name: "a state saved before the count existed starts from its recent times",
			recent: []time.Time{t0.Add(-2 * time.Hour)}, wantTotal: 2},
		{name: "recent times trimmed away leave the count", total: 1, wantTotal: 2},
		{name: "reaching max_per_job shows the protection", total: 2, wantTotal: 3, wantProtected: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &JobState{Namespace: "ml", ID: "train", Preemptions: tc.recent, PreemptedTotal: tc.total}
			st.preempted(t0)
			if st.PreemptedTotal != tc.wantTotal || len(st.Preemptions) != len(tc.recent)+1 {
				t.Fatalf("total %d, %d recent; want %d, %d", st.PreemptedTotal, len(st.Preemptions), tc.wantTotal, len(tc.recent)+1)
			}
			if ej := engineJob(p, train, st); ej.PreemptionsTotal != tc.wantTotal {
				t.Errorf("engine job counts %d, want %d", ej.PreemptionsTotal, tc.wantTotal)
			}
			// A day later the recent times are trimmed; the count and the
			// state stay.
			later := t0.Add(48 * time.Hour)
			if st.empty(later) {
				t.Errorf("state with a lifetime count is empty: it would be forgotten")
			}
			items := recordItems(p, st, train, time.Time{}, later)
			if items["steward_preemptions"] != "0" || items["steward_preemptions_total"] != strconv.Itoa(tc.wantTotal) {
				t.Errorf("record %v", items)
			}
			if got := items["steward_protected"]; (got != "") != tc.wantProtected {
				t.Errorf("steward_protected %q, want set: %v", got, tc.wantProtected)
			} else if tc.wantProtected && !strings.HasPrefix(got, "preempted 3 times, the most over its life (preemption.max_per_job = 3): protected until it ends") {
				t.Errorf("steward_protected %q", got)
			}
		})
	}
}

// TestPendingEvictionsCount: an eviction counts toward the eviction cap
// and the lifetime bound from the moment it is decided, not only once its
// stop took effect after the checkpoint grace. Soak seed 31 found the
// hole: a job preempted a third time was preempted a fourth time 3 s
// later, while the third was still checkpointing (cap 3).
func TestPendingEvictionsCount(t *testing.T) {
	p := testPolicy(t)
	train := job("ml", "train", "training", 40, 2, 1)
	past := []time.Time{t0.Add(-20 * time.Minute), t0.Add(-10 * time.Minute)}
	tests := []struct {
		name      string
		st        JobState
		wantTimes int // what the engine sees in the hour
		wantTotal int
	}{
		{name: "a preemption still checkpointing counts",
			st:        JobState{Preemptions: past, PreemptedTotal: 2, Draining: []*Drain{{Group: "g", Kind: "preempt", Requeue: true, Decided: t0.Add(-3 * time.Second)}}},
			wantTimes: 3, wantTotal: 3},
		{name: "an idle release still checkpointing counts",
			st:        JobState{Preemptions: past, PreemptedTotal: 2, Draining: []*Drain{{Group: "g", Kind: "idle-stop", Decided: t0.Add(-3 * time.Second)}}},
			wantTimes: 3, wantTotal: 3},
		{name: "a pause is no eviction",
			st:        JobState{Preemptions: past, PreemptedTotal: 2, Draining: []*Drain{{Group: "g", Kind: "pause", Decided: t0}}},
			wantTimes: 2, wantTotal: 2},
		{name: "work held before it was admitted was not evicted",
			st:        JobState{Preemptions: past, PreemptedTotal: 2, Draining: []*Drain{{Group: "g", Kind: "preempt", Unadmitted: true, Decided: t0}}},
			wantTimes: 2, wantTotal: 2},
		{name: "a finished drain is counted by its scale and not again",
			st:        JobState{Preemptions: append(slices.Clone(past), t0), PreemptedTotal: 3, Draining: []*Drain{{Group: "g", Kind: "preempt", Decided: t0, Finished: true}}},
			wantTimes: 3, wantTotal: 3},
		{name: "a hold whose scale was not taken counts once for all its groups",
			st:        JobState{Preemptions: past, PreemptedTotal: 2, Held: map[string]*Held{"a": {Count: 1, Evicts: t0}, "b": {Count: 1, Evicts: t0}}},
			wantTimes: 3, wantTotal: 3},
		{name: "nothing pending leaves the counts as saved",
			st:        JobState{Preemptions: past, PreemptedTotal: 7},
			wantTimes: 2, wantTotal: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			st.Namespace, st.ID = "ml", "train"
			saved := len(st.Preemptions)
			ej := engineJob(p, train, &st)
			if len(ej.Preemptions) != tc.wantTimes || ej.PreemptionsTotal != tc.wantTotal {
				t.Errorf("engine sees %d preemptions, %d over the job's life; want %d, %d", len(ej.Preemptions), ej.PreemptionsTotal, tc.wantTimes, tc.wantTotal)
			}
			if !slices.IsSortedFunc(ej.Preemptions, func(a, b time.Time) int { return a.Compare(b) }) {
				t.Errorf("times out of order: %v", ej.Preemptions)
			}
			if len(st.Preemptions) != saved {
				t.Errorf("the saved state changed: %d recent times, was %d", len(st.Preemptions), saved)
			}
		})
	}
}
