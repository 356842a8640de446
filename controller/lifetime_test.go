package controller

import (
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
