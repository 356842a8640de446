package controller

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkRound is one control round (build the observation from the
// cache, plan, act on nothing new, record, publish) over a cluster of the
// scale harness's shape: nodes × 8 GPUs, about 6.5 GPU allocations a node,
// half of them idle-covered notebooks, and a queue of blocked jobs.
//
//	go test -run '^$' -bench Round -benchtime 20x ./controller
func BenchmarkRound(b *testing.B) {
	for _, nodes := range []int{100, 500} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			f := newFakeNomad()
			cl := f.cl()
			c := testController(&testing.T{}, f)
			c.obs = newObserver(f, c.cfg.StateNamespace)
			c.obs.resync = time.Hour
			clock := t0
			c.now = func() time.Time { return clock }
			seq := 0
			for n := range nodes {
				node := apiNode(fmt.Sprintf("n%04d", n), 8)
				cl.nodes = append(cl.nodes, node)
				for g := 0; g < 8; g++ {
					seq++
					tier, ns := "training", "ml"
					if seq%2 == 0 {
						tier = "interactive"
					}
					j := apiJob(ns, fmt.Sprintf("job-%05d", seq), tier, map[string]int{"training": 40, "interactive": 60}[tier], 1, 1)
					cl.jobs[ns+"/"+*j.ID] = j
					if g < 7 {
						cl.allocs = append(cl.allocs, apiAlloc(fmt.Sprintf("a-%05d", seq), j, node.ID,
							[]string{node.NodeResources.Devices[0].Instances[g].ID}, t0.Add(-time.Hour)))
					}
				}
			}
			for q := range nodes / 5 {
				j := apiJob("ml", fmt.Sprintf("queued-%05d", q), "training", 40, 1, 8)
				cl.jobs["ml/"+*j.ID] = j
				ev, sum := apiBlockedEval(j, 1, t0.Add(-time.Minute))
				cl.evals, cl.summary["ml/"+*j.ID] = append(cl.evals, ev), sum
			}
			ctx := context.Background()
			if _, err := c.reconcile(ctx); err != nil { // the first round acts
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				clock = clock.Add(time.Second)
				if _, err := c.reconcile(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(cl.allocs)), "allocs")
		})
	}
}
