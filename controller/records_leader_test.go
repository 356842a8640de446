package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestRecordsOfANewLeader: a new leader knows none of the records it
// inherits (what it last wrote is this process's alone) and merges each
// with what the variable holds. Records that already say what it would
// write are left unwritten: before, every one was written again, one
// write each, in the new leader's first round (issue 33: a few hundred at
// 250 nodes, between the takeover and its first completed round).
func TestRecordsOfANewLeader(t *testing.T) {
	const jobs = 20
	// Twenty jobs run at priority 90 in tier training (40): the first
	// leader sets each to its tier's priority, a decision each job's
	// record says.
	cluster := func(f *fakeNomad) { runningAtNinety(f.cl(), jobs, "p%02d") }
	record := func(f *fakeNomad, id string) map[string]string {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.vars["ml:nomad/jobs/"+id]
	}
	cases := []struct {
		name string
		// meanwhile changes the records between the leaders.
		meanwhile func(f *fakeNomad)
		want      map[string]int // the new leader's record writes, by job
		check     func(t *testing.T, f *fakeNomad)
	}{
		{name: "records the dead leader left as they are: none written", want: map[string]int{}},
		{name: "a record its owner added keys to: not written, the owner's keys kept",
			meanwhile: func(f *fakeNomad) { record(f, "p03")["db_password"] = "hunter2" },
			want:      map[string]int{},
			check: func(t *testing.T, f *fakeNomad) {
				if got := record(f, "p03")["db_password"]; got != "hunter2" {
					t.Errorf("the owner's key is %q after the takeover, want it kept", got)
				}
			}},
		{name: "a record the dead leader left saying something else: written, alone",
			meanwhile: func(f *fakeNomad) { record(f, "p07")["steward_reason"] = "an older reason" },
			want:      map[string]int{"ml/p07": 1},
			check: func(t *testing.T, f *fakeNomad) {
				if got := record(f, "p07")["steward_reason"]; got == "an older reason" {
					t.Errorf("the stale record was left as it was")
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cluster(f)
			r := newRoundRunner(t, f)
			for _, at := range []time.Duration{0, time.Second} {
				if _, err := r.round(at); err != nil {
					t.Fatalf("the first leader's round at %s: %v", at, err)
				}
			}
			if n := len(record(f, "p00")); n == 0 {
				t.Fatalf("the first leader wrote no record")
			}
			if tc.meanwhile != nil {
				tc.meanwhile(f)
			}
			r.restart() // the new leader
			w := countWrites(f)
			for _, at := range []time.Duration{time.Minute, time.Minute + time.Second} {
				w.round = at.String()
				if _, err := r.round(at); err != nil {
					t.Fatalf("the new leader's round at %s: %v", at, err)
				}
			}
			got := map[string]int{}
			for _, counts := range w.perRound {
				for what, n := range counts {
					if kind, job, _ := strings.Cut(what, " "); kind == "record" {
						got[job] += n
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("the new leader's record writes %v, want %v (%s)", got, tc.want, w)
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

// inParallel runs each index once, never more than width at a time (a new
// leader's record merges and state reads: recordMerges, stateReads).
func TestInParallel(t *testing.T) {
	for _, tc := range []struct{ n, width int }{{0, 16}, {1, 16}, {40, 16}, {5, 16}, {3, 1}} {
		var mu sync.Mutex
		inFlight, most := 0, 0
		done := make([]int, tc.n)
		inParallel(tc.n, tc.width, func(i int) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			done[i]++
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inFlight--
			mu.Unlock()
		})
		for i, n := range done {
			if n != 1 {
				t.Errorf("n %d, width %d: index %d ran %d times", tc.n, tc.width, i, n)
			}
		}
		if most > tc.width || tc.n > 1 && tc.width > 1 && most < 2 {
			t.Errorf("n %d, width %d: %d at once", tc.n, tc.width, most)
		}
	}
}

// TestQueueRecordsOfANewLeader: the records of waiting jobs that a new
// leader inherits, current as the dead leader left them, are not written
// again. Before, each said its figures as of the old leader's round
// (steward_position_at), and the new leader, which had shown no job its
// place yet, wrote every one with its own time (and, behind the first
// queueRecordsPerRound, without their places at all; before its first
// forecast, without their forecasts), though no place moved (issue 33: a
// few hundred writes at 250 nodes, most of a new leader's first round).
// What did move materially is still written.
func TestQueueRecordsOfANewLeader(t *testing.T) {
	const waiting = 40 // more than queueRecordsPerRound
	waitingIDs := make([]string, waiting)
	for i := range waitingIDs {
		waitingIDs[i] = fmt.Sprintf("w%02d", i)
	}
	cluster := func(f *fakeNomad) {
		trainingAndWaiting(f.cl(), waitingIDs, func(i int) time.Time { return t0.Add(-time.Duration(waiting-i) * time.Minute) })
	}
	cases := []struct {
		name string
		// meanwhile changes the cluster between the leaders.
		meanwhile func(f *fakeNomad)
		// forecast: the new leader's rounds come after its first forecast.
		forecast bool
		want     []string // the jobs whose records the new leader writes
	}{
		{name: "nothing moved: none written"},
		{name: "nothing moved, the new leader's forecast made: none written", forecast: true},
		{name: "the head of the queue left: the places that moved materially written",
			meanwhile: func(f *fakeNomad) {
				cl := f.cl()
				delete(cl.jobs, "ml/w00")
				delete(cl.summary, "ml/w00")
				cl.evals = slices.DeleteFunc(cl.evals, func(ev *api.Evaluation) bool { return ev.JobID == "w00" })
			},
			// Places 2 to 9 become 1 to 8 (movedMuch); place 10 and
			// behind, and the queue's length (40 to 39), did not move
			// by more than a tenth.
			want: []string{"ml/w01", "ml/w02", "ml/w03", "ml/w04", "ml/w05", "ml/w06", "ml/w07", "ml/w08"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cluster(f)
			r := newRoundRunner(t, f)
			if _, err := r.round(0); err != nil {
				t.Fatal(err)
			}
			r.c.awaitForecast(t)
			for _, at := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
				if _, err := r.round(at); err != nil {
					t.Fatalf("the first leader's round at %s: %v", at, err)
				}
			}
			for i := range waiting {
				rec, _, _ := f.GetVar(context.Background(), "ml", fmt.Sprintf("nomad/jobs/w%02d", i))
				if rec["steward_position"] == "" || rec["steward_forecast"] == "" {
					t.Fatalf("the first leader left w%02d's record without its place or forecast: %v", i, rec)
				}
			}
			if tc.meanwhile != nil {
				f.mu.Lock()
				tc.meanwhile(f)
				f.mu.Unlock()
			}
			r.restart() // the new leader
			w := countWrites(f)
			at := 10 * time.Second
			w.round = at.String()
			if _, err := r.round(at); err != nil {
				t.Fatalf("the new leader's first round: %v", err)
			}
			if tc.forecast {
				r.c.awaitForecast(t)
			}
			for _, at := range []time.Duration{11 * time.Second, 12 * time.Second} {
				w.round = at.String()
				if _, err := r.round(at); err != nil {
					t.Fatalf("the new leader's round at %s: %v", at, err)
				}
			}
			var got []string
			for _, counts := range w.perRound {
				for what := range counts {
					if kind, job, _ := strings.Cut(what, " "); kind == "record" {
						got = append(got, job)
					}
				}
			}
			slices.Sort(got)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("the new leader wrote the records of %v, want %v (%s)", got, tc.want, w)
			}
		})
	}
}

// TestInheritedRecordsSpread: a new leader merges at most
// inheritedRecordsPerRound of the records it inherits in its first round
// (each merge reads the variable: a few hundred reads were most of the
// first round at 250 nodes, issue 33), asks for the next round within
// inheritedRecordsWake, and has merged every one, a stale record written,
// within the rounds that follow.
func TestInheritedRecordsSpread(t *testing.T) {
	const jobs = 100
	f := newFakeNomad()
	runningAtNinety(f.cl(), jobs, "p%03d")
	r := newRoundRunner(t, f)
	for _, at := range []time.Duration{0, time.Second, 2 * time.Second} {
		if _, err := r.round(at); err != nil {
			t.Fatalf("the first leader's round at %s: %v", at, err)
		}
	}
	stale := fmt.Sprintf("p%03d", jobs-1) // the last merged
	f.mu.Lock()
	for i := range jobs {
		if len(f.vars[fmt.Sprintf("ml:nomad/jobs/p%03d", i)]) == 0 {
			t.Fatalf("the first leader left p%03d without a record", i)
		}
	}
	f.vars["ml:nomad/jobs/"+stale]["steward_reason"] = "an older reason"
	f.mu.Unlock()
	r.restart() // the new leader
	w := countWrites(f)
	steps := []struct {
		after      time.Duration
		mostMerged int  // record reads, at most
		written    bool // the stale record written by the end of the round
	}{
		{time.Minute, inheritedRecordsPerRound + 1, false}, // and the namespace's status view, read once a term
		{time.Minute + time.Second, jobs - inheritedRecordsPerRound, true},
		{time.Minute + 2*time.Second, 0, true},
	}
	reads := make([]int, len(steps))
	for i, step := range steps {
		r.clock = t0.Add(step.after)
		f.mu.Lock()
		before := f.gets["ml"]
		f.mu.Unlock()
		wake, err := r.c.reconcile(context.Background())
		if err != nil {
			t.Fatalf("the new leader's round at %s: %v", step.after, err)
		}
		f.mu.Lock()
		reason := f.vars["ml:nomad/jobs/"+stale]["steward_reason"]
		reads[i] = f.gets["ml"] - before
		f.mu.Unlock()
		if written := reason != "an older reason"; written != step.written {
			t.Errorf("round at %s: the stale record written %v, want %v", step.after, written, step.written)
		}
		if i == 0 && wake.After(r.clock.Add(inheritedRecordsWake)) {
			t.Errorf("with records left, the next round is due in %s, want within %s", wake.Sub(r.clock), inheritedRecordsWake)
		}
	}
	// The last round merges none: its reads in the namespace are the
	// round's others.
	for i, step := range steps {
		if merged := reads[i] - reads[len(reads)-1]; merged > step.mostMerged {
			t.Errorf("round at %s: %d records read, want at most %d", step.after, merged, step.mostMerged)
		}
	}
	if w.record != 1 {
		t.Errorf("the new leader wrote %d records, want the stale one alone (%s)", w.record, w)
	}
}

// trainingAndWaiting fills cl with a 3-hour training job on all four GPUs
// of n1, and batch jobs of 2 GPUs waiting behind it (each since since(i)).
func trainingAndWaiting(cl *fakeCluster, waiting []string, since func(i int) time.Time) {
	cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
	train := apiJob("ml", "train", "training", 40, 1, 4)
	train.Type = ptr("batch")
	train.Meta["steward.expected_runtime"] = "3h"
	cl.jobs["ml/train"] = train
	cl.allocs = []*api.AllocationListStub{apiAlloc("a-train", train, "n1", []string{"n1-gpu0", "n1-gpu1", "n1-gpu2", "n1-gpu3"}, t0.Add(-2*time.Hour))}
	for i, id := range waiting {
		w := apiJob("ml", id, "training", 40, 1, 2)
		w.Type = ptr("batch")
		ev, sum := apiBlockedEval(w, 1, since(i))
		cl.jobs["ml/"+id], cl.summary["ml/"+id] = w, sum
		cl.evals = append(cl.evals, ev)
	}
}

// runningAtNinety fills cl with n jobs of 2 GPUs each (IDs by format)
// running at priority 90 in tier training (40): the first leader sets
// each to its tier's priority, a decision each job's record says.
func runningAtNinety(cl *fakeCluster, n int, format string) {
	cl.nodes = []*api.NodeListStub{apiNode("n1", 2*n)}
	for i := range n {
		id := fmt.Sprintf(format, i)
		j := apiJob("ml", id, "training", 90, 1, 2)
		cl.jobs["ml/"+id] = j
		gpus := []string{fmt.Sprintf("n1-gpu%d", 2*i), fmt.Sprintf("n1-gpu%d", 2*i+1)}
		cl.allocs = append(cl.allocs, apiAlloc("a-"+id, j, "n1", gpus, t0.Add(-time.Hour)))
	}
}
