package sim

import (
	"testing"
)

// BenchmarkSimulate runs all three policies over the whole Philly trace
// (15,000 jobs) on 100 nodes × 8 GPUs, as docs/evaluation.md reports:
//
//	go test -run '^$' -bench Simulate -benchmem -benchtime 1x ./sim
func BenchmarkSimulate(b *testing.B) {
	tr := loadShared(b, "philly")
	pol := examplePolicy(b)
	if _, err := Derive(tr, DeriveOptions{Seed: 1, Policy: pol, Nodes: 100, GPUsPerNode: 8}); err != nil {
		b.Fatal(err)
	}
	if len(tr.Jobs) != 15000 {
		b.Fatalf("%d jobs, want 15,000", len(tr.Jobs))
	}
	cfg := Config{Policy: pol, Nodes: 100, GPUsPerNode: 8, CheckpointEvery: DefaultCheckpointEvery,
		PlanInterval: DefaultPlanInterval}
	b.ReportAllocs()
	for b.Loop() {
		for _, kind := range AllPolicies {
			r, err := Simulate(tr.Jobs, cfg, kind)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.WallSeconds, string(kind)+"-s")
			if kind == Steward {
				b.ReportMetric(float64(r.EnginePlans), "plans")
			}
		}
	}
}

// BenchmarkSimulateSlice is BenchmarkSimulate over the Philly trace's first
// 3,000 jobs: a few seconds, so that make bench sees a regression of the
// simulator (or of the engine under it) without the whole trace's half
// minute:
//
//	go test -run '^$' -bench SimulateSlice -benchtime 1x ./sim
func BenchmarkSimulateSlice(b *testing.B) {
	tr := loadShared(b, "philly")
	pol := examplePolicy(b)
	if _, err := Derive(tr, DeriveOptions{Seed: 1, Policy: pol, Nodes: 100, GPUsPerNode: 8}); err != nil {
		b.Fatal(err)
	}
	jobs := tr.Jobs[:3000]
	cfg := Config{Policy: pol, Nodes: 100, GPUsPerNode: 8, CheckpointEvery: DefaultCheckpointEvery,
		PlanInterval: DefaultPlanInterval}
	b.ReportAllocs()
	for b.Loop() {
		for _, kind := range AllPolicies {
			r, err := Simulate(jobs, cfg, kind)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.WallSeconds, string(kind)+"-s")
			if kind == Steward {
				b.ReportMetric(float64(r.EnginePlans), "plans")
			}
		}
	}
}
