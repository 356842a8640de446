package controller

import (
	"github.com/hashicorp/nomad/api"

	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// A preemption's victim that completes its work by itself (a batch task
// that exits 0 during its grace, before the stop reaches it) is done, not
// preempted: nothing of it is held, so it never runs again, and no other
// allocation is stopped in its place. Found by the soak (seed 41,
// vision/batch-51): the task finished 0.4 s before its grace ran out,
// while the plan that lowered its count was on its way; Steward held it
// and resumed it four minutes later, and the completed work ran again.
func TestVictimCompletesOwnWork(t *testing.T) {
	reason := engine.Reason{Rule: engine.RulePriority, Message: "tier batch (priority 30) yields 1 GPU to ml/nb/work"}
	k := jobKey{"ml", "sweep"}
	for _, tc := range []struct {
		name string
		// count is the group's count; the victim is its highest name.
		count int
		// before: the victim completed before the drain finished (seen
		// by the round that finishes it); otherwise just after.
		before bool
		// atDeadline are the calls when the grace is over.
		atDeadline []string
		heldAfter  int // allocations held once the completion is seen
	}{
		{name: "completed during its grace: nothing held, no other allocation stopped", count: 3, before: true},
		{name: "completed during its grace, its group's only allocation: nothing held", count: 1, before: true},
		{name: "completed as the stop was sent: taken out of the hold, never resumed", count: 1,
			atDeadline: []string{"scale ml/sweep work 0: Steward preempts 1 allocation: " + reason.Message}},
		{name: "one of three completed as the stop was sent: the group keeps its other two", count: 3,
			atDeadline: []string{"scale ml/sweep work 2: Steward preempts 1 allocation: " + reason.Message}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			sweep := batchJob("sweep", tc.count)
			sweep.ModifyIndex, sweep.Version = 10, 3
			var allocs []ObservedAlloc
			for i := range tc.count {
				a := alloc(fmt.Sprintf("a%d", i+1), "sweep")
				a.Name, a.JobVersion = fmt.Sprintf("sweep.work[%d]", i), 3
				allocs = append(allocs, a)
			}
			victim := allocs[tc.count-1].ID
			r := roundWith([]*ObservedJob{sweep}, allocs)
			a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "sweep"}, Group: "work",
				Allocs: []string{victim}, GPUs: 1, Grace: time.Minute, Signal: "SIGUSR1", Requeue: true,
				For: &engine.JobRef{Namespace: "ml", ID: "nb"}, Reason: reason}
			if err := c.execute(context.Background(), r, a); err != nil {
				t.Fatal(err)
			}
			r1 := roundWith([]*ObservedJob{sweep}, allocs)
			r1.now = t0.Add(signalDelay)
			c.drains.finishDrains(context.Background(), r1)

			// The grace is over.
			f.calls = nil
			end := t0.Add(signalDelay + time.Minute)
			r2 := roundWith([]*ObservedJob{sweep}, allocs)
			if tc.before {
				// Completed in the job's current version: Nomad counts it.
				r2 = roundWith([]*ObservedJob{sweep}, allocs[:tc.count-1])
				r2.obs.Done = map[jobKey]map[string]int{k: {"work": 1}}
				r2.obs.Ended = map[string]jobKey{victim: k}
			}
			r2.now = end
			c.drains.finishDrains(context.Background(), r2)
			if got := withoutPuts(f.callsMatching("")); strings.Join(got, "\n") != strings.Join(tc.atDeadline, "\n") {
				t.Fatalf("calls at the deadline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.atDeadline, "\n"))
			}

			// The next round sees the victim completed: by itself (desired
			// status run), in the version before Steward's write, which
			// Nomad no longer counts.
			after := batchJob("sweep", tc.count-1)
			after.ModifyIndex, after.Version = 11, 4
			r3 := roundWith([]*ObservedJob{after}, allocs[:tc.count-1])
			r3.obs.Ended = map[string]jobKey{victim: k}
			r3.now = end.Add(time.Second)
			c.drains.finishDrains(context.Background(), r3)
			st := c.states()[k]
			if got := st.heldCount(); got != tc.heldAfter {
				t.Fatalf("held %d after the victim completed, want %d (%+v)", got, tc.heldAfter, st.Held["work"])
			}
			if h := st.Held["work"]; h != nil && h.Original != tc.count-1 {
				t.Fatalf("held original %d, want %d: the group's count without the completed work", h.Original, tc.count-1)
			}
			if want := "1 allocation of group work completed its work during its checkpoint grace: done, not preempted (" + reason.Message + ")"; st.Reason != want || st.Status != StatusRunning {
				t.Fatalf("record %s: %q, want running: %q", st.Status, st.Reason, want)
			}
			// Nothing waits: the engine is given no held demand to resume.
			s := buildSnapshot(testPolicy(t), r3.obs, c.states(), nil)
			for _, d := range s.Waiting {
				if d.Job.Ref.ID == "sweep" {
					t.Fatalf("sweep waits to run again: %+v", d)
				}
			}
			// And the round after forgets the hold, writing nothing.
			f.calls = nil
			c.syncHolds(context.Background(), r3)
			if calls := withoutPuts(f.callsMatching("")); len(calls) != 0 {
				t.Fatalf("wrote %q", calls)
			}
		})
	}
}

