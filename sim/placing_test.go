package sim

import (
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestKeepMarksLeavesWorkPlacedNow: a placeholder kept for a held
// beneficiary's new marks leaves the free GPUs set aside for work in
// Nomad's queue, which Nomad places on them in this round
// (nomadmodel.PlacingMarks), as the controller's wantedPlaceholders does.
// Before, it held them too: the queued work waited for GPUs set aside for
// it, or another victim was preempted in vain.
func TestKeepMarksLeavesWorkPlacedNow(t *testing.T) {
	tests := []struct {
		name     string
		free     int // free GPUs on the node
		placing  int // GPUs set aside there for queued work (Y)
		yState   jobState
		wantHeld int // of X's 4 GPUs set aside
	}{
		{"free GPUs beside the queued work's: held", 6, 4, queued, 2},
		{"all free GPUs the queued work's: none held", 4, 4, queued, 0},
		{"set aside for held work: its placeholder's own, counted once", 8, 4, held, 4},
		{"nothing set aside for others: all held", 8, 0, queued, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, tinyPolicy)
			tr := mustTrace(t, `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
X,0,8,1,3600,ml,training,never
Y,0,4,1,3600,ml,training,never`)
			if _, err := Derive(tr, DeriveOptions{Seed: 1, Policy: p, Nodes: 1, GPUsPerNode: 8}); err != nil {
				t.Fatal(err)
			}
			s, err := newSimulator(tr.Jobs, Config{Policy: p, Nodes: 1, GPUsPerNode: 8, CheckpointEvery: 20 * time.Minute,
				CheckpointCost: time.Minute, PlanInterval: 30 * time.Second}, Steward)
			if err != nil {
				t.Fatal(err)
			}
			x, y := s.byRef[engine.JobRef{Namespace: "ml", ID: "X"}], s.byRef[engine.JobRef{Namespace: "ml", ID: "Y"}]
			s.jobs[x].state, s.jobs[y].state = held, tt.yState
			s.cl.free[0] = tt.free
			if tt.placing > 0 {
				s.marks = append(s.marks, simMark{node: 0, gpus: tt.placing, bene: y, until: time.Hour})
			}
			s.keepMarks([]engine.Earmark{{NodeID: s.cl.nodeIDs[0], GPUs: 4, For: s.jobs[x].ref, ForGroup: "main"}})
			got := s.marks[len(s.marks)-1]
			if got.bene != x || got.held != tt.wantHeld {
				t.Errorf("X's mark holds %d GPUs (bene %d), want %d", got.held, got.bene, tt.wantHeld)
			}
		})
	}
}
