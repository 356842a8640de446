package forecast

import (
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// TestDrainedEvictionCounts: a drained preemption counts toward the
// eviction cap and the lifetime bound as the controller counts it
// (forecast/evictions.go): under its decision's time while it drains,
// under its stop's once the grace is over, and not at all when its
// victims completed within the grace (a gang's whole-job drain counts
// anyway). The replay kept the decision's time: its cap released the job
// a signal delay and a grace before the controller's.
func TestDrainedEvictionCounts(t *testing.T) {
	job := ref("a", "train")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const grace = 10 * time.Minute
	stop := t0.Add(nomadmodel.SignalDelay + grace)
	for _, tc := range []struct {
		name      string
		gang      bool
		runLeft   time.Duration // from t0
		wantTimes []time.Time   // after the grace
		wantTotal int
	}{
		{"stopped at the grace's end: counted from the stop", false, 10 * time.Hour, []time.Time{stop}, 1},
		{"completed within the grace: no eviction", false, 5 * time.Minute, nil, 0},
		{"a gang completed within the grace: counted at the drain's end", true, 5 * time.Minute, []time.Time{stop}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &replay{now: t0, nodes: []rnode{{n: engine.Node{ID: "n1", GPUs: 2}}}, nodeIx: map[string]int{"n1": 0},
				jobs: map[engine.JobRef]*rjob{job: {prio: 40}}, freedBy: map[int]string{}}
			r.allocs = []ralloc{{a: engine.Alloc{ID: "a1", Job: engine.Job{Ref: job, Gang: tc.gang}, Group: "main", NodeID: "n1",
				GPUIDs: []string{"g0", "g1"}, StartedAt: t0.Add(-time.Hour)}, node: 0, end: t0.Add(tc.runLeft)}}
			r.index()
			a := engine.Action{Kind: engine.Preempt, Job: job, Group: "main", Allocs: []string{"a1"}, Signal: "SIGTERM", Grace: grace}
			r.apply(&a)
			r.dropGone()
			if j := r.jobs[job]; !slices.Equal(j.preemptions, []time.Time{t0}) || j.total != 1 {
				t.Fatalf("while it drains: times %v total %d, want [%v] 1 (pending from the decision)", j.preemptions, j.total, t0)
			}
			r.now = t0.Add(time.Hour)
			r.index()
			r.endRuns()
			if j := r.jobs[job]; !slices.Equal(j.preemptions, tc.wantTimes) || j.total != tc.wantTotal {
				t.Errorf("after the grace: times %v total %d, want %v %d", j.preemptions, j.total, tc.wantTimes, tc.wantTotal)
			}
		})
	}
}
