package controller

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// writeCounter counts the controller's writes of job states and job
// records by job, round and call site (the controller function that made
// it), from the fake's calls.
type writeCounter struct {
	round string
	// perRound counts "kind job" per round; sites counts "kind job from
	// site" over the story.
	perRound map[string]map[string]int
	sites    map[string]int
	state    int
	record   int
}

func countWrites(f *fakeNomad) *writeCounter {
	w := &writeCounter{perRound: map[string]map[string]int{}, sites: map[string]int{}}
	f.siteHook = func(call string) {
		var kind, job string
		switch {
		case strings.HasPrefix(call, "put steward steward/jobs/"), strings.HasPrefix(call, "delete steward steward/jobs/"):
			kind, job = "state", call[strings.Index(call, "steward/jobs/")+len("steward/jobs/"):]
			w.state++
		case strings.HasPrefix(call, "put ") && strings.Contains(call, " nomad/jobs/"):
			f := strings.Fields(call)
			kind, job = "record", f[1]+"/"+strings.TrimPrefix(f[2], "nomad/jobs/")
			w.record++
		default:
			return
		}
		if w.perRound[w.round] == nil {
			w.perRound[w.round] = map[string]int{}
		}
		w.perRound[w.round][kind+" "+job]++
		w.sites[kind+" "+job+" from "+writeSite()]++
	}
	return w
}

// writeSite names the controller function that made the write in
// progress: the first caller that is not a storage helper.
func writeSite() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		fr, more := frames.Next()
		name := fr.Function[strings.LastIndex(fr.Function, ".")+1:]
		switch name {
		case "record", "PutVar", "DeleteVar", "save", "forget", "mergeRecord", "writeRecordWith", "writeRecord":
		default:
			if strings.Contains(fr.Function, "/controller.") {
				return name
			}
		}
		if !more {
			return "?"
		}
	}
}

func (w *writeCounter) String() string {
	var out []string
	for s, n := range w.sites {
		out = append(out, fmt.Sprintf("%s: %d", s, n))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// TestWritesPerDecision counts the state and record writes of named
// stories run as whole rounds on the fake cluster: at most one state
// write and one record write per job and round, none as time passes
// (marks and preemption times that expire, a hold Nomad has taken in
// full, a finished preemption whose victims are gone), and in all about
// one of each per job per decision.
func TestWritesPerDecision(t *testing.T) {
	type step struct {
		at     time.Duration
		before func(f *fakeNomad) // a change to the cluster before the round
	}
	holdCluster := func(f *fakeNomad) {
		// ml/nb (interactive) holds the node's 2 GPUs and may not be
		// preempted for ml/train (training), which waits.
		cl := f.cl()
		cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
		nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
		train := apiJob("ml", "train", "training", 40, 1, 2)
		cl.jobs["ml/nb"], cl.jobs["ml/train"] = nb, train
		cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", []string{"n1-gpu0", "n1-gpu1"}, t0.Add(-time.Hour))}
		ev, sum := apiBlockedEval(train, 1, t0.Add(-time.Second))
		cl.evals, cl.summary["ml/train"] = []*api.Evaluation{ev}, sum
	}
	nbDone := func(f *fakeNomad) {
		// The notebook's owner stops it: its GPUs are free.
		cl := f.cl()
		cl.jobs["ml/nb"].Stop = ptr(true)
		cl.allocs = nil
	}
	cases := []struct {
		name    string
		cluster func(f *fakeNomad)
		steps   []step
		// The writes of the whole story, by job.
		state, record map[string]int
	}{
		{name: "a preemption with grace: record then signal then hold the victim and resume the beneficiary",
			cluster: preemptionCluster,
			steps:   []step{{at: 0}, {at: signalDelay}, {at: signalDelay + 2*time.Minute}, {at: signalDelay + 2*time.Minute + time.Second}},
			// ml/train: the preemption recorded, signalled, finished;
			// ml/nb: held, resumed.
			state:  map[string]int{"ml/train": 3, "ml/nb": 2},
			record: map[string]int{"ml/train": 2, "ml/nb": 3}},
		{name: "a hold of queued work",
			cluster: holdCluster,
			steps:   []step{{at: 0}, {at: 10 * time.Second}, {at: time.Minute}},
			state:   map[string]int{"ml/train": 1},
			record:  map[string]int{"ml/train": 1}},
		{name: "a resume once GPUs are free: nothing written as Nomad places it",
			cluster: holdCluster,
			steps:   []step{{at: 0}, {at: time.Minute, before: nbDone}, {at: time.Minute + time.Second}, {at: 2 * time.Minute}},
			state:   map[string]int{"ml/train": 2},
			record:  map[string]int{"ml/train": 2}},
		{name: "only time passes after a preemption: its marks and times expire unwritten",
			cluster: preemptionCluster,
			steps: []step{{at: 0}, {at: signalDelay}, {at: signalDelay + 2*time.Minute}, {at: signalDelay + 2*time.Minute + time.Second},
				{at: 5 * time.Minute}, {at: 30 * time.Minute}, {at: time.Hour}},
			state:  map[string]int{"ml/train": 3, "ml/nb": 2},
			record: map[string]int{"ml/train": 2, "ml/nb": 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			tc.cluster(f)
			w := countWrites(f)
			r := newRoundRunner(t, f)
			// Queue forecasts run beside the rounds and update records
			// when they finish, at their own interval: none starts here,
			// so that the count is the rounds' alone.
			r.c.fc = newQueueForecaster()
			r.c.fc.running = true
			for _, s := range tc.steps {
				if s.before != nil {
					s.before(f)
				}
				w.round = s.at.String()
				if _, err := r.round(s.at); err != nil {
					t.Fatalf("round at %s: %v", s.at, err)
				}
				for what, n := range w.perRound[w.round] {
					if n > 1 {
						t.Errorf("round at %s: %d %s writes, want at most one (%s)", s.at, n, what, w)
					}
				}
			}
			state, record := map[string]int{}, map[string]int{}
			for _, counts := range w.perRound {
				for what, n := range counts {
					kind, job, _ := strings.Cut(what, " ")
					if kind == "state" {
						state[job] += n
					} else {
						record[job] += n
					}
				}
			}
			if fmt.Sprint(state) != fmt.Sprint(tc.state) || fmt.Sprint(record) != fmt.Sprint(tc.record) {
				t.Errorf("state writes %v, record writes %v; want %v and %v (%s)", state, record, tc.state, tc.record, w)
			}
			t.Logf("%d state and %d record writes: %s; by round %v", w.state, w.record, w, w.perRound)
		})
	}
}
