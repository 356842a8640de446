package engine

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkPlanSteady is BenchmarkPlan's 10,000-node clusters measured
// plan by plan, with the setup's garbage collected before the first:
// BenchmarkPlan's mean over ten plans carries the first, cold plan and
// whatever collection the generated cluster's garbage sets off, which
// scattered it 35–70 ms on a quiet machine (issue 35). Besides ns/op it
// reports the first plan, the median and the best of the rest (ms), and
// the collections per plan. Run with:
// go test -run '^$' -bench PlanSteady -benchtime 21x ./policy/engine
// An older tree is measured the same way with this file copied in (less
// the one-model case where its snapshot has no models).
func BenchmarkPlanSteady(b *testing.B) {
	for _, c := range []struct {
		name string
		one  bool
	}{{"nodes=10000", false}, {"nodes=10000/one-model", true}} {
		b.Run(c.name, func(b *testing.B) {
			s, e := benchTopCluster(c.one)
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			b.ReportAllocs()
			var ms []float64
			for b.Loop() {
				start := time.Now()
				e.Plan(s, t0)
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			}
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(m1.NumGC-m0.NumGC)/float64(len(ms)), "gcs/op")
			b.ReportMetric(ms[0], "first-ms")
			if rest := slices.Clone(ms[1:]); len(rest) > 0 {
				slices.Sort(rest)
				b.ReportMetric(rest[len(rest)/2], "median-ms")
				b.ReportMetric(rest[0], "best-ms")
			}
		})
	}
}
