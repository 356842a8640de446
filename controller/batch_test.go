package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// batchJob is a batch job with one GPU group.
func batchJob(id string, count int) *ObservedJob {
	j := job("ml", id, "training", 40, count, 1)
	j.Type = "batch"
	return j
}

// Issue 28, item 1: completed work is not waiting work. A batch
// allocation Steward resumed that completed before the resume's window
// ran out looked like a resume Nomad had not placed yet: held again at its
// completion, resumed, and run again.
func TestBatchCompletedIsNotWaiting(t *testing.T) {
	for _, tt := range []struct {
		name   string
		count  int
		done   int
		allocs int
		want   int // GPUs the engine sees the job wait for
	}{
		{"resumed batch allocation completed is not waiting", 1, 1, 0, 0},
		{"resumed batch group: one completed, one running, none waits", 2, 1, 1, 0},
		{"resumed batch group: one completed, one not shown yet waits", 2, 1, 0, 1},
		{"resumed batch allocation not shown yet waits", 1, 0, 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := batchJob("sweep", tt.count)
			obs := &Observation{At: t0.Add(5 * time.Second), Nodes: []ObservedNode{{ID: "n1", GPUs: 4}},
				Jobs: map[jobKey]*ObservedJob{{"ml", "sweep"}: j}, Queued: map[jobKey]map[string]QueuedGroup{},
				Done: map[jobKey]map[string]int{{"ml", "sweep"}: {"work": tt.done}}}
			for i := range tt.allocs {
				obs.Allocs = append(obs.Allocs, alloc(fmt.Sprintf("a%d", i), "sweep"))
			}
			st := &JobState{Namespace: "ml", ID: "sweep", resumed: map[string]time.Time{"work": t0},
				Held: map[string]*Held{"work": {Count: 0, Original: tt.count, Since: t0.Add(-time.Minute)}}}
			s := buildSnapshot(testPolicy(t), obs, map[jobKey]*JobState{{"ml", "sweep"}: st}, nil)
			got := 0
			for _, d := range s.Waiting {
				got += d.GPUs()
			}
			if got != tt.want {
				t.Fatalf("waiting GPUs %d, want %d (%v)", got, tt.want, s.Waiting)
			}
		})
	}
}

