package controller

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

func roundWith(jobs []*ObservedJob, allocs []ObservedAlloc) *round {
	obs := &Observation{At: t0, Jobs: map[jobKey]*ObservedJob{}, Allocs: allocs, Queued: map[jobKey]map[string]QueuedGroup{},
		Nodes: []ObservedNode{{ID: "n1", Name: "n1", NodePool: "default", GPUs: 8}}}
	for _, j := range jobs {
		obs.Jobs[jobKey{j.Namespace, j.ID}] = j
	}
	return newRound(t0, obs, nil)
}

func alloc(id, jobID string) ObservedAlloc {
	return ObservedAlloc{ID: id, Namespace: "ml", JobID: jobID, Group: "work", NodeID: "n1", GPUIDs: []string{"g-" + id}, ClientStatus: "running",
		RunningTasks: []string{"work"}}
}

// TestPreemption: the victim's state is written before any call on it;
// with grace the record is written first, the victim signalled a moment
// later and held at the deadline (by a restarted controller here); a
// partial preemption of a group's highest name indexes lowers its count
// alone (Nomad stops exactly those); victims that are not the top of
// their group (or whose names are unknown) are stopped one by one first.
func TestPreemption(t *testing.T) {
	reason := engine.Reason{Rule: engine.RulePriority, Message: "tier training (priority 40) yields 2 GPUs to ml/nb/work"}
	cases := []struct {
		name  string
		grace time.Duration
		count int      // the victim group's count
		vict  []string // allocations preempted
		now   []string // calls made at once (after the state write)
		sig   []string // calls made a moment later (the checkpoint signal)
		later []string // calls made when the grace is over
		named bool     // the allocations have names: a1 is train.work[0]
	}{
		{"whole group, no grace: held at once", 0, 2, []string{"a1", "a2"},
			[]string{"scale ml/train work 0: Steward preempts 2 allocations: " + reason.Message}, nil, nil, false},
		{"part of a group, names unknown: the chosen allocations are stopped, then the count lowered", 0, 4, []string{"a2", "a3"},
			[]string{"stop ml a2", "stop ml a3", "scale ml/train work 2: Steward preempts 2 allocations: " + reason.Message}, nil, nil, false},
		{"part of a group, its highest names: the lower count alone stops them", 0, 4, []string{"a3", "a4"},
			[]string{"scale ml/train work 2: Steward preempts 2 allocations: " + reason.Message}, nil, nil, true},
		{"part of a group, not its highest names: stopped one by one first", 0, 4, []string{"a2", "a4"},
			[]string{"stop ml a2", "stop ml a4", "scale ml/train work 2: Steward preempts 2 allocations: " + reason.Message}, nil, nil, true},
		{"with grace: record, signal, hold at the deadline", 2 * time.Minute, 2, []string{"a1", "a2"},
			nil,
			[]string{"signal ml a1 SIGUSR1", "signal ml a2 SIGUSR1"},
			[]string{"scale ml/train work 0: Steward preempts 2 allocations: " + reason.Message}, false},
		{"part of a group with grace: record, signal, the lower count alone at the deadline", 2 * time.Minute, 4, []string{"a3", "a4"},
			nil,
			[]string{"signal ml a3 SIGUSR1", "signal ml a4 SIGUSR1"},
			[]string{"scale ml/train work 2: Steward preempts 2 allocations: " + reason.Message}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			train := job("ml", "train", "training", 40, tc.count, 1)
			var allocs []ObservedAlloc
			for i := 1; i <= tc.count; i++ {
				a := alloc("a"+string(rune('0'+i)), "train")
				if tc.named {
					a.Name = "train.work[" + string(rune('0'+i-1)) + "]"
				}
				allocs = append(allocs, a)
			}
			r := roundWith([]*ObservedJob{train}, allocs)
			a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work",
				Allocs: tc.vict, GPUs: len(tc.vict), Grace: tc.grace, Signal: "SIGUSR1", Requeue: true,
				For: &engine.JobRef{Namespace: "ml", ID: "nb"}, Reason: reason}
			if tc.grace == 0 {
				a.Signal = ""
			}
			if err := c.execute(context.Background(), r, a); err != nil {
				t.Fatal(err)
			}
			calls := f.callsMatching("")
			if len(calls) == 0 || calls[0] != "put steward steward/jobs/ml/train" {
				t.Fatalf("first call %v: want the state written first", calls)
			}
			if got := withoutPuts(calls); strings.Join(got, "\n") != strings.Join(tc.now, "\n") {
				t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.now, "\n"))
			}
			st := c.states()[jobKey{"ml", "train"}]
			if tc.later == nil {
				if st.heldCount() != len(tc.vict) || len(st.Preemptions) != 1 || st.Status != StatusPreempted {
					t.Fatalf("state after preemption %+v", st)
				}
				return
			}
			if st.Status != StatusDraining || len(st.Draining) != 1 || st.heldCount() != 0 {
				t.Fatalf("state during grace %+v", st)
			}
			if items, _, _ := f.GetVar(context.Background(), "ml", "nomad/jobs/train"); items["steward_grace"] != "2m" ||
				items["steward_reason"] != reason.Message || items["steward_state"] != StatusDraining ||
				items["steward_resumed"] != "1" || items["steward_resume_count"] != "1" {
				// The resume keys are there before the victims stop, so
				// that their replacements render them at start.
				t.Fatalf("record before the signal: %v", items)
			}
			f.calls = nil
			r1 := roundWith([]*ObservedJob{train}, allocs)
			r1.now = t0.Add(signalDelay)
			c.drains.finishDrains(context.Background(), r1)
			if got := withoutPuts(f.callsMatching("")); strings.Join(got, "\n") != strings.Join(tc.sig, "\n") {
				t.Fatalf("calls after the delay:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.sig, "\n"))
			}
			if got := f.callsMatching("put steward"); len(got) != 0 {
				t.Fatalf("state written for the signal alone: %v", got)
			}
			f.calls = nil
			// A restarted controller (same saved state: decided, the
			// signal's time never written) signals the victims again at
			// the deadline, with a whole grace, and finishes it then.
			again := t0.Add(signalDelay + tc.grace)
			clock := newTestClock(again)
			c2 := testController(t, f, withClock(clock.now))
			if err := c2.loadStates(context.Background()); err != nil {
				t.Fatal(err)
			}
			r2 := roundWith([]*ObservedJob{train}, allocs)
			r2.now = again
			c2.drains.finishDrains(context.Background(), r2)
			if got := withoutPuts(f.callsMatching("")); strings.Join(got, "\n") != strings.Join(tc.sig, "\n") {
				t.Fatalf("restarted, calls at the first deadline:\n%s\nwant the signal again:\n%s", strings.Join(got, "\n"), strings.Join(tc.sig, "\n"))
			}
			f.calls = nil
			end := again.Add(tc.grace)
			clock.set(end)
			r2 = roundWith([]*ObservedJob{train}, allocs)
			r2.now = end
			c2.drains.finishDrains(context.Background(), r2)
			if got := withoutPuts(f.callsMatching("")); strings.Join(got, "\n") != strings.Join(tc.later, "\n") {
				t.Fatalf("calls at the deadline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.later, "\n"))
			}
			// Held; the drain is kept (finished) until the victims are gone.
			if st := c2.states()[jobKey{"ml", "train"}]; st.heldCount() != 2 || len(st.Draining) != 1 || !st.Draining[0].Finished {
				t.Fatalf("state after the deadline %+v", st)
			}
			r3 := roundWith([]*ObservedJob{train}, nil)
			r3.now = end.Add(time.Second)
			c2.drains.finishDrains(context.Background(), r3)
			if st := c2.states()[jobKey{"ml", "train"}]; len(st.Draining) != 0 {
				t.Fatalf("finished drain kept after its victims stopped: %+v", st.Draining)
			}
		})
	}
}