// The other order of the same race: Nomad takes the lower count before the
// victim's client reports that its task exited by itself. The allocation
// is then stopped (desired status stop), which the controller's reads
// leave out, and only its own record tells a completion (no kill) from a
// stop. The finished preemption reads each such victim once, and is kept
// until its client has reported.
func TestVictimEndReadAfterStop(t *testing.T) {
	reason := engine.Reason{Rule: engine.RulePriority, Message: "tier batch (priority 30) yields 1 GPU to ml/nb/work"}
	k := jobKey{"ml", "sweep"}
	stub := func(status string, events ...string) *api.AllocationListStub {
		ts := &api.TaskState{State: "dead"}
		if status == api.AllocClientStatusRunning {
			ts.State = "running"
		}
		for _, e := range events {
			ts.Events = append(ts.Events, &api.TaskEvent{Type: e})
		}
		return &api.AllocationListStub{ID: "a1-full-id", Namespace: "ml", JobID: "sweep", TaskGroup: "work", ClientStatus: status,
			DesiredStatus: api.AllocDesiredStatusStop, TaskStates: map[string]*api.TaskState{"work": ts}}
	}
	for _, tc := range []struct {
		name string
		// reports are what the victim's record says, round after round.
		reports  []*api.AllocationListStub
		wantHeld int
		// kept: the finished preemption is still kept after the last.
		kept bool
	}{
		{name: "exited by itself, reported after the stop: taken out of the hold",
			reports: []*api.AllocationListStub{stub(api.AllocClientStatusComplete, api.TaskStarted, api.TaskTerminated)}},
		{name: "killed by the stop (exit 0 on its kill signal): held, resumed later", wantHeld: 1,
			reports: []*api.AllocationListStub{stub(api.AllocClientStatusComplete, api.TaskStarted, api.TaskKilling, api.TaskTerminated)}},
		{name: "killed and failed: held", wantHeld: 1,
			reports: []*api.AllocationListStub{stub(api.AllocClientStatusFailed, api.TaskStarted, api.TaskKilling, api.TaskKilled)}},
		{name: "its client has not reported yet: kept, the hold as it is", wantHeld: 1, kept: true,
			reports: []*api.AllocationListStub{stub(api.AllocClientStatusRunning, api.TaskStarted)}},
		{name: "reported a round later: then taken out",
			reports: []*api.AllocationListStub{stub(api.AllocClientStatusRunning, api.TaskStarted), stub(api.AllocClientStatusComplete, api.TaskStarted, api.TaskTerminated)}},
		{name: "gone from Nomad (collected): held", wantHeld: 1, reports: []*api.AllocationListStub{nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			sweep := batchJob("sweep", 1)
			sweep.ModifyIndex, sweep.Version = 10, 3
			a1 := alloc("a1-full-id", "sweep")
			a1.Name, a1.JobVersion = "sweep.work[0]", 3
			r := roundWith([]*ObservedJob{sweep}, []ObservedAlloc{a1})
			a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "sweep"}, Group: "work",
				Allocs: []string{a1.ID}, GPUs: 1, Grace: time.Minute, Signal: "SIGUSR1", Requeue: true,
				For: &engine.JobRef{Namespace: "ml", ID: "nb"}, Reason: reason}
			if err := c.execute(context.Background(), r, a); err != nil {
				t.Fatal(err)
			}
			r1 := roundWith([]*ObservedJob{sweep}, []ObservedAlloc{a1})
			r1.now = t0.Add(signalDelay)
			c.drains.finishDrains(context.Background(), r1)
			// The grace is over: the victim still runs as far as the
			// controller knows; held, count 0.
			end := t0.Add(signalDelay + time.Minute)
			r2 := roundWith([]*ObservedJob{sweep}, []ObservedAlloc{a1})
			r2.now = end
			c.drains.finishDrains(context.Background(), r2)
			if got := c.states()[k].heldCount(); got != 1 {
				t.Fatalf("held %d at the deadline, want 1", got)
			}
			after := batchJob("sweep", 0)
			after.ModifyIndex, after.Version = 11, 4
			for i, rep := range tc.reports {
				f.ended = nil
				if rep != nil {
					f.ended = []*api.AllocationListStub{rep}
				}
				rn := roundWith([]*ObservedJob{after}, nil) // stopped: not listed
				rn.now = end.Add(time.Duration(i+1) * time.Second)
				c.drains.finishDrains(context.Background(), rn)
			}
			st := c.states()[k]
			if got := st.heldCount(); got != tc.wantHeld {
				t.Fatalf("held %d, want %d (%+v)", got, tc.wantHeld, st.Held["work"])
			}
			if kept := len(st.Draining) == 1; kept != tc.kept {
				t.Fatalf("finished preemption kept %v, want %v", kept, tc.kept)
			}
			// Once known, never read again.
			reads := f.prefixReads
			if !tc.kept {
				rn := roundWith([]*ObservedJob{after}, nil)
				rn.now = end.Add(time.Minute)
				c.drains.finishDrains(context.Background(), rn)
				if f.prefixReads != reads {
					t.Fatalf("read the victim again after its end was known")
				}
			}
			if reads != len(tc.reports) {
				t.Fatalf("%d reads of the victim, want one a round until its end is known (%d)", reads, len(tc.reports))
			}
		})
	}
}
