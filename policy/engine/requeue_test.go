package engine

import (
	"slices"
	"testing"
	"time"
)

// TestRequeuedIdleWork: work held after an idle release waits behind all
// other work and takes only free GPUs; the same work not requeued would
// preempt the lower tier.
func TestRequeuedIdleWork(t *testing.T) {
	train := Job{Ref: JobRef{"research", "train"}, Tier: "training", Priority: 40}
	nb := Job{Ref: JobRef{"product", "notebook"}, Tier: "interactive", Priority: 60}
	cases := []struct {
		name     string
		requeued bool
		free     bool // a second node with 4 free GPUs
		want     []string
	}{
		{"requeued, nothing free: waits, preempts nobody", true, false, nil},
		{"requeued, GPUs free: resumes", true, true, []string{"resume product/notebook"}},
		{"not requeued: preempts the lower tier", false, false, []string{"preempt research/train", "resume product/notebook"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{
				Nodes:  []Node{{ID: "n1", NodePool: "default", GPUs: 4}},
				Allocs: []Alloc{{ID: "a1", Job: train, Group: "main", NodeID: "n1", GPUIDs: []string{"0", "1", "2", "3"}, StartedAt: t0.Add(-time.Hour)}},
				Waiting: []Demand{{Job: nb, Group: "main", GPUsPerAlloc: 4, Count: 1, Since: t0.Add(-time.Minute),
					Held: true, Requeued: tc.requeued}},
			}
			if tc.free {
				s.Nodes = append(s.Nodes, Node{ID: "n2", NodePool: "default", GPUs: 4})
			}
			plan := New(testPolicy(nil)).Plan(s, t0)
			if got := kinds(plan); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if tc.requeued && !tc.free {
				if len(plan.Waiting) != 1 || plan.Waiting[0].Reason.Message != "requeued after an idle release: it takes only free GPUs, and none are free (needs 4 on one node)" {
					t.Fatalf("waiting %+v", plan.Waiting)
				}
			}
		})
	}
}
