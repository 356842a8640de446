package controller

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/forecast"
	"github.com/hashicorp/nomad/api"
)

// awaitForecast waits for the forecast goroutine to finish.
func (c *Controller) awaitForecast(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c.pub.queue.fc.mu.Lock()
		done := !c.pub.queue.fc.running && c.pub.queue.fc.result != nil
		c.pub.queue.fc.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no forecast within 30s")
}

// queueCluster: one node of 4 GPUs that ml/train (training, 4 GPUs,
// steward.expected_runtime 3h, running for 2h) holds, and ml/wait
// (training, 2 GPUs) blocked.
func queueCluster(f *fakeNomad) {
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
	train := apiJob("ml", "train", "training", 40, 1, 4)
	train.Type = ptr("batch")
	train.Meta["steward.expected_runtime"] = "3h"
	wait := apiJob("ml", "wait", "training", 40, 1, 2)
	wait.Type = ptr("batch")
	cl.jobs["ml/train"], cl.jobs["ml/wait"] = train, wait
	cl.allocs = []*api.AllocationListStub{apiAlloc("a-train", train, "n1", []string{"n1-gpu0", "n1-gpu1", "n1-gpu2", "n1-gpu3"}, t0.Add(-2*time.Hour))}
	ev, sum := apiBlockedEval(wait, 1, t0.Add(-time.Second))
	cl.evals, cl.summary["ml/wait"] = []*api.Evaluation{ev}, sum
}

// TestQueueInRecordAndStatus: a held job's record carries its position,
// since when it waits, its forecast and what would unblock it, and the
// status lists it in the queue; later rounds whose forecast moves by
// seconds do not rewrite the record.
func TestQueueInRecordAndStatus(t *testing.T) {
	f := newFakeNomad()
	queueCluster(f)
	r := newRoundRunner(t, f)
	if _, err := r.round(0); err != nil {
		t.Fatal(err)
	}
	r.c.awaitForecast(t)
	if _, err := r.round(time.Second); err != nil {
		t.Fatal(err)
	}
	rec, _, _ := f.GetVar(context.Background(), "ml", "nomad/jobs/wait")
	if rec["steward_position"] != "1 of 1 in the cluster, 1 of 1 in tenant ml" {
		t.Errorf("steward_position %q", rec["steward_position"])
	}
	if rec["steward_waiting_since"] != t0.Add(-time.Second).Format(time.RFC3339) {
		t.Errorf("steward_waiting_since %q, want %s", rec["steward_waiting_since"], t0.Add(-time.Second).Format(time.RFC3339))
	}
	p50, err := time.Parse(time.RFC3339, rec["steward_forecast_p50"])
	// ml/train said 3h and ran 2h: about an hour left.
	if err != nil || p50.Before(t0.Add(20*time.Minute)) || p50.After(t0.Add(2*time.Hour)) {
		t.Errorf("steward_forecast_p50 %q (%v), want about an hour after %s", rec["steward_forecast_p50"], err, t0)
	}
	if _, err := time.Parse(time.RFC3339, rec["steward_forecast_p90"]); err != nil {
		t.Errorf("steward_forecast_p90 %q: %v", rec["steward_forecast_p90"], err)
	}
	if !strings.HasPrefix(rec["steward_forecast"], "about ") || !strings.Contains(rec["steward_forecast"], "(P90)") {
		t.Errorf("steward_forecast %q", rec["steward_forecast"])
	}
	if !strings.HasPrefix(rec["steward_unblock"], "starts when ml/train ") {
		t.Errorf("steward_unblock %q", rec["steward_unblock"])
	}
	// Rounds for three more minutes: forecasts every minute, each with
	// other draws; the record is not rewritten for that.
	// (r.round forgets each round's calls before the next.)
	writes := 0
	for s := 10 * time.Second; s <= 3*time.Minute; s += 10 * time.Second {
		if _, err := r.round(s); err != nil {
			t.Fatal(err)
		}
		writes += len(f.callsMatching("put ml nomad/jobs/wait"))
		r.c.awaitForecast(t)
	}
	if writes != 0 {
		t.Errorf("%d record writes in 3 minutes of rounds with nothing new", writes)
	}
	st, err := ReadStatus(context.Background(), f, r.c.cfg().StateNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Queue) != 1 || st.Queue[0].Job != "ml/wait" || st.Queue[0].Position != 1 || st.Queue[0].TenantPosition != 1 ||
		st.Queue[0].Rule != "capacity" || st.Queue[0].GPUs != 2 || st.Queue[0].ForecastP50.IsZero() ||
		!strings.Contains(st.Queue[0].ForecastNote, "steward.expected_runtime of 1 job") {
		b, _ := json.Marshal(st.Queue)
		t.Errorf("status queue %s", b)
	}

}

