package forecast

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestArrivalsBounded: what Arrivals keeps stays under its bounds
// whatever tenants submit (how many jobs, of how many groups, pinned to
// how many nodes), and an estimate from a class's history is not copied
// per arrival: a 1,000-node leader's arrivals held 72 MB of its heap in
// such copies, each of a class's runs finished and going.
func TestArrivalsBounded(t *testing.T) {
	nodes := make([]string, 1000)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%04d", i)
	}
	job := func(i, groups int, pinned []string) []engine.Demand {
		ds := make([]engine.Demand, groups)
		for g := range ds {
			ds[g] = engine.Demand{Job: engine.Job{Ref: engine.JobRef{Namespace: "ml", ID: fmt.Sprintf("job-%d", i)}, Tier: "batch"},
				Group: fmt.Sprintf("g%d", g), GPUsPerAlloc: 1, Count: 1, Nodes: pinned}
		}
		return ds
	}
	cases := []struct {
		name          string
		jobs, groups  int
		pinned        []string
		kept, keptMax int // arrivals kept: exactly kept, or at most keptMax
	}{
		{name: "a tenant's 20,000 one-group jobs in an hour", jobs: 20000, groups: 1, kept: MaxArrivals},
		{name: "jobs of 100 groups each", jobs: 2000, groups: 100, keptMax: MaxArrivalItems / 100},
		{name: "groups pinned to 1,000 nodes", jobs: 2000, groups: 1, pinned: nodes, keptMax: MaxArrivalItems / 1001},
		{name: "one job larger than the bound alone", jobs: 1, groups: MaxArrivalItems + 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := NewArrivals(t0)
			for i := range tc.jobs {
				at := t0.Add(time.Duration(i) * time.Hour / time.Duration(tc.jobs))
				a.Add(Arrival{At: at, Demands: job(i, tc.groups, tc.pinned)}, ClassOf("ml", "batch", 1).WithFamily(fmt.Sprintf("job-%d", i)))
			}
			got, _ := a.Window(t0.Add(time.Hour), NewHistory(), nil)
			items := 0
			for _, arr := range got {
				items += itemsOf(arr.Demands)
			}
			if len(got) > MaxArrivals || items > MaxArrivalItems || (tc.keptMax == 0 && len(got) != tc.kept) || len(got) > max(tc.keptMax, tc.kept) {
				t.Fatalf("kept %d arrivals of %d items; want at most %d arrivals and %d items (exactly %d / at most %d here)",
					len(got), items, MaxArrivals, MaxArrivalItems, tc.kept, tc.keptMax)
			}
		})
	}

	t.Run("estimates from a long history are not kept per arrival", func(t *testing.T) {
		h := NewHistory()
		c := ClassOf("ml", "batch", 1)
		for i := range 2 * HistorySize {
			h.Add(c.WithFamily("train"), time.Duration(1+i%97)*time.Minute)
		}
		going := map[Class][]time.Duration{}
		for i := range 200 {
			f := c.WithFamily(fmt.Sprintf("run-%d", i%7))
			going[f] = append(going[f], time.Duration(i)*time.Minute)
		}
		before := liveHeap()
		a := NewArrivals(t0)
		for i := range 2 * MaxArrivals {
			// Each job's own family (IDs are a tenant's), each resting
			// on the class's runs.
			cl := c.WithFamily(fmt.Sprintf("job-%d-x", i))
			a.Add(Arrival{At: t0.Add(time.Duration(i) * time.Second), Demands: job(i, 1, nil), Estimate: h.EstimateRunning(cl, going)}, cl)
		}
		kept := liveHeap() - before
		// An arrival's own: its demand (its job's ID) and its class.
		t.Logf("kept %.0f bytes an arrival (%.1f MiB for %d)", kept/MaxArrivals, kept/(1<<20), MaxArrivals)
		if perArrival := kept / MaxArrivals; perArrival > 1024 {
			t.Errorf("Arrivals keeps %.0f bytes an arrival (%.1f MiB for %d), want at most 1 KiB: estimates copied per arrival?",
				perArrival, kept/(1<<20), MaxArrivals)
		}
		got, _ := a.Window(t0.Add(3*time.Hour), h, going)
		arrays := map[*time.Duration]bool{}
		for _, arr := range got {
			if arr.Estimate.Source != FromSimilar || len(arr.Estimate.History) == 0 {
				t.Fatalf("arrival's estimate %+v, want its class's history", arr.Estimate)
			}
			arrays[&arr.Estimate.History[0]] = true
		}
		if len(arrays) != 1 {
			t.Errorf("%d copies of the class's runs among %d arrivals, want 1", len(arrays), len(got))
		}
		runtime.KeepAlive(a)
	})
}

// liveHeap is the heap in use after full GCs, in bytes.
func liveHeap() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

// BenchmarkArrivalsKept is the live heap Arrivals keeps for MaxArrivals
// arrivals of one class whose history is full and with runs going, as at
// the 1,000-node harness (about 7,000 allocations running, half of one
// tier's 1-GPU class):
//
//	go test -run '^$' -bench ArrivalsKept -benchtime 1x ./forecast
func BenchmarkArrivalsKept(b *testing.B) {
	for _, going := range []int{0, 3500} {
		b.Run(fmt.Sprintf("going=%d", going), func(b *testing.B) {
			for range b.N {
				h := NewHistory()
				c := ClassOf("ml", "batch", 1)
				for i := range 2 * HistorySize {
					h.Add(c.WithFamily("train"), time.Duration(1+i%97)*time.Minute)
				}
				run := map[Class][]time.Duration{}
				for i := range going {
					f := c.WithFamily(fmt.Sprintf("run-%d", i%7))
					run[f] = append(run[f], time.Duration(i%300)*time.Minute)
				}
				before := liveHeap()
				a := NewArrivals(t0)
				for i := range MaxArrivals {
					cl := c.WithFamily(fmt.Sprintf("job-%d-x", i))
					ds := []engine.Demand{{Job: engine.Job{Ref: engine.JobRef{Namespace: "ml", ID: fmt.Sprintf("job-%d", i)}, Tier: "batch"},
						Group: "g", GPUsPerAlloc: 1, Count: 1}}
					a.Add(Arrival{At: t0.Add(time.Duration(i) * time.Second), Demands: ds, Estimate: h.EstimateRunning(cl, run)}, cl)
				}
				b.ReportMetric((liveHeap()-before)/(1<<20), "MiB-kept")
				runtime.KeepAlive(a)
			}
		})
	}
}