// TestLimitStopOfUnadmittedWork: work the limit stops before any plan saw
// it (Nomad placed it over its tenant's limit between two rounds) was never
// admitted: its job is held by the limit, with the limit's reason, and the
// stop is no preemption (not counted toward the eviction cap). Work an
// earlier plan saw run (a limit lowered since) is preempted, as is new work
// stopped for another rule, and any before the term's first plan.
func TestLimitStopOfUnadmittedWork(t *testing.T) {
	limit := engine.Reason{Rule: engine.RuleLimit, Message: "tenant ml holds 3 GPUs, limit 2: giving back 1"}
	priority := engine.Reason{Rule: engine.RulePriority, Message: "tier training (priority 40) yields 1 GPU to ml/nb/work"}
	for _, tc := range []struct {
		name        string
		planned     map[string]bool // allocations the last plan saw (nil: no plan yet)
		reason      engine.Reason
		status      string
		preemptions int
		scale       string
	}{
		{name: "placed since the last plan: held by the limit", planned: map[string]bool{"a1": true}, reason: limit,
			status: StatusHeld,
			scale:  "scale ml/train work 1: Steward holds (over its tenant's limit) 1 allocation: " + limit.Message},
		{name: "seen by an earlier plan (limit lowered): preempted", planned: map[string]bool{"a1": true, "a2": true}, reason: limit,
			status: StatusPreempted, preemptions: 1,
			scale: "scale ml/train work 1: Steward preempts 1 allocation: " + limit.Message},
		{name: "before the term's first plan: preempted", reason: limit,
			status: StatusPreempted, preemptions: 1,
			scale: "scale ml/train work 1: Steward preempts 1 allocation: " + limit.Message},
		{name: "new work stopped for another rule: preempted", planned: map[string]bool{"a1": true}, reason: priority,
			status: StatusPreempted, preemptions: 1,
			scale: "scale ml/train work 1: Steward preempts 1 allocation: " + priority.Message},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			c.drains.planned = tc.planned
			train := job("ml", "train", "training", 40, 2, 1)
			r := roundWith([]*ObservedJob{train}, []ObservedAlloc{alloc("a1", "train"), alloc("a2", "train")})
			a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work",
				Allocs: []string{"a2"}, GPUs: 1, Requeue: true, Reason: tc.reason}
			if err := c.execute(context.Background(), r, a); err != nil {
				t.Fatal(err)
			}
			st := c.states()[jobKey{"ml", "train"}]
			if st.Status != tc.status || len(st.Preemptions) != tc.preemptions || st.heldCount() != 1 ||
				st.Reason != tc.reason.Message || st.Rule != string(tc.reason.Rule) {
				t.Errorf("state: status %q, %d preemptions, %d held, reason %q (%s); want %q, %d, 1, %q (%s)", st.Status,
					len(st.Preemptions), st.heldCount(), st.Reason, st.Rule, tc.status, tc.preemptions, tc.reason.Message, tc.reason.Rule)
			}
			if st.Interrupted["work"] != (tc.preemptions > 0) {
				t.Errorf("interrupted %v: want %v", st.Interrupted, tc.preemptions > 0)
			}
			if got := f.callsMatching("scale "); len(got) != 1 || got[0] != tc.scale {
				t.Errorf("scale calls %q, want %q", got, tc.scale)
			}
			if items := recordItems(testPolicy(t), st, train, time.Time{}, t0); items["steward_state"] != tc.status ||
				items["steward_preemptions"] != strconv.Itoa(tc.preemptions) || items["steward_reason"] != tc.reason.Message {
				t.Errorf("record %v", items)
			}
		})
	}
}

