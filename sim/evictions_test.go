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
			// Checkpoints every 45m: at 30m T1 has 30m at risk, more
			// than the grace, so it drains (a fresher checkpoint would
			// have it stopped at once).
			s := oneNodeStewardWith(t, pol, tt.trace, Config{CheckpointEvery: 45 * time.Minute, CheckpointCost: time.Minute})
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

// Issue 31: a beneficiary with two victims, one with nothing at risk
// (checkpointed a minute ago: stopped at once) and one that drains, runs
// when the second stops. The first preemption is not wasted: it is judged
// when the last victim draining for the same work has stopped, not a plan
// interval after its own (absent) grace.
func TestVictimStoppedAtOnceBesideADrainIsNotWasted(t *testing.T) {
	const pol = `
tier "interactive" { priority = 60 }
tier "training"    { priority = 40 }
preemption {
  min_runtime = "10m"
  grace       = "2m"
}
`
	tests := []struct {
		name       string
		trace      string
		wantGrace0 int // preemptions with no grace
		wantWasted int
	}{{
		name: "one victim at once, one drained",
		// T1 checkpoints at 30m, T2 (started at 5m) at 35m: at 31m T1
		// has 1m at risk, T2 26m.
		trace: `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
T1,0,4,1,36000,ml,training,never
T2,300,4,1,36000,ml,training,never
I1,1860,8,1,1200,ml,interactive,never`,
		wantGrace0: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := oneNodeStewardWith(t, pol, tt.trace, Config{CheckpointEvery: 30 * time.Minute, CheckpointCost: time.Minute,
				PlanInterval: DefaultPlanInterval})
			grace0 := 0
			s.watch = func(a engine.Action) {
				if a.Kind == engine.Preempt && a.Grace == 0 {
					grace0++
				}
			}
			if err := s.run(); err != nil {
				t.Fatal(err)
			}
			r := s.m.result(s)
			if grace0 != tt.wantGrace0 || r.WastedPreemptions != tt.wantWasted {
				t.Errorf("preemptions at once %d, wasted %d; want %d, %d", grace0, r.WastedPreemptions, tt.wantGrace0, tt.wantWasted)
			}
		})
	}
}

// oneNodeStewardWith is Steward on one node of 8 GPUs with policy pol over
// trace (CSV), its jobs not yet arrived; cfg gives the rest.
func oneNodeStewardWith(t *testing.T, pol, trace string, cfg Config) *simulator {
	t.Helper()
	p := mustPolicy(t, pol)
	tr := mustTrace(t, trace)
	if _, err := Derive(tr, DeriveOptions{Seed: 1, Policy: p, Nodes: 1, GPUsPerNode: 8}); err != nil {
		t.Fatal(err)
	}
	cfg.Policy, cfg.Nodes, cfg.GPUsPerNode = p, 1, 8
	s, err := newSimulator(tr.Jobs, cfg, Steward)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