// TestQueueRecordAgreesWithStatus: a waiting job's record says the
// position and the queue's length that the status (steward queue) lists,
// in the same round, as jobs leave the queue and join it; "of N" counts
// the jobs waiting in the cluster, one entry each.
func TestQueueRecordAgreesWithStatus(t *testing.T) {
	f := newFakeNomad()
	queueCluster(f)
	cl := f.cl()
	wait2 := apiJob("ml", "wait2", "training", 40, 1, 2)
	wait2.Type = ptr("batch")
	ev2, sum2 := apiBlockedEval(wait2, 1, t0)
	cl.jobs["ml/wait2"], cl.summary["ml/wait2"] = wait2, sum2
	cl.evals = append(cl.evals, ev2)
	r := newRoundRunner(t, f)
	if _, err := r.round(0); err != nil {
		t.Fatal(err)
	}
	r.c.awaitForecast(t)
	steps := []struct {
		name   string
		after  time.Duration
		change func()
		queue  []string // the status's queue
		record map[string]string
	}{
		{name: "two waiting", after: time.Second, queue: []string{"ml/wait", "ml/wait2"}, record: map[string]string{
			"wait": "1 of 2 in the cluster, 1 of 2 in tenant ml", "wait2": "2 of 2 in the cluster, 2 of 2 in tenant ml"}},
		{name: "the second stops: of 1 at once", after: 6 * time.Second, change: func() {
			stopped := *cl.jobs["ml/wait2"]
			stopped.Stop = ptr(true)
			cl.jobs["ml/wait2"] = &stopped
			cl.evals = cl.evals[:1]
			delete(cl.summary, "ml/wait2")
		}, queue: []string{"ml/wait"}, record: map[string]string{"wait": "1 of 1 in the cluster, 1 of 1 in tenant ml"}},
		{name: "a third joins: of 2 at once", after: 12 * time.Second, change: func() {
			wait3 := apiJob("ml", "wait3", "training", 40, 1, 2)
			wait3.Type = ptr("batch")
			ev3, sum3 := apiBlockedEval(wait3, 1, t0.Add(9*time.Second))
			cl.jobs["ml/wait3"], cl.summary["ml/wait3"] = wait3, sum3
			cl.evals = append(cl.evals, ev3)
		}, queue: []string{"ml/wait", "ml/wait3"}, record: map[string]string{"wait": "1 of 2 in the cluster, 1 of 2 in tenant ml"}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if step.change != nil {
				f.mu.Lock()
				step.change()
				f.mu.Unlock()
			}
			if _, err := r.round(step.after); err != nil {
				t.Fatal(err)
			}
			st, err := ReadStatus(context.Background(), f, r.c.cfg().StateNamespace)
			if err != nil {
				t.Fatal(err)
			}
			var queue []string
			for _, q := range st.Queue {
				queue = append(queue, q.Job)
				if q.QueueLength != len(st.Queue) {
					t.Errorf("%s: queue_length %d, status lists %d", q.Job, q.QueueLength, len(st.Queue))
				}
			}
			if strings.Join(queue, " ") != strings.Join(step.queue, " ") {
				t.Errorf("status queue %v, want %v", queue, step.queue)
			}
			for job, want := range step.record {
				rec, _, _ := f.GetVar(context.Background(), "ml", "nomad/jobs/"+job)
				if rec["steward_position"] != want {
					t.Errorf("%s: steward_position %q, want %q", job, rec["steward_position"], want)
				}
			}
		})
	}
}

