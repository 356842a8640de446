package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestVictimsMatchedWithinTheirJob: states keep victims by an 8-hex
// prefix of their allocation ID; another tenant's allocation that shares
// the prefix (same job ID, group and task names, in its own namespace)
// is never signalled, stopped or counted as a victim still running.
func TestVictimsMatchedWithinTheirJob(t *testing.T) {
	const (
		v1   = "aaaaaaaa-0000-0000-0000-000000000001"
		v2   = "bbbbbbbb-0000-0000-0000-000000000002"
		v3   = "cccccccc-0000-0000-0000-000000000003"
		v4   = "dddddddd-0000-0000-0000-000000000004"
		twin = "aaaaaaaa-9999-9999-9999-999999999999" // other/train's
	)
	reason := engine.Reason{Rule: engine.RulePriority, Message: "tier training (priority 40) yields 1 GPU to ml/nb/work"}
	cases := []struct {
		name  string
		grace time.Duration
		count int
		vict  []string
		now   []string // calls at once
		sig   []string // calls a moment later
		// forgotten: after the deadline, with the victims gone and the
		// twin running, the finished drain is forgotten.
		forgotten bool
	}{
		{"with grace: the twin of a victim is not signalled", 2 * time.Minute, 2, []string{v1},
			nil, []string{"signal ml " + v1 + " SIGUSR1"}, false},
		{"part of a group, names unknown: the twin of a victim is not stopped", 0, 4, []string{v1, v3},
			[]string{"stop ml " + v1, "stop ml " + v3, "scale ml/train work 2: Steward preempts 2 allocations: " + reason.Message}, nil, false},
		{"victims gone: a running twin does not keep the drain", 2 * time.Minute, 2, []string{v1},
			nil, []string{"signal ml " + v1 + " SIGUSR1"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			clock := newTestClock(t0)
			c := testController(t, f, withClock(clock.now))
			train := job("ml", "train", "training", 40, tc.count, 1)
			other := job("other", "train", "training", 40, 1, 1)
			var allocs []ObservedAlloc
			for _, id := range []string{v1, v2, v3, v4}[:tc.count] {
				allocs = append(allocs, alloc(id, "train"))
			}
			tw := alloc(twin, "train")
			tw.Namespace = "other"
			withTwin := append(allocs, tw)
			r := roundWith([]*ObservedJob{train, other}, withTwin)
			a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work",
				Allocs: tc.vict, GPUs: len(tc.vict), Grace: tc.grace, Signal: "SIGUSR1", Requeue: true,
				For: &engine.JobRef{Namespace: "ml", ID: "nb"}, Reason: reason}
			if tc.grace == 0 {
				a.Signal = ""
			}
			if err := c.execute(context.Background(), r, a); err != nil {
				t.Fatal(err)
			}
			if got := withoutPuts(f.callsMatching("")); strings.Join(got, "\n") != strings.Join(tc.now, "\n") {
				t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.now, "\n"))
			}
			if tc.sig == nil {
				return
			}
			f.calls = nil
			r1 := roundWith([]*ObservedJob{train, other}, withTwin)
			r1.now = t0.Add(signalDelay)
			c.drains.finishDrains(context.Background(), r1)
			if got := withoutPuts(f.callsMatching("")); strings.Join(got, "\n") != strings.Join(tc.sig, "\n") {
				t.Fatalf("calls after the delay:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.sig, "\n"))
			}
			if !tc.forgotten {
				return
			}
			end := t0.Add(signalDelay + tc.grace)
			r2 := roundWith([]*ObservedJob{train, other}, withTwin)
			r2.now = end
			clock.set(end)
			c.drains.finishDrains(context.Background(), r2)
			// The victim is gone; only the twin (and ml/train's other
			// allocation, at its lowered count) runs.
			gone := []ObservedAlloc{allocs[1], tw}
			train.Groups["work"] = func() GroupSpec { g := train.Groups["work"]; g.Count = 1; return g }()
			r3 := roundWith([]*ObservedJob{train, other}, gone)
			r3.now = end.Add(time.Second)
			c.drains.finishDrains(context.Background(), r3)
			if st := c.states()[jobKey{"ml", "train"}]; len(st.Draining) != 0 {
				t.Fatalf("finished drain kept while only another tenant's allocation shares its victim's prefix: %+v", st.Draining[0])
			}
		})
	}
}
