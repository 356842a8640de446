package sim

import (
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// A drained preemption counts toward max_per_job_per_hour as the
// controller counts it (sim/evictions.go): from its decision, and for an
// hour after its victims stopped, not after it was decided.
func TestDrainedEvictionCountsAsTheController(t *testing.T) {
	const pol = `
tier "interactive" { priority = 60 }
tier "training"    { priority = 40 }
preemption {
  min_runtime = "10m"
  grace       = "10m"
  max_per_job_per_hour = 1
  promote {
    after_preemptions = 0
    after_wait        = "0s"
    boost             = 0
  }
}
`
	tests := []struct {
		name  string
		trace string
		// wantSecond: the earliest the second preemption of T1 may be
		// decided, in minutes; 0: none.
		wantSecond float64
	}{{
		// T1 fills the node. I1 preempts it at 30m: the signal at
		// 30m1s, stopped at 40m1s. I2 comes at 90m30s, an hour after
		// the decision but within an hour of the stop: the controller
		// still counts the first (its record is the stop's), so T1 is
		// spared until 100m1s and the second preemption comes then.
		// Counted from the decision, the simulator preempted it at
		// 90m30s: two stops within the hour, as the controller counts.
		name: "second preemption within the grace after the hour waits for the stop's hour",
		trace: `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
T1,0,8,1,36000,ml,training,never
I1,1800,8,1,1200,ml,interactive,never
I2,5430,8,1,1200,ml,interactive,never`,
		wantSecond: 100 + 1.0/60,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, pol)
			tr := mustTrace(t, tt.trace)
			if _, err := Derive(tr, DeriveOptions{Seed: 1, Policy: p, Nodes: 1, GPUsPerNode: 8}); err != nil {
				t.Fatal(err)
			}
			s, err := newSimulator(tr.Jobs, Config{Policy: p, Nodes: 1, GPUsPerNode: 8, CheckpointEvery: 20 * time.Minute,
				CheckpointCost: time.Minute}, Steward)
			if err != nil {
				t.Fatal(err)
			}
			t1 := engine.JobRef{Namespace: "ml", ID: "T1"}
			var decided []time.Duration
			s.watch = func(a engine.Action) {
				if a.Kind == engine.Preempt && a.Job == t1 {
					decided = append(decided, s.now)
				}
			}
			if err := s.run(); err != nil {
				t.Fatal(err)
			}
			if len(decided) < 2 {
				t.Fatalf("T1 preempted at %v, want twice", decided)
			}
			if got := decided[1].Minutes(); got < tt.wantSecond-1e-9 {
				t.Errorf("T1's second preemption decided at %.3fm, before %.3fm: its first stopped at %.3fm, "+
					"within the hour the controller counts it", got, tt.wantSecond, (decided[0] + 10*time.Minute + time.Second).Minutes())
			}
			j := &s.jobs[s.byRef[t1]]
			if _, over := perHour(j.preemptTimes, 1); over != 0 {
				t.Errorf("T1's stops %v: %d over the cap", j.preemptTimes, over)
			}
		})
	}
}
