package engine_test

import (
	"testing"
	"time"
)

// TestOwnTierSwap: a promotion for waiting alone does not swap a tenant's
// own work of the job's tier (ownswap.go); a promotion for preemptions
// does, and a promotion for waiting still takes other tenants' work of
// its tier beyond their reserve. One GPU, one running job, one that
// waits past promote.after_wait (1h) or was preempted
// promote.after_preemptions times (3).
func TestOwnTierSwap(t *testing.T) {
	cases := []struct {
		name    string
		runner  string // tenant of the running training job
		ml      bool   // tenant ml runs a training job of its own on a second node
		opts    []jobOpt
		wait    time.Duration // before the plan checked
		want    []string      // the plan's actions
		waiting string        // the waiting job's reason contains this, when set
	}{
		{
			name:   "promoted for waiting, it waits for its own tenant's training rather than swap with it",
			runner: "ml",
			wait:   61 * time.Minute,
			want:   []string{"promote ml/starved"}, // held since the first plan
			waiting: "nothing may be preempted for tier training (priority 50) of tenant ml (holds 1, reserve 0); " +
				"promoted for waiting, it takes no work of tier training from tenant ml, which runs 1 GPU of it (ml/runner), nor from tenants that run no more",
		},
		{
			name:   "promoted for waiting, it still takes another tenant's training beyond its reserve",
			runner: "other",
			wait:   61 * time.Minute,
			want:   []string{"promote ml/starved", "preempt other/runner", "resume ml/starved"},
		},
		{
			name:    "promoted for waiting, it takes no training of a tenant that runs no more of it than its own",
			runner:  "other",
			ml:      true,
			wait:    61 * time.Minute,
			want:    []string{"promote ml/starved"},
			waiting: "promoted for waiting, it takes no work of tier training from tenant ml, which runs 1 GPU of it (ml/own), nor from tenants that run no more",
		},
		{
			name:   "promoted for its preemptions, it still takes its own tenant's training",
			runner: "ml",
			opts: []jobOpt{preempted(t0.Add(-3*time.Hour), t0.Add(-3*time.Hour+time.Minute),
				t0.Add(-3*time.Hour+2*time.Minute))},
			want: []string{"promote ml/starved", "preempt ml/runner", "hold ml/starved"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, testPolicy(nil))
			h.node("n1", "default", 1)
			if c.ml {
				h.node("n2", "default", 1)
			}
			h.submit(c.runner, "runner", "training", 1, 1) // on n1: the first of equals
			if c.ml {
				h.submit("ml", "own", "training", 1, 1)
			}
			h.submit("ml", "starved", "training", 1, 1, c.opts...)
			if c.wait > 0 {
				h.step()
				h.advance(c.wait)
			}
			plan := h.step()
			h.expect("actions", kinds(plan), c.want)
			if c.waiting != "" {
				if len(plan.Waiting) != 1 || plan.Waiting[0].Job.String() != "ml/starved" {
					t.Fatalf("waiting %+v, want ml/starved", plan.Waiting)
				}
				mustContain(t, plan.Waiting[0].Reason.Message, c.waiting)
			}
		})
	}
}