func withoutPuts(calls []string) []string {
	var out []string
	for _, c := range calls {
		if !strings.HasPrefix(c, "put ") {
			out = append(out, c)
		}
	}
	return out
}

// TestSyncHolds: a hold recorded but never applied (the controller died
// in between) is applied; a job its owner changed since wins.
func TestSyncHolds(t *testing.T) {
	cases := []struct {
		name      string
		count     int
		index     uint64 // the job's modify index now
		wantCalls []string
		wantHeld  int
	}{
		{"in step: nothing to do", 0, 12, nil, 2},
		{"recorded, not applied: apply it", 2, 10, []string{"scale ml/train work 0: Steward sets group work to 0 allocations (decided earlier, not applied then: a failed call or a restart)"}, 2},
		{"changed by its owner: the owner wins", 3, 15, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			c.states()[jobKey{"ml", "train"}] = &JobState{Namespace: "ml", ID: "train",
				Held: map[string]*Held{"work": {Count: 2, Original: 2, Since: t0, Rule: "reclaim", Index: 10}}}
			train := job("ml", "train", "training", 40, tc.count, 1)
			train.ModifyIndex = tc.index
			c.syncHolds(context.Background(), roundWith([]*ObservedJob{train}, nil))
			if got := f.callsMatching("scale"); strings.Join(got, "\n") != strings.Join(tc.wantCalls, "\n") {
				t.Fatalf("calls %q, want %q", got, tc.wantCalls)
			}
			if got := c.states()[jobKey{"ml", "train"}].heldCount(); got != tc.wantHeld {
				t.Fatalf("held %d, want %d", got, tc.wantHeld)
			}
		})
	}
}

