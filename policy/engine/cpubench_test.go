package engine

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPlanCPU is BenchmarkPlan's fleet cluster at 10,000 nodes, and
// the same with one model, reporting the process's CPU time per plan (user
// + system, the explainer's goroutine and the garbage collector included)
// beside the wall time: on a shared machine the wall time swings with the
// load, the CPU time much less. Compare versions with it interleaved:
// go test -run '^$' -bench PlanCPU -benchtime 10x ./policy/engine
func BenchmarkPlanCPU(b *testing.B) {
	for _, c := range []struct {
		name string
		one  bool
	}{{"fleet", false}, {"one-model", true}} {
		b.Run(c.name, func(b *testing.B) {
			s, e := benchTopCluster(c.one)
			b.ReportAllocs()
			b.ResetTimer()
			before := cpuTime(b)
			n := 0
			for b.Loop() {
				e.Plan(s, t0)
				n++
			}
			b.ReportMetric(float64(cpuTime(b)-before)/float64(time.Millisecond)/float64(n), "cpu-ms/op")
		})
	}
}

// benchTopCluster is BenchmarkPlan's 10,000-node cluster and its engine,
// with GPU models told apart or (one) not.
func benchTopCluster(one bool) (*Snapshot, *Engine) {
	r := rand.New(rand.NewPCG(1, 2))
	s := genCluster(r, 10000, 8, 100000, 10000, 8, t0)
	if one {
		s = oneModel(s)
	}
	return s, New(genPolicy(8, 10000*8/16, 10000*8/4))
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
