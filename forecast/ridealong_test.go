package forecast

import (
	"context"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// TestRideAlongHint: research/train holds the only node's 8 GPUs for 2
// hours; product/wait2 (2 GPUs) and research/wait (4) wait behind it. After
// an hour's wait the default promotion lets product/wait2 preempt
// research/train, and research/wait starts on GPUs that preemption freed,
// neither when a run ended nor for victims of its own. Its hint still
// names what it waits for (e2e's TestQueueForecast, which found the hint
// empty: the cause was set only from runs ending and a job's own victims).
func TestRideAlongHint(t *testing.T) {
	p, diags := policy.ParseBytes("test.hcl", []byte(`
tier "training" {
  priority    = 40
  preemptible = true
}
tenant "research" {
  limit = 16
}
tenant "product" {
  limit = 8
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e := engine.New(p)
	for _, tc := range []struct {
		name string
		gap  time.Duration // research/wait waits this much longer
	}{
		{"seen waiting in the same round", 0},
		{"research/wait seen a round earlier", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
				Allocs: []engine.Alloc{running("research", "train", "training", "n1", 8, time.Second, 0)},
				Waiting: []engine.Demand{waiting("research", "wait", "training", 1, 4, time.Second+tc.gap),
					waiting("product", "wait2", "training", 1, 2, time.Second)}}
			plan := e.Plan(snap, t0)
			in := Input{Engine: e, Snapshot: snap, Now: t0,
				Estimates: map[engine.JobRef]Estimate{ref("research", "train"): {Expected: 2 * time.Hour, Source: FromExpected}}}
			q := Queue(p, snap, plan)
			hints := Hints(in, q, plan, Run(context.Background(), in, Options{Seed: 1}), DefaultHintPlans)
			wantHint(t, hints[ref("research", "wait")], "starts when research/train is preempted for product/wait2")
		})
	}
}
