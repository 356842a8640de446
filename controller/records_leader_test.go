package controller

import (
	"fmt"
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
	cluster := func(f *fakeNomad) {
		cl := f.cl()
		cl.nodes = []*api.NodeListStub{apiNode("n1", 2*jobs)}
		for i := range jobs {
			id := fmt.Sprintf("p%02d", i)
			j := apiJob("ml", id, "training", 90, 1, 2)
			cl.jobs["ml/"+id] = j
			gpus := []string{fmt.Sprintf("n1-gpu%d", 2*i), fmt.Sprintf("n1-gpu%d", 2*i+1)}
			cl.allocs = append(cl.allocs, apiAlloc("a-"+id, j, "n1", gpus, t0.Add(-time.Hour)))
		}
	}
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
