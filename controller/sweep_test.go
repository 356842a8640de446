package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// gpuStats is a node's host stats with each GPU at util percent.
func gpuStats(gpuIDs []string, util int64) *api.HostStats {
	inst := map[string]*api.DeviceStats{}
	for _, id := range gpuIDs {
		inst[id] = stewardShape(util, 0, 40960)
	}
	return &api.HostStats{DeviceStats: []*api.DeviceGroupStats{{Vendor: "nvidia", Type: "gpu", Name: "sim", InstanceStats: inst}}}
}

// Only nodes running work an idle rule covers are read: the test policy's
// rule covers tier interactive, not training.
func TestStatsTargets(t *testing.T) {
	pol := testPolicy(t)
	nb, train := job("ml", "nb", "interactive", 60, 1, 1), job("ml", "train", "training", 40, 1, 1)
	running := func(id, jobID, node string) ObservedAlloc {
		a := alloc(id, jobID)
		a.NodeID = node
		return a
	}
	pending := running("p", "nb", "n4")
	pending.ClientStatus = "pending"
	obs := &Observation{Jobs: map[jobKey]*ObservedJob{{"ml", "nb"}: nb, {"ml", "train"}: train},
		Allocs: []ObservedAlloc{running("a", "nb", "n2"), running("b", "train", "n1"), running("c", "nb", "n2"), running("d", "train", "n3"),
			running("e", "gone", "n5"), pending}}
	var got []string
	for _, tg := range statsTargets(pol, obs) {
		for _, a := range tg.allocs {
			got = append(got, tg.node+"/"+a.ID)
		}
	}
	if want := []string{"n2/a", "n2/c"}; !slices.Equal(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
}

// A sweep reads at most statsConcurrency nodes at a time, and a node that
// does not answer costs its timeout, not the sweep: every other node is
// sampled.
func TestSweepBoundedAndTimed(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f, withClock(time.Now), withConfig(func(cfg *Config) {
		cfg.StatsInterval = 2 * time.Second // a 1 s timeout per read
	}))
	cl := f.cl()
	var targets []statsTarget
	for i := range 100 {
		node := fmt.Sprintf("n%03d", i)
		a := alloc("a-"+node, "nb")
		a.NodeID = node
		targets = append(targets, statsTarget{node: node, allocs: []ObservedAlloc{a}})
		cl.stats[node] = gpuStats(a.GPUIDs, 3)
	}
	var inFlight, most atomic.Int32
	var mu sync.Mutex
	cl.statsHook = func(ctx context.Context, node string) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		mu.Lock()
		most.Store(max(most.Load(), n))
		mu.Unlock()
		if node == "n042" {
			<-ctx.Done() // a client that never answers
			return ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	start := time.Now()
	failed := c.sampler.sweepStats(context.Background(), targets)
	took := time.Since(start)
	if failed != 1 {
		t.Errorf("%d nodes failed, want 1 (the hung one)", failed)
	}
	if m := most.Load(); m > statsConcurrency || m < 2 {
		t.Errorf("%d reads in flight at most, want 2..%d", m, statsConcurrency)
	}
	if took > 5*time.Second {
		t.Errorf("the sweep took %s: the hung node held it up", took)
	}
	samples := c.usage.samples(nil)
	for _, tg := range targets {
		_, ok := samples[tg.allocs[0].ID]
		if ok == (tg.node == "n042") {
			t.Errorf("node %s: sampled %v", tg.node, ok)
		}
	}
	if s := samples["a-n000"]; len(s) != 1 || s[0].Util != 3 {
		t.Errorf("samples of a-n000: %+v, want one at 3%%", s)
	}
}
