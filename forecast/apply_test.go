package forecast

import (
	"testing"
	"time"

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
			r.apply(&engine.Action{Kind: tc.kind, Job: job, Priority: tc.priority})
			if j := r.jobs[job]; j.prio != tc.priority || j.promoted != tc.wantPromoted {
				t.Errorf("priority %d promoted %v, want %d and %v", j.prio, j.promoted, tc.priority, tc.wantPromoted)
			}
		})
	}
}

// TestApplyStop: the replay stops work as the one model of Nomad says
// (nomadmodel.StopOf), whether its victims stop now or after a drain: a
// preemption's work is held as preempted, an idle stop's as requeued or
// not at all. A drain's end held every victim as preempted, whatever
// stopped it (an idle stop with a signal, which the engine does not plan
// today, came back as a preemption; one without requeue came back at all).
func TestApplyStop(t *testing.T) {
	job := ref("a", "train")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		a    engine.Action
		// want is the demand held after the stop: "" none, else
		// "preempted" or "requeued".
		want string
	}{
		{"preempt now", engine.Action{Kind: engine.Preempt}, "preempted"},
		{"preempt with a grace", engine.Action{Kind: engine.Preempt, Signal: "SIGTERM", Grace: time.Minute}, "preempted"},
		{"idle stop, requeued", engine.Action{Kind: engine.IdleStop, Requeue: true}, "requeued"},
		{"idle stop for good", engine.Action{Kind: engine.IdleStop}, ""},
		{"idle stop with a grace, requeued", engine.Action{Kind: engine.IdleStop, Requeue: true, Signal: "SIGTERM", Grace: time.Minute}, "requeued"},
		{"idle stop with a grace, for good", engine.Action{Kind: engine.IdleStop, Signal: "SIGTERM", Grace: time.Minute}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &replay{now: t0, nodes: []rnode{{n: engine.Node{ID: "n1", GPUs: 2}}}, nodeIx: map[string]int{"n1": 0},
				jobs: map[engine.JobRef]*rjob{job: {prio: 40}}}
			r.allocs = []ralloc{{a: engine.Alloc{ID: "a1", Job: engine.Job{Ref: job}, Group: "main", NodeID: "n1",
				GPUIDs: []string{"g0", "g1"}, StartedAt: t0.Add(-time.Hour)}, node: 0, end: t0.Add(10 * time.Hour)}}
			r.index()
			a := tc.a
			a.Job, a.Group, a.Allocs = job, "main", []string{"a1"}
			r.apply(&a)
			r.dropGone()
			r.now = t0.Add(time.Hour)
			r.index()
			r.endRuns()
			if len(r.allocs) != 0 {
				t.Fatalf("%d allocations still run, want none", len(r.allocs))
			}
			got := ""
			for _, d := range r.demands {
				switch {
				case !d.d.Held || d.d.Count != 1:
					t.Errorf("demand held %v count %d, want held, 1", d.d.Held, d.d.Count)
				case d.d.Preempted && !d.d.Requeued:
					got = "preempted"
				case d.d.Requeued && !d.d.Preempted:
					got = "requeued"
				default:
					got = "preempted and requeued"
				}
			}
			if len(r.demands) > 1 || got != tc.want {
				t.Errorf("%d demands, held as %q, want %q", len(r.demands), got, tc.want)
			}
		})
	}
}
