package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestWaitingOrderHint checks that the wait order the simulator hands the
// engine (Snapshot.WaitingOrder) is right at every plan that acts, so that
// the engine takes it rather than sorting: every waiting demand once, by
// Since, then by namespace/ID.
func TestWaitingOrderHint(t *testing.T) {
	pol := examplePolicy(t)
	ScaleTenants(pol, 0.04)
	tenants := []string{"product", "research", "platform"}
	rng := rand.New(rand.NewPCG(5, 21))
	var jobs []Job
	at := time.Duration(0)
	for i := range 600 {
		at += time.Duration(rng.IntN(300)) * time.Second
		tenant := tenants[rng.IntN(len(tenants))]
		jobs = append(jobs, Job{ID: "j" + itoa(i), Line: i + 2, User: tenant, Submit: at, GPUs: 1 << rng.IntN(4),
			Allocs: 1 + rng.IntN(3)/2, RunTime: time.Duration(300+rng.IntN(4*3600)) * time.Second,
			Tenant: tenant, Tier: []string{"interactive", "training"}[rng.IntN(2)], IdleAfter: NeverIdle})
	}
	s, err := newSimulator(jobs, Config{Policy: pol, Nodes: 4, GPUsPerNode: 8, CheckpointEvery: DefaultCheckpointEvery,
		CheckpointCost: DefaultCheckpointCost, PlanInterval: DefaultPlanInterval}, Steward)
	if err != nil {
		t.Fatal(err)
	}
	checked, longest := 0, 0
	s.watch = func(engine.Action) {
		w, order := s.snap.Waiting, s.snap.WaitingOrder
		seen := make([]bool, len(w))
		for _, i := range order {
			if i < 0 || int(i) >= len(w) || seen[i] {
				t.Fatalf("at %s: wait order %v is no permutation of %d demands", s.now, order, len(w))
			}
			seen[i] = true
		}
		if len(order) != len(w) {
			t.Fatalf("at %s: wait order lists %d of %d demands", s.now, len(order), len(w))
		}
		if !slices.IsSortedFunc(order, func(a, b int32) int {
			if c := w[a].Since.Compare(w[b].Since); c != 0 {
				return c
			}
			return compareStrings(w[a].Job.Ref.String(), w[b].Job.Ref.String())
		}) {
			t.Fatalf("at %s: wait order is not by since, then name", s.now)
		}
		checked++
		longest = max(longest, len(order))
	}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	t.Logf("checked %d plans; the longest queue %d", checked, longest)
	if checked == 0 || longest < 50 {
		t.Fatalf("checked %d plans, the longest queue %d: too little pressure to test anything", checked, longest)
	}
}
