package controller

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/forecast"
	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
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
		// A closure is named for the function it is in (mergeRecords'
		// workers: ...mergeRecords.func1).
		fn := fr.Function
		for i := strings.LastIndex(fn, "."); i >= 0 && strings.HasPrefix(fn[i+1:], "func"); i = strings.LastIndex(fn, ".") {
			fn = fn[:i]
		}
		name := fn[strings.LastIndex(fn, ".")+1:]
		switch name {
		case "record", "PutVar", "DeleteVar", "save", "forget", "mergeRecord", "mergeRecordTries", "mergeRecordWrite", "writeRecord", "unlockedFor":
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
		// forecast, when set, is the queue forecast that finished
		// before the round.
		forecast func(now time.Time) *forecast.Result
		// sample, when set, is the GPU activity sweeps read since the
		// step before (c.usage.add).
		sample func(c *Controller, from, to time.Time)
		// forecastStarts: a forecast of the queue as the round's plan
		// has it starts in the round, and runs until a step with
		// forecastEnds (its result in that step's forecast).
		forecastStarts, forecastEnds bool
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
	nbStops := func(f *fakeNomad) {
		cl := f.cl()
		cl.jobs["ml/nb"].Stop = ptr(true)
		cl.allocs = nil
	}
	trainPlaced := func(f *fakeNomad) {
		// Nomad places the resumed ml/train: it runs, preempted once.
		cl := f.cl()
		cl.allocs = []*api.AllocationListStub{apiAlloc("a-train2", cl.jobs["ml/train"], "n1", []string{"n1-gpu0", "n1-gpu1", "n1-gpu2", "n1-gpu3"}, t0.Add(4*time.Minute))}
		cl.evals = nil
	}
	// twentyWait: ml/train holds the node's 4 GPUs for 3 hours; 20 jobs
	// of the same tier wait behind it, none of which Steward acts on.
	waiting := make([]string, 20)
	for i := range waiting {
		waiting[i] = fmt.Sprintf("w%02d", i)
	}
	twentyWait := func(f *fakeNomad) {
		trainingAndWaiting(f.cl(), waiting, func(i int) time.Time { return t0.Add(time.Duration(i-60) * time.Second) })
	}
	// swinging is a forecast whose starts swing by 10 minutes, and whose
	// hints change, from one forecast to the next (replays of a busy
	// queue): each moves every waiting job's figures materially.
	swings := 0
	swinging := func(now time.Time) *forecast.Result {
		swings++
		res := &forecast.Result{At: now, Jobs: map[engine.JobRef]*forecast.JobForecast{}, Replays: 10}
		for i, id := range waiting {
			p50 := now.Add(time.Duration(30+i+10*(swings%2)) * time.Minute)
			res.Jobs[engine.JobRef{Namespace: "ml", ID: id}] = &forecast.JobForecast{P50: p50, P90: p50.Add(30 * time.Minute), Started: 10}
		}
		return res
	}
	eachWaiting := func(n int) map[string]int {
		m := map[string]int{}
		for _, id := range waiting {
			m["ml/"+id] = n
		}
		return m
	}
	arrives := func(id string, at time.Duration) func(f *fakeNomad) {
		return func(f *fakeNomad) {
			cl := f.cl()
			w := apiJob("ml", id, "training", 40, 1, 2)
			w.Type = ptr("batch")
			ev, sum := apiBlockedEval(w, 1, t0.Add(at))
			cl.jobs["ml/"+id], cl.summary["ml/"+id] = w, sum
			cl.evals = append(cl.evals, ev)
		}
	}
	with := func(m map[string]int, jobs ...string) map[string]int {
		for _, j := range jobs {
			m[j]++
		}
		return m
	}
	// idleHours: ml/nb (interactive, under the notebooks rule, mode
	// pressure) holds the node's 2 GPUs at 2% for three hours and nothing
	// waits for them: the rule never acts, and a round a minute sees it.
	idleCluster := func(f *fakeNomad) {
		cl := f.cl()
		cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
		nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
		cl.jobs["ml/nb"] = nb
		cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", []string{"n1-gpu0", "n1-gpu1"}, t0.Add(-time.Hour))}
	}
	idleSweeps := func(c *Controller, from, to time.Time) {
		for at := from.Add(10 * time.Second); !at.After(to); at = at.Add(10 * time.Second) {
			c.usage.add("a-nb", engine.Sample{At: at, Util: 2})
		}
	}
	var idleHours []step
	for at := time.Duration(0); at <= 3*time.Hour; at += time.Minute {
		idleHours = append(idleHours, step{at: at, sample: idleSweeps})
	}
	// trainForecast is a forecast for ml/train, waiting in holdCluster.
	trainForecast := func(now time.Time) *forecast.Result {
		return &forecast.Result{At: now, Replays: 10, Jobs: map[engine.JobRef]*forecast.JobForecast{
			{Namespace: "ml", ID: "train"}: {P50: now.Add(40 * time.Minute), P90: now.Add(70 * time.Minute), Started: 10}}}
	}
	var quietMinute []step
	for at := time.Duration(0); at <= time.Minute+5*time.Second; at += 5 * time.Second {
		quietMinute = append(quietMinute, step{at: at, forecast: swinging})
	}
	// reclaimCluster: tenant b's training holds the node's 4 GPUs, over
	// its reserve of 0; tenant a, within its reserve of 2, waits for 2:
	// a reserve reclaim, with the grace.
	reclaimCluster := func(f *fakeNomad) {
		cl := f.cl()
		cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
		train := apiJob("b", "train", "training", 40, 1, 4)
		want := apiJob("a", "want", "training", 40, 1, 2)
		cl.jobs["b/train"], cl.jobs["a/want"] = train, want
		cl.allocs = []*api.AllocationListStub{apiAlloc("a-train", train, "n1", []string{"n1-gpu0", "n1-gpu1", "n1-gpu2", "n1-gpu3"}, t0.Add(-2*time.Hour))}
		ev, sum := apiBlockedEval(want, 1, t0.Add(-time.Second))
		cl.evals, cl.summary["a/want"] = []*api.Evaluation{ev}, sum
	}
	reserves := strings.Replace(testPolicyText, `tenant "a" {}`, `tenant "a" {
  reserve = 2
}`, 1)
	// idleAlways: the notebooks rule stops idle work though nothing
	// waits, and requeues it.
	idleAlways := strings.Replace(testPolicyText, `after     = "15m"`, `after     = "15m"
  mode      = "always"
  action    = "requeue"`, 1)
	var idleRequeue []step
	for at := time.Duration(0); at <= 20*time.Minute; at += time.Minute {
		idleRequeue = append(idleRequeue, step{at: at, sample: idleSweeps})
	}
	pauses := func(f *fakeNomad) {
		if err := SubmitRequest(context.Background(), f, "ml", "asks", Request{Action: "pause", By: "ann"}); err != nil {
			panic(err)
		}
	}
	cases := []struct {
		name    string
		cluster func(f *fakeNomad)
		policy  string // the policy's text ("": testPolicyText)
		steps   []step
		// The writes of the whole story, by job.
		state, record map[string]int
	}{
		{name: "a preemption with grace: record then signal then hold the victim and resume the beneficiary",
			cluster: preemptionCluster,
			steps:   []step{{at: 0}, {at: signalDelay}, {at: signalDelay + 2*time.Minute}, {at: signalDelay + 2*time.Minute + time.Second}},
			// ml/train: the preemption recorded, signalled (the grace's
			// write-ahead: a restarted controller ends it on time and
			// signals a preemption recorded unsignalled with its whole
			// grace), finished; ml/nb: held, resumed, its record once
			// for each (no queue place while its victims checkpoint).
			state:  map[string]int{"ml/train": 2, "ml/nb": 2},
			record: map[string]int{"ml/train": 2, "ml/nb": 2}},
		{name: "a reserve reclaim with grace: as a preemption, two rounds that write",
			cluster: reclaimCluster, policy: reserves,
			steps:  []step{{at: 0}, {at: signalDelay}, {at: signalDelay + 2*time.Minute}, {at: signalDelay + 2*time.Minute + time.Second}, {at: 5 * time.Minute}},
			state:  map[string]int{"b/train": 2, "a/want": 2},
			record: map[string]int{"b/train": 2, "a/want": 2}},
		{name: "an idle requeue in mode always: the idle timer once, then the stop, its record once with its first place in the queue",
			cluster: idleCluster, policy: idleAlways, steps: idleRequeue,
			// The record a round after the stop, with the place the next
			// plan gives it (2 before: the stop, then its place).
			state:  map[string]int{"ml/nb": 2},
			record: map[string]int{"ml/nb": 1}},
		{name: "a pause of running work: held in one write",
			cluster: func(f *fakeNomad) {
				cl := f.cl()
				cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
				job := apiJob("ml", "asks", "training", 40, 1, 2)
				cl.jobs["ml/asks"] = job
				cl.allocs = []*api.AllocationListStub{apiAlloc("a-asks", job, "n1", []string{"n1-gpu0", "n1-gpu1"}, t0.Add(-time.Hour))}
			},
			steps:  []step{{at: 0}, {at: time.Minute, before: pauses}, {at: time.Minute + time.Second}, {at: 2 * time.Minute}},
			state:  map[string]int{"ml/asks": 1},
			record: map[string]int{"ml/asks": 1}},
		{name: "a preemption without grace: the victim's state written once in its round",
			cluster: func(f *fakeNomad) {
				preemptionCluster(f)
				f.cl().jobs["ml/train"].Meta[policy.DefaultCheckpointMetaKey] = policy.CheckpointNone
			},
			steps: []step{{at: 0}, {at: time.Second}, {at: time.Minute}},
			// ml/train: preempted and held in one write, its record once
			// a round later, with its first place in the queue (2
			// before: the preemption, then its place); ml/nb: left to
			// Nomad's queue, never held, nothing written.
			state:  map[string]int{"ml/train": 1},
			record: map[string]int{"ml/train": 1}},
		{name: "a priority set to its tier's: the record says the new priority at once and is not written again",
			cluster: func(f *fakeNomad) {
				// ml/asks runs with priority 90; its tier, training, is
				// 40.
				cl := f.cl()
				cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
				job := apiJob("ml", "asks", "training", 90, 1, 2)
				cl.jobs["ml/asks"] = job
				cl.allocs = []*api.AllocationListStub{apiAlloc("a-asks", job, "n1", []string{"n1-gpu0", "n1-gpu1"}, t0.Add(-time.Hour))}
			},
			steps:  []step{{at: 0}, {at: time.Second}, {at: time.Minute}},
			state:  map[string]int{"ml/asks": 1},
			record: map[string]int{"ml/asks": 1}},
		{name: "a hold of queued work",
			cluster: holdCluster,
			steps:   []step{{at: 0}, {at: 10 * time.Second}, {at: time.Minute}},
			state:   map[string]int{"ml/train": 1},
			record:  map[string]int{"ml/train": 1}},
		{name: "a hold while a forecast that includes the job runs: its record once, with its place and its first forecast",
			cluster: holdCluster,
			steps: []step{{at: 0, forecastStarts: true}, {at: 700 * time.Millisecond, forecast: trainForecast, forecastEnds: true},
				{at: 3 * time.Second}, {at: time.Minute}},
			// 2 before: the hold with its place, then its first forecast
			// in the round the forecast pokes.
			state:  map[string]int{"ml/train": 1},
			record: map[string]int{"ml/train": 1}},
		{name: "a hold whose forecast does not come: its record once the wait is up",
			cluster: holdCluster,
			steps:   []step{{at: 0, forecastStarts: true}, {at: time.Second}, {at: placeWait}, {at: 3 * time.Second}, {at: time.Minute}},
			state:   map[string]int{"ml/train": 1},
			record:  map[string]int{"ml/train": 1}},
		{name: "a hold resumed before its forecast comes: the resume's record at once, the hold's never",
			cluster: holdCluster,
			steps: []step{{at: 0, forecastStarts: true}, {at: 500 * time.Millisecond, before: nbDone},
				{at: time.Second}, {at: time.Minute}},
			state:  map[string]int{"ml/train": 2},
			record: map[string]int{"ml/train": 1}},
		{name: "a resume once GPUs are free: nothing written as Nomad places it",
			cluster: holdCluster,
			steps:   []step{{at: 0}, {at: time.Minute, before: nbDone}, {at: time.Minute + time.Second}, {at: 2 * time.Minute}},
			state:   map[string]int{"ml/train": 2},
			record:  map[string]int{"ml/train": 2}},
		{name: "only time passes after a preemption: its marks and times expire unwritten",
			cluster: preemptionCluster,
			steps: []step{{at: 0}, {at: signalDelay}, {at: signalDelay + 2*time.Minute}, {at: signalDelay + 2*time.Minute + time.Second},
				{at: 5 * time.Minute}, {at: 30 * time.Minute}, {at: time.Hour}},
			state:  map[string]int{"ml/train": 2, "ml/nb": 2},
			record: map[string]int{"ml/train": 2, "ml/nb": 2}},
		{name: "a day passes after a preemption: the count that ages out is not written for that alone",
			cluster: preemptionCluster,
			steps: []step{{at: 0}, {at: signalDelay}, {at: signalDelay + 2*time.Minute}, {at: signalDelay + 2*time.Minute + time.Second},
				{at: 3 * time.Minute, before: nbStops}, {at: 4 * time.Minute, before: trainPlaced},
				{at: 25 * time.Hour}, {at: 26 * time.Hour}},
			// ml/train also resumed once the notebook stops.
			state:  map[string]int{"ml/train": 3, "ml/nb": 2},
			record: map[string]int{"ml/train": 3, "ml/nb": 2}},
		{name: "a quiet minute with 20 waiting jobs: forecasts that swing write each record once then once a minute",
			cluster: twentyWait,
			steps:   quietMinute,
			// Each held at the first round (the only decisions).
			state:  eachWaiting(1),
			record: eachWaiting(2)},
		{name: "two jobs join the back of a queue of 20: no record in front is rewritten",
			cluster: twentyWait,
			steps: []step{{at: 0}, {at: 10 * time.Second, before: arrives("x1", 5*time.Second)},
				{at: 20 * time.Second, before: arrives("x2", 15*time.Second)}, {at: 30 * time.Second}},
			// Each held when it shows (its decision), its record written
			// then.
			state:  with(eachWaiting(1), "ml/x1", "ml/x2"),
			record: with(eachWaiting(1), "ml/x1", "ml/x2")},
		{name: "a notebook idle for three hours that nothing waits for: its idle timer written once, not as its stretch outlasts the samples kept",
			cluster: idleCluster,
			steps:   idleHours,
			// Its idle timer once it has idled for idleSaveAfter (a
			// restarted controller resumes it); no decision, no record.
			state:  map[string]int{"ml/nb": 1},
			record: map[string]int{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			tc.cluster(f)
			w := countWrites(f)
			r := newRoundRunner(t, f)
			if tc.policy != "" {
				p, diags := policy.ParseBytes("test.hcl", []byte(tc.policy))
				if diags.HasErrors() {
					t.Fatal(diags.Error())
				}
				r.c.pol, r.c.eng = p, engine.New(p)
			}
			// Queue forecasts run beside the rounds and update records
			// when they finish, at their own interval: none starts here,
			// so that the count is the rounds' alone.
			r.c.pub.queue.fc = newQueueForecaster()
			r.c.pub.queue.fc.running = true
			last := t0.Add(-time.Minute)
			for _, s := range tc.steps {
				if s.before != nil {
					s.before(f)
				}
				if s.sample != nil {
					s.sample(r.c, last, t0.Add(s.at))
				}
				last = t0.Add(s.at)
				if s.forecastStarts || s.forecastEnds {
					r.c.pub.queue.fc.mu.Lock()
					if s.forecastStarts {
						r.c.pub.queue.fc.startedAt = t0.Add(s.at)
					}
					r.c.pub.queue.fc.running = !s.forecastEnds
					r.c.pub.queue.fc.mu.Unlock()
				}
				if s.forecast != nil {
					r.c.pub.queue.fc.mu.Lock()
					r.c.pub.queue.fc.result, r.c.pub.queue.fc.basis = s.forecast(t0.Add(s.at)), "test"
					r.c.pub.queue.fc.mu.Unlock()
				}
				w.round = s.at.String()
				if _, err := r.round(s.at); err != nil {
					t.Fatalf("round at %s: %v", s.at, err)
				}
				if s.forecastEnds {
					// No other forecast starts in the story.
					r.c.pub.queue.fc.mu.Lock()
					r.c.pub.queue.fc.running, r.c.pub.queue.fc.startedAt = true, time.Time{}
					r.c.pub.queue.fc.mu.Unlock()
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