// TestRecordKeepsOwnersItems: Steward's record goes into the job's own
// variable next to the owner's items, which stay as they were.
func TestRecordKeepsOwnersItems(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	_, _ = f.PutVar(context.Background(), "ml", "nomad/jobs/train", map[string]string{"db_password": "s3cret", "steward_state": "old"}, false, 0)
	train := job("ml", "train", "training", 40, 1, 1)
	st := c.state(jobKey{"ml", "train"})
	st.note(StatusPreempted, engine.Reason{Rule: engine.RuleReclaim, Message: "tenant ml holds 8 GPUs, reserve 4: reclaiming 4 for x/y/z"}, t0)
	st.Preemptions = []time.Time{t0}
	c.pub.writeRecords(context.Background(), roundWith([]*ObservedJob{train}, nil), c.pol)
	items, _, _ := f.GetVar(context.Background(), "ml", "nomad/jobs/train")
	want := map[string]string{"db_password": "s3cret", "steward_state": "preempted", "steward_tier": "training",
		"steward_tenant": "ml", "steward_preemptions": "1", "steward_rule": "reclaim", "steward_priority": "40",
		"steward_reason": "tenant ml holds 8 GPUs, reserve 4: reclaiming 4 for x/y/z"}
	for k, v := range want {
		if items[k] != v {
			t.Errorf("%s = %q, want %q", k, items[k], v)
		}
	}
}

// TestResumeInFlight: a group with some allocations held and some resumed
// but not yet placed is one demand; the controller scales by the
// difference between what the engine admits and what is in flight.
func TestResumeInFlight(t *testing.T) {
	cases := []struct {
		name     string
		admitted int // the engine's resume count (0: no resume)
		want     []string
		wantHeld int
	}{
		{"all admitted: the held one is resumed", 2, []string{"scale ml/sweep work 4: Steward resumes 1 allocation: go"}, 0},
		{"only the one in flight: nothing to do", 1, nil, 1},
		{"none admitted: the one in flight is held again", 0, []string{"scale ml/sweep work 2: Steward holds 1 allocation: the GPUs it was resumed for went to other work first; held again"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			// Count 4 originally; 2 held, then 1 resumed: count 3, 2 running, 1 queued, 1 held.
			c.states()[jobKey{"ml", "sweep"}] = &JobState{Namespace: "ml", ID: "sweep",
				Held: map[string]*Held{"work": {Count: 1, Original: 4, Since: t0, Rule: "priority", Index: 10}}}
			sweep := job("ml", "sweep", "training", 40, 3, 1)
			r := roundWith([]*ObservedJob{sweep}, []ObservedAlloc{alloc("a1", "sweep"), alloc("a2", "sweep")})
			r.obs.Queued[jobKey{"ml", "sweep"}] = map[string]QueuedGroup{"work": {Count: 1, Since: t0}}
			r.inflight = inflightResumes(r.obs, c.states())
			snap := buildSnapshot(c.pol, r.obs, c.states(), nil)
			if d := demandOf(t, snap, "sweep"); d.Count != 2 || !d.Held {
				t.Fatalf("demand %+v: want 2 held (1 held + 1 in flight)", d)
			}
			r.plan = &engine.Plan{}
			if tc.admitted > 0 {
				a := engine.Action{Kind: engine.Resume, Job: engine.JobRef{Namespace: "ml", ID: "sweep"}, Group: "work",
					Count: tc.admitted, Reason: engine.Reason{Rule: engine.RuleAdmit, Message: "go"}}
				if err := c.execute(context.Background(), r, a); err != nil {
					t.Fatal(err)
				}
			}
			c.holdUnadmitted(context.Background(), r)
			if got := f.callsMatching("scale"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("calls %q, want %q", got, tc.want)
			}
			if got := c.states()[jobKey{"ml", "sweep"}].heldCount(); got != tc.wantHeld {
				t.Fatalf("held %d, want %d", got, tc.wantHeld)
			}
		})
	}
}

