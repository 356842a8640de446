package scale

import (
	"fmt"
	"testing"
)

func TestHighArrivals(t *testing.T) {
	for _, tc := range []struct {
		name                                   string
		gpus, ended, idle, waiting, held, room int
		want                                   int
	}{
		{"1,000 nodes: a tick's churn of 116 ended allocations is added on top of the 40 a tick, which alone the churn placed", 8000, 116, 80, 0, 0, 400, 156},
		{"1,000 nodes: what waits already beyond the idle GPUs, the margin and the churn adds nothing", 8000, 116, 80, 280, 0, 400, 0},
		{"1,000 nodes: part of the margin waits; the rest is added", 8000, 116, 80, 200, 0, 400, 76},
		{"1,000 nodes: the server's backlog leaves room for 30", 8000, 116, 80, 0, 0, 30, 30},
		{"1,000 nodes: the added jobs hold half the cluster: none more", 8000, 116, 80, 0, 4000, 400, 0},
		{"1,000 nodes: 10 GPUs short of half the cluster", 8000, 116, 80, 0, 3990, 400, 10},
		{"250 nodes: 30 ended, the idle budget's 20 idle, 20 margin", 2000, 30, 20, 0, 0, 400, 50},
		{"10 nodes (make test): nothing ended, 2 idle, margin 2", 80, 0, 2, 0, 0, 50, 4},
		{"10 nodes: half the cluster held by added jobs", 80, 3, 0, 0, 40, 50, 0},
		{"a negative count (never) adds nothing", 80, -5, 0, 10, 0, 50, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := highArrivals(tc.gpus, tc.ended, tc.idle, tc.waiting, tc.held, tc.room); got != tc.want {
				t.Errorf("highArrivals(%d GPUs, %d ended, %d idle, %d waiting, %d held, room %d) = %d, want %d",
					tc.gpus, tc.ended, tc.idle, tc.waiting, tc.held, tc.room, got, tc.want)
			}
		})
	}
}

func TestIdleAndHighBudgets(t *testing.T) {
	for _, tc := range []struct {
		name             string
		gpus, idle, high int
	}{
		{"10 nodes (make test): 2 idle GPUs, 40 added", 80, 2, 40},
		{"250 nodes: 20 idle GPUs, 1,000 added", 2000, 20, 1000},
		{"1,000 nodes: 80 idle GPUs (a fifth of the cluster before), 4,000 added", 8000, 80, 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := idleBudget(tc.gpus); got != tc.idle {
				t.Errorf("idleBudget(%d) = %d, want %d", tc.gpus, got, tc.idle)
			}
			if got := highShare(tc.gpus); got != tc.high {
				t.Errorf("highShare(%d) = %d, want %d", tc.gpus, got, tc.high)
			}
		})
	}
}

// TestWorkloadIdleBudget: the jobs that idle never hold more GPUs than
// the budget, the budget comes back as they finish, and the kinds and
// run times drawn are the seed's whatever the budget.
func TestWorkloadIdleBudget(t *testing.T) {
	for _, tc := range []struct {
		name        string
		budget, n   int
		finishFirst int // jobs finished (released) after the first n, before n more
	}{
		{"1,000 nodes' budget of 80 over 2,000 jobs", 80, 2000, 0},
		{"make test's budget of 2 over 200 jobs", 2, 200, 0},
		{"a budget of 2, the first 200 jobs finished, 200 more", 2, 200, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, free := newWorkload(7, tc.budget), newWorkload(7, 1<<30)
			var keys []string
			draw := func() {
				for range tc.n {
					j, f := w.next(), free.next()
					if *j.ID != *f.ID || *j.Namespace != *f.Namespace {
						t.Fatalf("the budget changed the draw: %s/%s against %s/%s", *j.Namespace, *j.ID, *f.Namespace, *f.ID)
					}
					k := *j.Namespace + "/" + *j.ID
					if w.jobs[k].run != free.jobs[k].run {
						t.Fatalf("the budget changed %s's run time: %s against %s", k, w.jobs[k].run, free.jobs[k].run)
					}
					keys = append(keys, k)
					if got := idleGPUsOf(w); got > tc.budget {
						t.Fatalf("after %s: idle jobs hold %d GPUs, over the budget of %d", k, got, tc.budget)
					}
				}
			}
			draw()
			if got, unbounded := idleGPUsOf(w), idleGPUsOf(free); got == 0 || unbounded <= got {
				t.Fatalf("idle GPUs %d with the budget, %d without: want some, and fewer than without", got, unbounded)
			}
			if tc.finishFirst > 0 {
				for _, k := range keys[:tc.finishFirst] {
					w.release(k)
					w.release(k) // twice: released once
				}
				if w.idleHeld != 0 {
					t.Fatalf("after every job finished the idle jobs hold %d GPUs, want 0", w.idleHeld)
				}
				draw()
				if got := idleGPUsOf(w); got <= 0 || got > tc.budget {
					t.Fatalf("after release and %d more jobs idle GPUs %d (budget %d): the budget did not come back", tc.n, got, tc.budget)
				}
			}
		})
	}
}

// idleGPUsOf counts the GPUs of w's jobs planned idle and not released.
func idleGPUsOf(w *workload) int {
	n := 0
	for _, p := range w.jobs {
		if p.idle {
			n += p.gpus
		}
	}
	if n != w.idleHeld {
		panic(fmt.Sprintf("idleHeld %d, jobs say %d", w.idleHeld, n))
	}
	return n
}
