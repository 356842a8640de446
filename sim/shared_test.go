package sim

import (
	"path/filepath"
	"testing"

	"github.com/gpu-steward/steward/policy"
)

// sharedTracesDir is DefaultTracesDir seen from this package's directory.
var sharedTracesDir = filepath.Join("..", DefaultTracesDir)

// examplePolicy is example.hcl sized for 100 nodes, as docs/evaluation.md runs it.
func examplePolicy(t testing.TB) *policy.Policy {
	t.Helper()
	p, diags := policy.Parse(filepath.Join("..", "example.hcl"))
	if diags.HasErrors() {
		t.Fatalf("example.hcl: %s", diags.Error())
	}
	ScaleTenants(p, 100)
	return p
}

// loadShared reads a shared trace; a missing one fails the test, never
// skips it: the simulator's results are only as good as this check.
func loadShared(t testing.TB, name string) *Trace {
	t.Helper()
	path, err := ResolveTrace(name, sharedTracesDir)
	if err != nil {
		t.Fatalf("shared trace %s is missing (a clone needs ../shared/traces next to it): %v", name, err)
	}
	tr, err := ReadTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Both shared traces run under every policy (a prefix, for time; the
// figures of docs/evaluation.md are for the whole traces), and the figures hold
// together.
func TestSharedTraces(t *testing.T) {
	for _, name := range []string{"philly", "helios"} {
		t.Run(name, func(t *testing.T) {
			tr := loadShared(t, name)
			if len(tr.Jobs)+tr.Dropped != 15000 {
				t.Errorf("%d jobs and %d CPU-only rows, want 15,000 rows", len(tr.Jobs), tr.Dropped)
			}
			rep, err := Compare(tr, Options{Config: Config{Policy: examplePolicy(t), Nodes: 100, GPUsPerNode: 8,
				CheckpointEvery: DefaultCheckpointEvery, PlanInterval: DefaultPlanInterval}, Seed: 1, Limit: 2000})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Jobs != 2000 || len(rep.Results) != 3 {
				t.Fatalf("%d jobs, %d results; want 2000, 3", rep.Jobs, len(rep.Results))
			}
			for _, r := range rep.Results {
				if r.Completed+r.StoppedByIdleRule+r.NeverStarted != r.Jobs {
					t.Errorf("%s: %d completed + %d stopped + %d never started != %d jobs", r.Policy,
						r.Completed, r.StoppedByIdleRule, r.NeverStarted, r.Jobs)
				}
				if r.UtilBusy > r.UtilAllocated+1e-9 || r.UtilAllocated > 1+1e-9 {
					t.Errorf("%s: utilisation %.3f busy, %.3f allocated", r.Policy, r.UtilBusy, r.UtilAllocated)
				}
				if r.EngineSkipped != 0 {
					t.Errorf("%s: the engine skipped %d snapshot items", r.Policy, r.EngineSkipped)
				}
			}
			fifo, strict, steward := rep.Results[0], rep.Results[1], rep.Results[2]
			if fifo.Preemptions != 0 || fifo.LostGPUHours != 0 || strict.IdleStops != 0 || steward.EnginePlans == 0 {
				t.Errorf("policies mixed up: fifo %d preemptions, strict %d idle stops, steward %d plans",
					fifo.Preemptions, strict.IdleStops, steward.EnginePlans)
			}
			if steward.HighPriorityDelay.P95 > fifo.HighPriorityDelay.P95 {
				t.Errorf("Steward's high-priority p95 delay %.1fm is worse than FIFO's %.1fm",
					steward.HighPriorityDelay.P95, fifo.HighPriorityDelay.P95)
			}
		})
	}
}