// Every count Steward writes for a batch group leaves its completed
// allocations out: the write makes a new job version, and Nomad ignores a
// batch job's terminal allocations of older versions, placing the count
// anew. A write that would run another group's completed work again is
// refused, and nothing is recorded.
func TestBatchWritesLeaveCompletedOut(t *testing.T) {
	hold := func(n int) engine.Action {
		return engine.Action{Kind: engine.Hold, Job: engine.JobRef{Namespace: "ml", ID: "sweep"}, Group: "work", Count: n,
			Reason: engine.Reason{Rule: engine.RuleCapacity, Message: "no room"}}
	}
	resume := func(n int) engine.Action {
		return engine.Action{Kind: engine.Resume, Job: engine.JobRef{Namespace: "ml", ID: "sweep"}, Group: "work", Count: n,
			Reason: engine.Reason{Rule: engine.RuleAdmit, Message: "go"}}
	}
	// ahead: a resume on GPUs set aside for it, a re-registration
	// (Nomad.ScaleAhead).
	ahead := func(n int) engine.Action {
		a := resume(n)
		a.Ahead = true
		return a
	}
	preempt := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "sweep"}, Group: "work", Allocs: []string{"a0"},
		Reason: engine.Reason{Rule: engine.RulePriority, Message: "yields 1 GPU"}}
	priority := engine.Action{Kind: engine.SetPriority, Job: engine.JobRef{Namespace: "ml", ID: "sweep"}, Priority: 40,
		Reason: engine.Reason{Rule: engine.RuleTier, Message: "tier training runs at priority 40"}}
	for _, tc := range []struct {
		name     string
		count    int   // the group's count as observed
		done     int   // completed allocations of the current version
		prepDone int   // completed allocations of another group, "prep"
		held     *Held // the hold before
		running  int
		action   engine.Action
		want     []string
		wantHeld *Held
		refused  bool
	}{
		{name: "hold of a batch group leaves its completed allocations out", count: 4, done: 2, running: 1, action: hold(1),
			want:     []string{"scale ml/sweep work 1: Steward holds 1 allocation: no room"},
			wantHeld: &Held{Count: 1, Original: 2, Taken: 2}},
		{name: "a group whose work all completed or runs has nothing to hold", count: 3, done: 2, running: 1, action: hold(1)},
		{name: "resume of a held batch group leaves its completed allocations out", count: 2, done: 1, running: 1,
			held: &Held{Count: 2, Original: 4, Index: 10}, action: resume(2),
			want:     []string{"scale ml/sweep work 3: Steward resumes 2 allocations: go"},
			wantHeld: &Held{Count: 0, Original: 3, Taken: 1}},
		// Held 2 of 2, resumed 1, which completed: the other's resume
		// ahead of the queue re-registers the job with the count Nomad
		// has (1), which Nomad takes for no change (no new version), so
		// it would go on counting the completed one and place nothing
		// (found by the soak). A scale first makes the version.
		{name: "resume ahead of as many as completed makes a new job version first", count: 1, done: 1,
			held: &Held{Count: 1, Original: 2, Index: 10}, action: ahead(1),
			want: []string{
				"scale ml/sweep work 0: Steward leaves 1 completed allocation out of group work's count (a new job version, in which Nomad does not count them)",
				"scale-ahead ml/sweep work 1"},
			wantHeld: &Held{Count: 0, Original: 1, Taken: 1}},
		{name: "resume ahead of as many as completed, others running: none of those stopped", count: 4, done: 2, running: 2,
			held: &Held{Count: 2, Original: 6, Index: 10}, action: ahead(2),
			want: []string{
				"scale ml/sweep work 2: Steward leaves 2 completed allocations out of group work's count (a new job version, in which Nomad does not count them)",
				"scale-ahead ml/sweep work 4"},
			wantHeld: &Held{Count: 0, Original: 4, Taken: 2}},
		// A scale always makes a new version (Nomad's state store bumps
		// it on every write of a job).
		{name: "plain resume of as many as completed: one scale", count: 1, done: 1,
			held: &Held{Count: 1, Original: 2, Index: 10}, action: resume(1),
			want:     []string{"scale ml/sweep work 1: Steward resumes 1 allocation: go"},
			wantHeld: &Held{Count: 0, Original: 1, Taken: 1}},
		{name: "resume ahead without completed work: one re-registration", count: 2, running: 2,
			held: &Held{Count: 2, Original: 4, Index: 10}, action: ahead(2),
			want:     []string{"scale-ahead ml/sweep work 4"},
			wantHeld: &Held{Count: 0, Original: 4}},
		{name: "resume without completed work is as before", count: 2, running: 2,
			held: &Held{Count: 2, Original: 4, Index: 10}, action: resume(2),
			want:     []string{"scale ml/sweep work 4: Steward resumes 2 allocations: go"},
			wantHeld: &Held{Count: 0, Original: 4}},
		{name: "another group's completed work: the hold is refused", count: 4, prepDone: 1, running: 1, action: hold(1), refused: true},
		{name: "another group's completed work: the resume is refused, the hold stays", count: 2, prepDone: 1, running: 2,
			held: &Held{Count: 2, Original: 4, Index: 10}, action: resume(2), refused: true,
			wantHeld: &Held{Count: 2, Original: 4}},
		{name: "a preemption of a batch group leaves its completed allocations out", count: 4, done: 2, running: 2, action: preempt,
			want:     []string{"scale ml/sweep work 1: Steward preempts 1 allocation: yields 1 GPU"},
			wantHeld: &Held{Count: 1, Original: 2, Taken: 2}},
		{name: "another group's completed work: the preemption is refused", count: 2, prepDone: 1, running: 2, action: preempt, refused: true},
		{name: "a re-registration for a priority would run completed work again: refused", count: 2, prepDone: 1, running: 1,
			action: priority, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			k := jobKey{"ml", "sweep"}
			j := batchJob("sweep", tc.count)
			if tc.prepDone > 0 {
				j.Groups["prep"] = GroupSpec{Count: 1, Tasks: []string{"prep"}}
			}
			if tc.held != nil {
				h := *tc.held
				h.Since, h.Rule = t0, "capacity"
				c.states()[k] = &JobState{Namespace: "ml", ID: "sweep", Held: map[string]*Held{"work": &h}}
			}
			var allocs []ObservedAlloc
			for i := range tc.running {
				allocs = append(allocs, alloc(fmt.Sprintf("a%d", i), "sweep"))
			}
			r := roundWith([]*ObservedJob{j}, allocs)
			r.obs.Done = map[jobKey]map[string]int{k: {"work": tc.done, "prep": tc.prepDone}}
			r.plan = &engine.Plan{}
			err := c.execute(context.Background(), r, tc.action)
			if tc.refused {
				if !errors.Is(err, errRerun) || !strings.Contains(err.Error(), "1 completed allocation of group prep") {
					t.Fatalf("error %v, want a refusal naming prep's completed allocation", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := f.callsMatching("scale"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("calls %q, want %q", got, tc.want)
			}
			if tc.refused {
				// Only the job's state, for its record's reason, once.
				if calls := f.callsMatching(""); len(calls) != 1 || calls[0] != "put steward steward/jobs/ml/sweep" {
					t.Fatalf("refused, yet called Nomad: %q", calls)
				}
				st := c.states()[k]
				if st == nil || len(st.Draining) > 0 || st.Promoted || st.Rule != ruleCompleted || !strings.Contains(st.Reason, "Steward leaves the job as it is") {
					t.Fatalf("refused: state %+v", st)
				}
				if err := c.execute(context.Background(), r, tc.action); !errors.Is(err, errRerun) {
					t.Fatalf("again: %v", err)
				}
				if calls := f.callsMatching(""); len(calls) != 1 {
					t.Fatalf("refused again, and wrote again: %q", calls)
				}
			}
			var h *Held
			if st := c.states()[k]; st != nil {
				h = st.Held["work"]
			}
			switch {
			case tc.wantHeld == nil && h != nil && h.Count > 0:
				t.Fatalf("held %+v, want nothing", *h)
			case tc.wantHeld != nil && (h == nil || h.Count != tc.wantHeld.Count || h.Original != tc.wantHeld.Original || h.Taken != tc.wantHeld.Taken):
				t.Fatalf("held %+v, want %+v", h, *tc.wantHeld)
			}
		})
	}
}

// A hold recorded and not applied (a failed call, a restart) is finished
// without the completed allocations its write took out already, and
// without those completed since; in step, it writes nothing.
func TestSyncHoldsBatchCompleted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int // the group's count in Nomad
		index uint64
		done  int
		want  []string
		orig  int
	}{
		{"recorded, not applied: the count it recorded", 4, 10, 1,
			[]string{"scale ml/sweep work 2: Steward sets group work to 2 allocations (decided earlier, not applied then: a failed call or a restart)"}, 3},
		{"recorded, not applied, one more completed since: that one too", 4, 10, 2,
			[]string{"scale ml/sweep work 1: Steward sets group work to 1 allocation (decided earlier, not applied then: a failed call or a restart)"}, 2},
		{"applied, completed since: in step, nothing written", 2, 12, 1, nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			k := jobKey{"ml", "sweep"}
			// Count 4, one completed: held 1 of the other 3 (count 2).
			c.states()[k] = &JobState{Namespace: "ml", ID: "sweep",
				Held: map[string]*Held{"work": {Count: 1, Original: 3, Taken: 1, Since: t0, Rule: "capacity", Index: 10}}}
			j := batchJob("sweep", tc.count)
			j.ModifyIndex = tc.index
			r := roundWith([]*ObservedJob{j}, nil)
			r.obs.Done = map[jobKey]map[string]int{k: {"work": tc.done}}
			c.syncHolds(context.Background(), r)
			if got := f.callsMatching("scale"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("calls %q, want %q", got, tc.want)
			}
			if h := c.states()[k].Held["work"]; h == nil || h.Original != tc.orig || h.Count != 1 {
				t.Fatalf("held %+v, want original %d, 1 held", h, tc.orig)
			}
		})
	}
}

