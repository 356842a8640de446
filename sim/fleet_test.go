package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestFleetOverTime replays random workloads on a mixed fleet (two nodes of
// H100s, two of A100s), a third of the jobs asking for each model and a
// third for any GPU, and checks at every action:
//   - every allocation runs on a node of the model its job asks for;
//   - every preemption frees GPUs its beneficiary can use: a victim runs
//     on a node of the model the beneficiary asks for (a gang, preempted
//     whole, on one of them at least);
//
// and over each run: no job over the eviction cap, and few preemptions
// whose beneficiary did not then run (as TestInvariantsOverTime): 34 of
// 1,410 (2.4 %) here, where the same workload with no model asked for
// wastes 24 of 1,110 (2.2 %): models add no waste of their own.
func TestFleetOverTime(t *testing.T) {
	pol := examplePolicy(t)
	ScaleTenants(pol, 0.04)
	tiers := []string{"inference", "build", "interactive", "training", "training"}
	tenants := []string{"product", "research", "platform"}
	models := []string{"", "H100", "A100"}
	const maxWastedShare = 0.03
	preemptions, wasted, checked := 0, 0, 0
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 29))
		var jobs []Job
		at := time.Duration(0)
		for i := range 300 {
			at += time.Duration(rng.IntN(600)) * time.Second
			j := randomJob(rng, i, at, tenants, tiers)
			j.Model = models[rng.IntN(len(models))]
			jobs = append(jobs, j)
		}
		s, err := newSimulator(jobs, Config{Policy: pol, NodeGPUs: []int{8, 8, 8, 8},
			NodeModels: []string{"H100", "H100", "A100", "A100"}, CheckpointEvery: DefaultCheckpointEvery,
			CheckpointCost: DefaultCheckpointCost, PlanInterval: DefaultPlanInterval}, Steward)
		if err != nil {
			t.Fatal(err)
		}
		s.watch = func(a engine.Action) {
			for _, ji := range s.active {
				j := &s.jobs[ji]
				for _, al := range j.allocs {
					if !s.cl.usable(al.node, j.model) {
						t.Errorf("seed %d at %s: %s (asks %q) runs on %s, a node of %s", seed, s.now, j.ref, j.spec.Model,
							s.cl.nodeIDs[al.node], s.cl.models[s.cl.nodeModel[al.node]])
					}
				}
			}
			if a.Kind != engine.Preempt || a.For == nil || a.Job.Namespace == a.For.Namespace {
				return // not for another tenant's work (room under a limit may free any GPUs)
			}
			b := &s.jobs[s.byRef[*a.For]]
			v := &s.jobs[s.byRef[a.Job]]
			checked++
			usable := false
			for _, al := range v.allocs {
				usable = usable || s.cl.usable(al.node, b.model)
			}
			if !usable {
				t.Errorf("seed %d at %s: %s preempted on %s (%s) for %s, which asks for %s: %s", seed, s.now, a.Job,
					s.cl.nodeIDs[v.allocs[0].node], s.cl.models[s.cl.nodeModel[v.allocs[0].node]], *a.For, b.spec.Model, a)
			}
		}
		if err := s.run(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		r := s.m.result(s)
		t.Logf("seed %d: %d preemptions, %d wasted, %d stops over the cap", seed, r.Preemptions, r.WastedPreemptions, r.CapBreaches)
		if r.CapBreaches != 0 {
			t.Errorf("seed %d: cap_breaches %d, want 0", seed, r.CapBreaches)
		}
		preemptions += r.Preemptions
		wasted += r.WastedPreemptions
	}
	if checked == 0 {
		t.Fatal("no preemption for another tenant's work to check: the workload is too light")
	}
	if share := float64(wasted) / float64(max(1, preemptions)); share > maxWastedShare {
		t.Errorf("%d of %d preemptions wasted (%.1f %%), want at most %.0f %%", wasted, preemptions, 100*share, 100*maxWastedShare)
	}
}