// TestSignalWaitsForVictimToStart: a victim resumed and preempted within
// a second (found by the soak) whose task has not started when the
// signal is due is not counted as signalled: the signal goes once the
// task runs, within the grace, and the drain is not finished before.
// Past the grace, a task that never started is stopped without one.
func TestSignalWaitsForVictimToStart(t *testing.T) {
	reason := engine.Reason{Rule: engine.RulePriority, Message: "tier training (priority 40) yields 1 GPU to ml/nb/work"}
	f := newFakeNomad()
	clock := newTestClock(t0)
	c := testController(t, f, withClock(clock.now))
	train := job("ml", "train", "training", 40, 1, 1)
	starting := alloc("a1", "train")
	starting.ClientStatus, starting.RunningTasks = "pending", nil
	r := roundWith([]*ObservedJob{train}, []ObservedAlloc{starting})
	a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work",
		Allocs: []string{"a1"}, GPUs: 1, Grace: 10 * time.Second, Signal: "SIGUSR1", Requeue: true,
		For: &engine.JobRef{Namespace: "ml", ID: "nb"}, Reason: reason}
	if err := c.execute(context.Background(), r, a); err != nil {
		t.Fatal(err)
	}
	step := func(at time.Duration, al ObservedAlloc) []string {
		f.calls = nil
		r := roundWith([]*ObservedJob{train}, []ObservedAlloc{al})
		r.now = t0.Add(at)
		clock.set(r.now)
		c.drains.finishDrains(context.Background(), r)
		return withoutPuts(f.callsMatching(""))
	}
	if got := step(signalDelay, starting); len(got) != 0 {
		t.Fatalf("calls while the victim's task has not started: %v, want none", got)
	}
	if d := c.states()[jobKey{"ml", "train"}].Draining[0]; d.Sent || d.Signaled.IsZero() {
		t.Fatalf("drain after a signal to nobody: sent %t, signalled %s; want not sent, its grace running", d.Sent, d.Signaled)
	}
	if got := step(3*time.Second, starting); len(got) != 0 {
		t.Fatalf("calls while the victim still starts: %v", got)
	}
	running := alloc("a1", "train")
	if got := step(4*time.Second, running); strings.Join(got, "\n") != "signal ml a1 SIGUSR1" {
		t.Fatalf("calls once the victim runs: %v, want its signal", got)
	}
	if got := step(signalDelay+11*time.Second, running); strings.Join(got, "\n") != "scale ml/train work 0: Steward preempts 1 allocation: "+reason.Message {
		t.Fatalf("calls at the end of the grace: %v", got)
	}

	// One that never starts: past the grace it is stopped, signal-less.
	f2 := newFakeNomad()
	c = testController(t, f2)
	f = f2
	r = roundWith([]*ObservedJob{train}, []ObservedAlloc{starting})
	if err := c.execute(context.Background(), r, a); err != nil {
		t.Fatal(err)
	}
	step(signalDelay, starting)
	// At the grace's end: no signal sent now, with no time left to act on it.
	if got := step(signalDelay+10*time.Second, starting); strings.Join(got, "\n") != "scale ml/train work 0: Steward preempts 1 allocation: "+reason.Message {
		t.Fatalf("calls at the end of the grace, the victim never started: %v", got)
	}
}
