package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// A job's summary read while an event about the job arrives: Nomad blocks
// the evaluation first and counts the group's queued allocations when it
// completes the evaluation that failed, a moment later. A round that read
// the summary in between got "nothing queued"; the completing evaluation's
// event, applied while that answer was on its way, marked the entry it
// replaced stale, and the answer was stored fresh: the work stayed hidden
// until the next event about its job or the next resync (up to 30 s; at
// 250 nodes seen_after reached 27 s, issue 33).
func TestSummaryReadRacesEvent(t *testing.T) {
	cases := []struct {
		name string
		// eventDuringRead: the evaluation that failed completes, with
		// the queued count, while the first round's read is out.
		eventDuringRead bool
		wantQueued      []int // the group's queued count each round sees (0: not queued)
		wantReads       int   // summary reads over both rounds
		wantOvertaken   int   // of them, reads an event overtook (logged with the round's phases)
	}{
		{name: "an event while the read is out: the next round reads again and sees the work", eventDuringRead: true,
			wantQueued: []int{0, 1}, wantReads: 2, wantOvertaken: 1},
		{name: "no event: the answer is kept (one read)", wantQueued: []int{0, 0}, wantReads: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			k := jobKey{"ml", "train"}
			summary := func(queued int) *api.JobSummary {
				return &api.JobSummary{Namespace: k.Namespace, JobID: k.ID,
					Summary: map[string]api.TaskGroupSummary{"work": {Queued: queued}}}
			}
			f.cl().summary["ml/train"] = summary(0)
			o := newObserver(f, "steward")
			blockedAt := time.Unix(100, 0)
			o.cache.replace(&clusterRead{index: 100, nodes: map[string]cachedNode{},
				jobs: map[jobKey]*ObservedJob{k: {Namespace: k.Namespace, ID: k.ID, Type: api.JobTypeBatch,
					Groups: map[string]GroupSpec{"work": {Count: 1, GPUsPerAlloc: 1}}}},
				skipped: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{},
				blocked: map[string]blockedEval{"ev2": {ns: k.Namespace, job: k.ID, created: blockedAt, modified: blockedAt}},
				seen:    map[string]uint64{}})
			o.cache.setFollowing(true)
			if tc.eventDuringRead {
				f.cl().summaryHook = func(string, string) {
					f.mu.Lock()
					f.cl().summary["ml/train"] = summary(1)
					f.cl().summaryHook = nil
					f.mu.Unlock()
					o.cache.apply(event(t, 120, "Evaluation", "EvaluationUpdated", "Evaluation",
						fmt.Sprintf(`{"ID":"ev1","Namespace":"ml","JobID":"train","Status":"complete","BlockedEval":"ev2","CreateTime":1,"ModifyTime":2,"QueuedAllocations":{"work":1}}`)))
				}
			}
			for round, want := range tc.wantQueued {
				obs, err := o.observe(context.Background(), blockedAt.Add(time.Duration(round+1)*time.Second), false)
				if err != nil {
					t.Fatal(err)
				}
				if got := obs.Queued[k]["work"].Count; got != want {
					t.Errorf("round %d: %d queued, want %d", round+1, got, want)
				}
			}
			if got := o.stats.summaryReads; got != tc.wantReads {
				t.Errorf("%d summary reads, want %d", got, tc.wantReads)
			}
			if got := o.stats.overtaken; got != tc.wantOvertaken {
				t.Errorf("%d summary reads overtaken, want %d", got, tc.wantOvertaken)
			}
		})
	}
}