// TestForecastOptions: every replay, whatever a plan costs (replays plan
// on a share of a large cluster); hints within half a second.
func TestForecastOptions(t *testing.T) {
	tests := []struct {
		name  string
		plan  time.Duration
		hints int
	}{
		{"small cluster: the defaults", time.Millisecond, 32},
		{"1,000 nodes (10 ms a plan)", 10 * time.Millisecond, 32},
		{"10,000 nodes (80 ms a plan)", 80 * time.Millisecond, 6},
		{"slower still: one hint plan", 800 * time.Millisecond, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opt, hints := forecastOptions(tc.plan)
			if opt.Replays != 0 || opt.MaxPlans != 0 || opt.MaxNodes != 0 || hints != tc.hints {
				t.Errorf("replays %d, plans %d, nodes %d, hints %d; want the defaults and %d hints", opt.Replays, opt.MaxPlans, opt.MaxNodes, hints, tc.hints)
			}
		})
	}
}

// TestLearnArrivals: a job counts as an arrival once, when it first shows,
// with what it asks for; the jobs there when the controller started
// arrived before it watched and count for nothing.
func TestLearnArrivals(t *testing.T) {
	f := newFakeNomad()
	queueCluster(f)
	r := newRoundRunner(t, f)
	if _, err := r.round(0); err != nil {
		t.Fatal(err)
	}
	r.c.awaitForecast(t)
	if got, _ := r.c.pub.queue.fc.arrivals.Window(t0, r.c.pub.queue.fc.history, nil); len(got) != 0 {
		t.Fatalf("%d arrivals at the first round, want 0 (those jobs were there before)", len(got))
	}
	cl := f.cl()
	late := apiJob("ml", "late", "training", 40, 1, 2)
	late.Type = ptr("batch")
	cl.jobs["ml/late"] = late
	ev, sum := apiBlockedEval(late, 1, t0.Add(30*time.Second))
	cl.evals, cl.summary["ml/late"] = append(cl.evals, ev), sum
	for _, at := range []time.Duration{time.Minute, 2 * time.Minute} {
		if _, err := r.round(at); err != nil {
			t.Fatal(err)
		}
		r.c.awaitForecast(t)
	}
	got, since := r.c.pub.queue.fc.arrivals.Window(t0.Add(2*time.Minute), r.c.pub.queue.fc.history, nil)
	if len(got) != 1 || len(got[0].Demands) != 1 || got[0].Demands[0].Job.Ref.ID != "late" || got[0].Demands[0].GPUsPerAlloc != 2 ||
		!got[0].At.Equal(t0.Add(time.Minute)) || !since.Equal(t0) {
		t.Fatalf("arrivals %+v since %s; want ml/late (1 × 2 GPUs) at %s, since %s", got, since, t0.Add(time.Minute), t0)
	}
}

// TestBasisNote: the status's forecast basis says how many jobs' run
// times are other families' (a family with too few runs of its own).
func TestBasisNote(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts map[forecast.Source]int
		want   string
	}{
		{"similar jobs of their own families", map[forecast.Source]int{forecast.FromSimilar: 5},
			"run times: 5 from similar jobs"},
		{"some borrowed from other families", map[forecast.Source]int{forecast.FromSimilar: 5, borrowedRuns: 2, forecast.FromExpected: 3},
			"run times: steward.expected_runtime of 3 jobs, 5 from similar jobs (2 on other families' runs: too few of their own)"},
		{"nothing running", map[forecast.Source]int{}, "run times: none running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := basisNote(tc.counts); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
}