// The cache keeps a batch job's finished allocations, and the observation
// counts those of the job's current version as done: an allocation the
// server wrote since the job last changed (Nomad's events carry no job).
// One stopped by anyone, or failed, is not done.
func TestCacheCompletedBatchWork(t *testing.T) {
	c := newClusterCache("steward")
	c.replace(&clusterRead{index: 100, nodes: map[string]cachedNode{"n1": {node: ObservedNode{ID: "n1", GPUs: 4}, usable: true}},
		jobs: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{}, blocked: map[string]blockedEval{}, seen: map[string]uint64{}})
	o := newObserver(newFakeNomad(), "steward")
	o.cache = c
	done := func() int {
		obs, err := o.build(context.Background(), t0)
		if err != nil {
			t.Fatal(err)
		}
		if len(obs.Allocs) != 0 {
			t.Fatalf("finished allocations among the live ones: %+v", obs.Allocs)
		}
		return obs.Done[jobKey{"ml", "train"}]["work"]
	}
	finished := func(index int, client, desired string, allocModify int) *api.Events {
		body := strings.Replace(fmt.Sprintf(allocJSON, client, desired), `"CreateTime":1,`, fmt.Sprintf(`"CreateTime":1,"AllocModifyIndex":%d,`, allocModify), 1)
		return event(t, index, "Allocation", "AllocationUpdated", "Allocation", body)
	}
	c.apply(event(t, 110, "Job", "JobRegistered", "Job", fmt.Sprintf(jobJSON, 110, 1)))
	c.apply(finished(112, "complete", "run", 111))
	if got := done(); got != 1 {
		t.Fatalf("done %d after it completed, want 1", got)
	}
	// A scale makes a new version (JobModifyIndex 120): the completed
	// allocation is an older version's, which Nomad ignores.
	c.apply(event(t, 120, "Job", "JobRegistered", "Job", strings.Replace(fmt.Sprintf(jobJSON, 120, 1), `"Type":"batch",`, `"Type":"batch","Version":1,`, 1)))
	if got := done(); got != 0 {
		t.Fatalf("done %d after a new version, want 0", got)
	}
	// Stopped, not finished: not done, and not kept.
	c.apply(finished(125, "complete", "stop", 124))
	if got := done(); got != 0 {
		t.Fatalf("done %d after a stop, want 0", got)
	}
	if s := c.describe(); !strings.Contains(s, "allocs[]") {
		t.Fatalf("a stopped allocation kept: %s", s)
	}
}

