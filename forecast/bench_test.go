package forecast

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

const benchPolicyHCL = `
tier "inference" {
  priority    = 90
  preemptible = false
}
tier "build" {
  priority    = 80
  preemptible = false
}
tier "interactive" {
  priority = 60
}
tier "training" {
  priority = 40
}
preemption {
  min_runtime = "10m"
  grace       = "2m"
}
`

// benchCluster is the shape of the engine's benchmark (docs/evaluation.md,
// "Benchmarks"): n nodes of 8 GPUs, full, with 4 allocations of 2 GPUs
// each, and n waiting demands of 1–8 GPUs across 8 tenants and 4 tiers;
// half the jobs say their run time, the rest have a history of 20 runs;
// n jobs of the waiting ones' shapes arrived in the last day.
func benchCluster(b *testing.B, n int) (*engine.Engine, *engine.Snapshot, map[engine.JobRef]Estimate, []Arrival) {
	src := benchPolicyHCL
	for t := range 8 {
		src += fmt.Sprintf("tenant \"t%d\" {\n  reserve = %d\n  limit = %d\n}\n", t, n/2, n*3)
	}
	p, diags := policy.ParseBytes("bench.hcl", []byte(src))
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	tiers := []string{"inference", "build", "interactive", "training"}
	prio := map[string]int{"inference": 90, "build": 80, "interactive": 60, "training": 40}
	s := &engine.Snapshot{}
	est := map[engine.JobRef]Estimate{}
	hist := make([]time.Duration, 20)
	for i := range hist {
		hist[i] = time.Duration(10+rng.IntN(300)) * time.Minute
	}
	for i := range n {
		id := fmt.Sprintf("node-%05d", i)
		s.Nodes = append(s.Nodes, engine.Node{ID: id, NodePool: "default", GPUs: 8})
		for k := range 4 {
			tier := tiers[2+rng.IntN(2)]
			ref := engine.JobRef{Namespace: fmt.Sprintf("t%d", rng.IntN(8)), ID: fmt.Sprintf("run-%d-%d", i, k)}
			s.Allocs = append(s.Allocs, engine.Alloc{ID: ref.ID, Job: engine.Job{Ref: ref, Tier: tier, Priority: prio[tier]},
				Group: "main", NodeID: id, GPUIDs: []string{fmt.Sprintf("g%d", 2*k), fmt.Sprintf("g%d", 2*k+1)},
				StartedAt: t0.Add(-time.Duration(rng.IntN(600)) * time.Minute)})
			if k%2 == 0 {
				est[ref] = Estimate{Expected: time.Duration(60+rng.IntN(600)) * time.Minute}
			} else {
				est[ref] = Estimate{History: hist}
			}
		}
	}
	for i := range n {
		tier := tiers[rng.IntN(4)]
		ref := engine.JobRef{Namespace: fmt.Sprintf("t%d", rng.IntN(8)), ID: fmt.Sprintf("wait-%d", i)}
		s.Waiting = append(s.Waiting, engine.Demand{Job: engine.Job{Ref: ref, Tier: tier, Priority: prio[tier]}, Group: "main",
			GPUsPerAlloc: 1 + rng.IntN(8), Count: 1, Since: t0.Add(-time.Duration(rng.IntN(600)) * time.Minute), Held: true})
		est[ref] = Estimate{History: hist}
	}
	var arr []Arrival
	for i := range n {
		d := s.Waiting[i]
		d.Held, d.Since = false, t0.Add(-time.Duration(n-i)*24*time.Hour/time.Duration(n))
		arr = append(arr, Arrival{At: d.Since, Demands: []engine.Demand{d}, Estimate: Estimate{History: hist}})
	}
	return engine.New(p), s, est, arr
}

// BenchmarkForecast is one forecast (the plan, the queue, the replays
// and the hints) on clusters of the engine benchmark's shape, with the
// options the controller gives (controller.forecastOptions): every replay
// (10, of at most 150 plans, on at most DefaultMaxNodes nodes: a larger
// cluster is replayed a share at a time), and the hint plans half a
// second affords (32 at 1,000 nodes, 6 at 10,000 at 80 ms a plan).
func BenchmarkForecast(b *testing.B) {
	for _, tc := range []struct {
		nodes int
		opt   Options
		hints int
	}{
		{100, Options{}, DefaultHintPlans},
		{1000, Options{}, DefaultHintPlans},
		{10000, Options{}, 6},
	} {
		b.Run(fmt.Sprintf("nodes=%d/replays=%d/plans=%d", tc.nodes, tc.opt.withDefaults().Replays, tc.opt.withDefaults().MaxPlans), func(b *testing.B) {
			e, snap, est, arr := benchCluster(b, tc.nodes)
			in := Input{Engine: e, Snapshot: snap, Now: t0, Estimates: est, Arrivals: arr, ArrivalsSince: t0.Add(-ArrivalWindow)}
			b.ResetTimer()
			plans, replays, shares := 0, 0, 0
			for b.Loop() {
				plan := e.Plan(snap, t0)
				q := Queue(e.Policy(), snap, plan)
				res := Run(context.Background(), in, tc.opt)
				Hints(in, q, plan, res, tc.hints)
				plans, replays, shares = plans+res.Plans, replays+res.Replays, res.Shares
			}
			b.ReportMetric(float64(plans)/float64(b.N), "plans/op")
			b.ReportMetric(float64(replays)/float64(b.N), "replays/op")
			b.ReportMetric(float64(shares), "shares")
		})
	}
}
