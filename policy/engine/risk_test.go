package engine

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestSinceCheckpoint(t *testing.T) {
	now := t0
	tests := []struct {
		name         string
		started, cpt time.Time
		want         uint64
	}{
		{"no checkpoint: since the start", now.Add(-time.Hour), time.Time{}, 3600},
		{"checkpoint after the start", now.Add(-time.Hour), now.Add(-time.Minute), 60},
		{"checkpoint before the start: since the start", now.Add(-time.Hour), now.Add(-2 * time.Hour), 3600},
		{"checkpoint in the future: nothing at risk", now.Add(-time.Hour), now.Add(time.Minute), 0},
		{"start in the future: nothing at risk", now.Add(time.Hour), time.Time{}, 0},
		{"zero start: the longest duration, no overflow", time.Time{}, time.Time{}, uint64(min(time.Duration(maxRisk), now.Sub(time.Time{})/time.Second))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Alloc{StartedAt: tt.started, CheckpointAt: tt.cpt, GPUIDs: []string{"g0", "g1"}}
			if got := sinceCheckpoint(a, now); got != tt.want {
				t.Errorf("sinceCheckpoint = %d, want %d", got, tt.want)
			}
		})
	}
}

// A gang's risk is its members' mean, weighted by their GPUs: a member
// that checkpointed does not make the whole gang look safe.
func TestAtRiskGang(t *testing.T) {
	job := Job{Ref: JobRef{"ml", "g"}, Tier: "training", Priority: 40, Gang: true}
	s := &Snapshot{
		Nodes: []Node{{ID: "n1", GPUs: 8}, {ID: "n2", GPUs: 8}},
		Allocs: []Alloc{
			{ID: "a1", Job: job, Group: "main", NodeID: "n1", GPUIDs: []string{"0", "1", "2", "3", "4", "5"},
				StartedAt: t0.Add(-time.Hour), CheckpointAt: t0.Add(-10 * time.Minute)},
			{ID: "a2", Job: job, Group: "main", NodeID: "n2", GPUIDs: []string{"0", "1"}, StartedAt: t0.Add(-time.Hour)},
		},
	}
	st := newState(New(testPolicy(nil)), s, t0)
	if len(st.units) != 1 {
		t.Fatalf("%d units, want one gang", len(st.units))
	}
	// (6 GPUs × 600 s + 2 GPUs × 3600 s) / 8 GPUs
	if got, want := st.atRisk(&st.units[0]), uint64((6*600+2*3600)/8); got != want {
		t.Errorf("atRisk = %d, want %d", got, want)
	}
}

// BenchmarkPlanCheckpoints is BenchmarkPlan with half the allocations
// reporting a checkpoint, so that the victim keys take their slower path.
func BenchmarkPlanCheckpoints(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	nodes := 10000
	s := genCluster(r, nodes, 8, nodes*10, nodes, 8, t0)
	for i := range s.Allocs {
		if i%2 == 0 {
			s.Allocs[i].CheckpointAt = t0.Add(-time.Duration(r.IntN(3600)) * time.Second)
		}
	}
	benchPlan(b, s, nodes)
}
