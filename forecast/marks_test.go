package forecast

import (
	"context"
	"testing"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestPlaceOnMarksBeyondFreeGPUs: GPUs set aside for a job (an earmark of
// 2 on a node) while only 1 of them is free yet (the victim still runs),
// and the job waits for 2 allocations of 1 GPU. The replay places one
// there, not two: the second would take GPUs the node does not have. It
// panicked (slice bounds out of range [-1:]) in both controllers of the
// soak (make soak, seed 29), ending them: room on a node counted its
// marks and its free GPUs, but not what this demand had taken there
// already.
func TestPlaceOnMarksBeyondFreeGPUs(t *testing.T) {
	snap := &engine.Snapshot{
		Nodes:    []engine.Node{node("n1", 2)},
		Allocs:   []engine.Alloc{running("b", "victim", "training", "n1", 1, 0, 0)},
		Waiting:  []engine.Demand{waiting("a", "x", "interactive", 2, 1, 0)},
		Earmarks: []engine.Earmark{{NodeID: "n1", GPUs: 2, For: ref("a", "x")}},
	}
	snap.Waiting[0].Job.Gang = false
	snap.Waiting[0].Held = false // queued in Nomad: placed by the replay's Nomad
	e := testEngine(t)
	res := Run(context.Background(), Input{Engine: e, Snapshot: snap, Now: t0}, Options{Seed: 1, Replays: 4})
	if res.Replays != 4 {
		t.Fatalf("replays: %d, want 4", res.Replays)
	}
}
