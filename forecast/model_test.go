package forecast

import (
	"context"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestReplayModel: the replay's model of time and work, one named case
// per fix: starts between plans, the last step, work done before.
func TestReplayModel(t *testing.T) {
	h := time.Hour
	// One node of 8 GPUs held by one run of a higher tier (no victim); a
	// job of 8 GPUs waits for it.
	cluster := func(age time.Duration) *engine.Snapshot {
		return &engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
			Allocs:  []engine.Alloc{running("b", "run", "interactive", "n1", 8, age, 0)},
			Waiting: []engine.Demand{waiting("a", "next", "training", 1, 8, time.Minute)}}
	}
	tests := []struct {
		name   string
		snap   *engine.Snapshot
		est    map[engine.JobRef]Estimate
		done   map[engine.JobRef]time.Duration
		opt    Options
		lo, hi time.Duration // the P50 from t0
	}{
		{"a start between two plans is when the GPUs were free, not the next plan", cluster(0),
			map[engine.JobRef]Estimate{ref("b", "run"): {History: []time.Duration{h}}},
			nil, Options{Seed: 1, MinStep: 3 * h}, 50 * time.Minute, 70 * time.Minute},
		{"the last step ends at the horizon: a start 6 days ahead is within 7", cluster(0),
			map[engine.JobRef]Estimate{ref("b", "run"): {History: []time.Duration{150 * h}}},
			nil, Options{Seed: 1, MaxPlans: 12}, 130 * h, 168 * h},
		{"a resumed run has done what it did before too", cluster(h),
			map[engine.JobRef]Estimate{ref("b", "run"): {History: []time.Duration{10 * h}}},
			map[engine.JobRef]time.Duration{ref("b", "run"): 9 * h}, Options{Seed: 1}, 0, 2 * h},
		{"without the work done, the allocation's age", cluster(h),
			map[engine.JobRef]Estimate{ref("b", "run"): {History: []time.Duration{10 * h}}},
			nil, Options{Seed: 1}, 7 * h, 11 * h},
		{"a job waiting again after a preemption runs only the rest", &engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
			Waiting: []engine.Demand{waiting("a", "back", "training", 1, 8, 2*h), waiting("a", "next", "training", 1, 8, time.Minute)}},
			map[engine.JobRef]Estimate{ref("a", "back"): {History: []time.Duration{10 * h}}},
			map[engine.JobRef]time.Duration{ref("a", "back"): 9 * h}, Options{Seed: 1}, 0, 2 * h},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Engine: testEngine(t), Snapshot: tc.snap, Now: t0, Estimates: tc.est, Done: tc.done}
			res := Run(context.Background(), in, tc.opt)
			f := res.Jobs[ref("a", "next")]
			if f == nil || f.P50.IsZero() {
				t.Fatalf("forecast %+v: want a P50", f)
			}
			if got := f.P50.Sub(t0); got < tc.lo || got > tc.hi {
				t.Errorf("P50 %s after now, want %s to %s", got, tc.lo, tc.hi)
			}
		})
	}
}

// TestBatchQuantiles: jobs of one tenant, tier and size submitted
// together share their run time's quantile (within BatchJitter); others
// draw their own.
func TestBatchQuantiles(t *testing.T) {
	m := time.Minute
	tests := []struct {
		name string
		b    engine.Demand
		same bool
	}{
		{"submitted a minute apart: one batch", waiting("a", "b", "training", 1, 1, 59*m), true},
		{"submitted two hours apart: two batches", waiting("a", "b", "training", 1, 1, 3*time.Hour), false},
		{"another tenant: its own batch", waiting("c", "b", "training", 1, 1, 59*m), false},
		{"another size: its own batch", waiting("a", "b", "training", 1, 2, 59*m), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Over many seeds two independent quantiles are more than
			// 2×BatchJitter apart most of the time; a batch's never.
			apart := 0
			for seed := range uint64(50) {
				s := &engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
					Waiting: []engine.Demand{waiting("a", "a", "training", 1, 1, time.Hour), tc.b}}
				r := newReplay(&Input{Engine: testEngine(t), Snapshot: s, Now: t0}, Options{Seed: seed}.withDefaults(), 0, 1)
				if d := r.demands[0].u - r.demands[1].u; d > 2*BatchJitter || d < -2*BatchJitter {
					apart++
				}
			}
			if tc.same && apart > 0 || !tc.same && apart < 25 {
				t.Errorf("quantiles apart in %d of 50 replays; same batch: %v", apart, tc.same)
			}
		})
	}
}