// A pause scales every GPU group of the job: of a multi-group batch job
// with completed work in another group, it would run that work again, and
// is refused; of a single-group one, the hold leaves the completed
// allocations out.
func TestBatchPause(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prepDone  int
		wantCalls []string
		paused    bool
	}{
		{"single group: held without its completed allocations", 0,
			[]string{"scale ml/sweep work 0: Steward pauses 1 allocation: paused by a test: resumes only with steward resume"}, true},
		{"another group's completed work: refused", 1, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			k := jobKey{"ml", "sweep"}
			j := batchJob("sweep", 3)
			j.Meta["steward.checkpoint_signal"] = "none"
			if tc.prepDone > 0 {
				j.Groups["prep"] = GroupSpec{Count: 1, Tasks: []string{"prep"}}
			}
			r := roundWith([]*ObservedJob{j}, []ObservedAlloc{alloc("a0", "sweep")})
			r.obs.Done = map[jobKey]map[string]int{k: {"work": 2, "prep": tc.prepDone}}
			c.pause(context.Background(), r, c.state(k), j, "a test")
			if got := f.callsMatching("scale"); strings.Join(got, "\n") != strings.Join(tc.wantCalls, "\n") {
				t.Fatalf("calls %q, want %q", got, tc.wantCalls)
			}
			st := c.states()[k]
			if paused := st != nil && st.Paused; paused != tc.paused {
				t.Fatalf("paused %v, want %v", paused, tc.paused)
			}
			if tc.paused {
				if h := st.Held["work"]; h == nil || h.Count != 1 || h.Original != 1 || h.Taken != 2 {
					t.Fatalf("held %+v, want 1 of 1, 2 completed taken out", h)
				}
			}
		})
	}
}
