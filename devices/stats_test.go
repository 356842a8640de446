package devices

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/device"
)

// statsRound prepares a plugin on the dgxa100 mock (8 A100s) and returns a
// function running one full stats round: NVML queries for every GPU,
// health bookkeeping, and the StatsResponse Nomad receives.
func statsRound(tb testing.TB) func() int {
	gpus := newMockGPUs()
	p, _ := newTestPlugin(tb, gpus, map[string]interface{}{})
	_, be := p.current()
	if _, err := be.inventory(); err != nil {
		tb.Fatal(err)
	}
	var buf []sample
	now := time.Now()
	return func() int {
		var r *device.StatsResponse
		buf, r = p.collectStats(be, buf, now, buildStats)
		return len(r.Groups[0].InstanceStats)
	}
}

// BenchmarkStats is one stats round for 8 GPUs through the NVML backend.
// Budget: at most 200µs and 50 heap allocations per round.
//
//	go test -run '^$' -bench BenchmarkStats -benchmem ./devices/
func BenchmarkStats(b *testing.B) {
	round := statsRound(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n := round(); n != 8 {
			b.Fatalf("stats for %d GPUs", n)
		}
	}
	b.StopTimer()
	perRound := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	// CPU share of the stats loop at Nomad's default 1s interval.
	b.ReportMetric(perRound/float64(time.Second)*100, "%cpu@1s")
}

// TestStatsAllocationBudget keeps a stats round for 8 GPUs within 50 heap
// allocations.
func TestStatsAllocationBudget(t *testing.T) {
	round := statsRound(t)
	round()
	allocs := testing.AllocsPerRun(200, func() { round() })
	t.Logf("%.0f allocations per stats round for 8 GPUs", allocs)
	if allocs > 50 {
		t.Errorf("%.0f allocations per stats round, budget is 50", allocs)
	}
}
