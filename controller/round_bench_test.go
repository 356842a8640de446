package controller

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// benchCluster is a cluster of the scale harness's shape on the fake:
// nodes × 8 GPUs, about 6.5 GPU allocations a node, half of them
// idle-covered notebooks, and a queue of blocked jobs; and a controller
// over it whose clock the caller moves.
func benchCluster(nodes int) (*fakeNomad, *Controller, *time.Time) {
	f := newFakeNomad()
	cl := f.cl()
	clock := t0
	c := testController(&testing.T{}, f, withClock(func() time.Time { return clock }))
	c.obs.resync = time.Hour
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
	return f, c, &clock
}

// BenchmarkRound is one control round (build the observation from the
// cache, plan, act on nothing new, record, publish) over benchCluster.
//
//	go test -run '^$' -bench Round -benchtime 20x ./controller
func BenchmarkRound(b *testing.B) {
	for _, nodes := range []int{100, 500} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			f, c, clock := benchCluster(nodes)
			ctx := context.Background()
			if _, err := c.reconcile(ctx); err != nil { // the first round acts
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				*clock = clock.Add(time.Second)
				if _, err := c.reconcile(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(f.cl().allocs)), "allocs")
		})
	}
}

// BenchmarkRoundMemory is what the controller keeps between rounds at
// 1,000 nodes (the issue 33 goal's size), after rounds over sweeps of
// every allocation's GPUs for a given time: the live heap after a GC,
// less the fake cluster's own. A heap profile of it says what it is made
// of:
//
//	STEWARD_HEAP_PROFILE=/tmp/heap go test -run '^$' -bench RoundMemory -benchtime 1x ./controller
//	go tool pprof -sample_index=inuse_space -top /tmp/heap.2h0m0s
func BenchmarkRoundMemory(b *testing.B) {
	for _, swept := range []time.Duration{10 * time.Minute, 2 * time.Hour} {
		b.Run(fmt.Sprintf("nodes=1000/swept=%s", swept), func(b *testing.B) {
			for range b.N {
				f, c, clock := benchCluster(1000)
				base := liveHeap()
				ctx := context.Background()
				for range 3 {
					for at := clock.Add(10 * time.Second); !at.After(clock.Add(swept)); at = at.Add(10 * time.Second) {
						for i, a := range f.cl().allocs {
							c.usage.add(a.ID, engine.Sample{At: at, Util: float64(2 + 88*(i%2))})
						}
					}
					*clock = clock.Add(swept)
					if _, err := c.reconcile(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((liveHeap()-base)/(1<<20), "MiB-kept")
				if file := os.Getenv("STEWARD_HEAP_PROFILE"); file != "" {
					// What is kept, while it is: -memprofile writes its
					// profile after the benchmark, when it is gone.
					if out, err := os.Create(fmt.Sprintf("%s.%s", file, swept)); err == nil {
						_ = pprof.WriteHeapProfile(out)
						out.Close()
					}
				}
				runtime.KeepAlive(c)
				runtime.KeepAlive(f)
			}
		})
	}
}

// liveHeap is the heap in use after full GCs, in bytes: two, so that
// what pools only hold (the victim cache) is gone too.
func liveHeap() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}
