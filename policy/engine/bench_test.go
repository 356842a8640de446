package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// BenchmarkPlan measures one full plan on generated clusters: nodes × 8
// GPUs, full, with allocations and waiting demands in proportion (at the
// top size: 10,000 nodes, 80,000 GPUs, 100,000 allocations, 10,000
// demands), two GPU models in two node pools, some demands asking for
// one model. The one-model case is the same cluster with models not told
// apart, as before fleets. Run with:
// go test -run '^$' -bench Plan -benchmem ./policy/engine
func BenchmarkPlan(b *testing.B) {
	for _, nodes := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			benchPlan(b, genCluster(r, nodes, 8, nodes*10, nodes, 8, t0), nodes)
		})
	}
	b.Run("nodes=10000/one-model", func(b *testing.B) {
		r := rand.New(rand.NewPCG(1, 2))
		benchPlan(b, oneModel(genCluster(r, 10000, 8, 100000, 10000, 8, t0)), 10000)
	})
}

// oneModel forgets a snapshot's GPU models: every node of one device
// class, every demand content with any GPU.
func oneModel(s *Snapshot) *Snapshot {
	for i := range s.Nodes {
		s.Nodes[i].Device, s.Nodes[i].Model = "", ""
	}
	for i := range s.Waiting {
		s.Waiting[i].Devices, s.Waiting[i].Asks = nil, ""
	}
	return s
}

// benchPlan measures plans of snapshot s of a cluster of the given nodes,
// under the generated policy the Plan benchmarks share.
func benchPlan(b *testing.B, s *Snapshot, nodes int) {
	e := New(genPolicy(8, nodes*8/16, nodes*8/4))
	b.ReportAllocs()
	b.ResetTimer()
	var plan *Plan
	for b.Loop() {
		plan = e.Plan(s, t0)
	}
	b.ReportMetric(float64(len(plan.Actions)), "actions")
}

// BenchmarkPlanFairShare is BenchmarkPlan's largest cluster with fair
// share over time on: every tenant with some decayed usage.
// go test -run '^$' -bench PlanFairShare -benchtime 10x ./policy/engine
func BenchmarkPlanFairShare(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	s := genCluster(r, 10000, 8, 100000, 10000, 8, t0)
	s.Usage = map[string]float64{}
	for i := range 8 {
		s.Usage[fmt.Sprintf("team%d", i)] = float64(1000 * (i + 1) * (i%3 + 1))
	}
	p := genPolicy(8, 10000*8/16, 10000*8/4)
	p.Preemption.FairShareHalfLife = 24 * time.Hour
	e := New(p)
	b.ReportAllocs()
	b.ResetTimer()
	var plan *Plan
	for b.Loop() {
		plan = e.Plan(s, t0)
	}
	b.ReportMetric(float64(len(plan.Actions)), "actions")
}

// BenchmarkPlanDepartments is BenchmarkPlan's largest cluster with its
// eight tenants in two departments of four: each department's reserve
// their reserves together, its limit three eighths of their limits
// together (30,000 GPUs of the 40,000 or so they hold), so that it binds.
// go test -run '^$' -bench PlanDepartments -benchtime 10x ./policy/engine
func BenchmarkPlanDepartments(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	s := genCluster(r, 10000, 8, 100000, 10000, 8, t0)
	p := genPolicy(8, 10000*8/16, 10000*8/4)
	p.Departments = map[string]*policy.Department{}
	for i, name := range p.TenantNames() {
		dn := fmt.Sprintf("dept%d", i/4)
		d := p.Departments[dn]
		if d == nil {
			d = &policy.Department{Name: dn, Weight: 1}
			p.Departments[dn] = d
		}
		t := p.Tenants[name]
		d.Tenants = append(d.Tenants, name)
		d.Reserve += t.Reserve
		d.Limit += t.Limit * 3 / 8
	}
	e := New(p)
	b.ReportAllocs()
	b.ResetTimer()
	var plan *Plan
	for b.Loop() {
		plan = e.Plan(s, t0)
	}
	b.ReportMetric(float64(len(plan.Actions)), "actions")
}

// BenchmarkPlanFairShareReclaim is BenchmarkPlanFairShare with fair-share
// reclaim on (preemption.fair_share_reclaim_above 1.5): the tenants that
// used most are far above their share, and demands nothing else serves
// search their borrowed work.
// go test -run '^$' -bench PlanFairShareReclaim -benchtime 10x ./policy/engine
func BenchmarkPlanFairShareReclaim(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	s := genCluster(r, 10000, 8, 100000, 10000, 8, t0)
	s.Usage = map[string]float64{}
	for i := range 8 {
		s.Usage[fmt.Sprintf("team%d", i)] = float64(1000 * (i + 1) * (i%3 + 1))
	}
	p := genPolicy(8, 10000*8/16, 10000*8/4)
	p.Preemption.FairShareHalfLife = 24 * time.Hour
	p.Preemption.FairShareReclaimAbove = 1.5
	e := New(p)
	b.ReportAllocs()
	b.ResetTimer()
	var plan *Plan
	fair := 0
	for b.Loop() {
		plan = e.Plan(s, t0)
	}
	for _, a := range plan.Actions {
		if a.Reason.Rule == RuleFairShare {
			fair++
		}
	}
	b.ReportMetric(float64(len(plan.Actions)), "actions")
	b.ReportMetric(float64(fair), "fair_share")
}
