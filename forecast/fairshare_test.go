package forecast

import (
	"context"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// With fair share over time, the replay accounts each tenant's decayed
// usage as virtual time passes (fairshare.go). a used a little less than
// b before the forecast, so a's waiting work ranks ahead of b's equal work;
// while a's running job borrows a GPU for the 20 minutes until c's ends, a's
// usage passes b's, and when c's GPU frees it is b's turn. Frozen at the
// forecast's start (before), a went first however long it borrowed.
func TestReplayFairShareAccrues(t *testing.T) {
	hour := Estimate{Expected: time.Hour, Source: FromExpected}
	short := Estimate{Expected: 20 * time.Minute, Source: FromExpected}
	long := Estimate{Expected: 30 * time.Hour, Source: FromExpected}
	tests := []struct {
		name string
		// aRuns: a holds a GPU (beyond its reserve of none) meanwhile.
		aRuns  bool
		bFirst bool // b/b1 starts before a/a1
	}{
		{name: "a borrows meanwhile: its usage passes b's, b goes first", aRuns: true, bFirst: true},
		{name: "a borrows nothing meanwhile: a goes first still", aRuns: false, bFirst: false},
	}
	p, diags := policy.ParseBytes("test.hcl", []byte(`
tier "training" {
  priority = 40
}
tenant "a" {}
tenant "b" {}
tenant "c" {}
preemption {
  fair_share_half_life = "24h"
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := engine.New(p)
			// Usage in GPU-seconds: 20 minutes borrowing one GPU is 1,200.
			snap := &engine.Snapshot{Nodes: []engine.Node{node("n1", 1)},
				Allocs: []engine.Alloc{running("c", "c0", "training", "n1", 1, time.Minute, 0)},
				Waiting: []engine.Demand{waiting("a", "a1", "training", 1, 1, time.Minute),
					waiting("b", "b1", "training", 1, 1, time.Minute)},
				Usage: map[string]float64{"a": 100, "b": 200}}
			est := map[engine.JobRef]Estimate{ref("c", "c0"): short, ref("a", "a1"): hour, ref("b", "b1"): hour}
			if tc.aRuns {
				snap.Nodes = append(snap.Nodes, node("n2", 1))
				snap.Allocs = append(snap.Allocs, running("a", "a0", "training", "n2", 1, time.Minute, 0))
				est[ref("a", "a0")] = long
			}
			res := Run(context.Background(), Input{Engine: e, Snapshot: snap, Now: t0, Estimates: est}, Options{Seed: 1})
			a1, b1 := res.Jobs[ref("a", "a1")], res.Jobs[ref("b", "b1")]
			if a1 == nil || b1 == nil || b1.P50.IsZero() {
				t.Fatalf("forecasts a1 %+v, b1 %+v: want b1 started", a1, b1)
			}
			got := a1.P50.IsZero() || b1.P50.Before(a1.P50)
			if got != tc.bFirst {
				t.Errorf("a/a1 P50 %s, b/b1 P50 %s from now: b first %v, want %v", a1.P50.Sub(t0), b1.P50.Sub(t0), got, tc.bFirst)
			}
			if snap.Usage["a"] != 100 || snap.Usage["b"] != 200 {
				t.Errorf("the snapshot's usage changed to %v: it is read only", snap.Usage)
			}
		})
	}
}

// A cluster replayed in shares keeps the tenants' usage, scaled as their
// reserves and limits are: each share orders its waiting work by it.
// Before, a share's snapshot had none, as if fair share were off.
func TestReducedInputKeepsUsage(t *testing.T) {
	tests := []struct {
		name  string
		usage map[string]float64
		want  map[string]float64
	}{
		{name: "usage scaled by the shares", usage: map[string]float64{"a": 1000, "b": 10}, want: map[string]float64{"a": 500, "b": 5}},
		{name: "no usage: none", usage: nil, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := &engine.Snapshot{Nodes: []engine.Node{node("n1", 8), node("n2", 8), node("n3", 8), node("n4", 8)},
				Waiting: []engine.Demand{waiting("a", "a1", "training", 1, 1, time.Minute)}, Usage: tc.usage}
			in := Input{Engine: testEngine(t), Snapshot: snap, Now: t0}
			rd := newReduction(&in, 2)
			for s := range 2 {
				got := rd.input(&in, s).Snapshot.Usage
				if len(got) != len(tc.want) {
					t.Fatalf("share %d usage %v, want %v", s, got, tc.want)
				}
				for k, v := range tc.want {
					if got[k] != v {
						t.Errorf("share %d usage %v, want %v", s, got, tc.want)
					}
				}
			}
			if tc.usage != nil && snap.Usage["a"] != 1000 {
				t.Errorf("the snapshot's usage changed to %v: it is read only", snap.Usage)
			}
		})
	}
}
