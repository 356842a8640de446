package forecast

import (
	"testing"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestApplyPriority: the replay records a job's priority changes as the
// controller does (controller/act.go: actPriority) and as the one model
// of Nomad does (nomadmodel.Cluster.Apply): Promoted after a promotion,
// not after its priority is set back to its tier's. The replay kept it
// promoted for good.
func TestApplyPriority(t *testing.T) {
	job := ref("a", "train")
	for _, tc := range []struct {
		name         string
		wasPromoted  bool
		kind         engine.Kind
		priority     int
		wantPromoted bool
	}{
		{"promote", false, engine.Promote, 50, true},
		{"set back to its tier's after a promotion", true, engine.SetPriority, 40, false},
		{"set to its tier's, never promoted", false, engine.SetPriority, 40, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &replay{jobs: map[engine.JobRef]*rjob{job: {prio: 45, promoted: tc.wasPromoted}}}
			r.apply(engine.Action{Kind: tc.kind, Job: job, Priority: tc.priority})
			if j := r.jobs[job]; j.prio != tc.priority || j.promoted != tc.wantPromoted {
				t.Errorf("priority %d promoted %v, want %d and %v", j.prio, j.promoted, tc.priority, tc.wantPromoted)
			}
		})
	}
}
