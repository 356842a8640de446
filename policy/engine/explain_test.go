package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestExplainAsync holds the explainer to its promise: a plan is the same
// whether its actions are written inline or on the explainer's goroutine.
// make test also runs it under the race detector.
func TestExplainAsync(t *testing.T) {
	defer func(v int) { explainAsyncFrom = v }(explainAsyncFrom)
	for seed := 0; seed < 12; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 5))
		nodes := []int{20, 200, 1000}[seed%3]
		tenants := 2 + r.IntN(6)
		p := genPolicy(tenants, r.IntN(nodes*8/tenants+1), []int{-1, nodes * 8 / 2}[r.IntN(2)])
		p.Preemption.MinRuntime = time.Duration(r.IntN(90)) * time.Minute
		s := genCluster(r, nodes, 8, nodes*3, nodes, tenants, t0)
		if seed%2 == 1 {
			joinGangs(r, s, 4+r.IntN(8))
		}
		t.Run(fmt.Sprintf("seed %d, %d nodes", seed, nodes), func(t *testing.T) {
			e := New(p)
			explainAsyncFrom = math.MaxInt
			inline := e.Plan(s, t0)
			explainAsyncFrom = 0
			async := e.Plan(s, t0)
			if len(inline.Actions) < 10 {
				t.Fatalf("only %d actions: the case explains too little to compare", len(inline.Actions))
			}
			if !reflect.DeepEqual(inline, async) {
				for i := range min(len(inline.Actions), len(async.Actions)) {
					if !reflect.DeepEqual(inline.Actions[i], async.Actions[i]) {
						t.Fatalf("action %d differs:\ninline: %v\nasync:  %v", i, inline.Actions[i], async.Actions[i])
					}
				}
				t.Fatalf("plans differ: %d actions inline, %d async", len(inline.Actions), len(async.Actions))
			}
		})
	}
}
