package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
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

// TestIdleRequeueAlwaysWaitsForOwner: work an idle rule in mode always
// requeued waits held, even on free GPUs, until its owner resumes it or
// snoozes the rule: resumed by itself it would idle and be stopped again,
// over and over. Work requeued in mode pressure resumes on free GPUs (the
// pressure has ended).
func TestIdleRequeueAlwaysWaitsForOwner(t *testing.T) {
	nb := Job{Ref: JobRef{"product", "notebook"}, Tier: "interactive", Priority: 60}
	snoozed := Snooze{At: t0.Add(-time.Minute), Until: t0.Add(time.Hour)}
	ended := Snooze{At: t0.Add(-3 * time.Hour), Until: t0.Add(-time.Hour)}
	cases := []struct {
		name      string
		mode      policy.IdleMode
		maxSnooze time.Duration
		owner     bool   // its owner resumed it
		snooze    Snooze // its owner's snooze of the rule
		other     bool   // other work waits for the free GPUs too
		want      []string
		why       string // the waiting reason, when it waits
	}{
		{name: "always, nothing else waits: waits for its owner", mode: policy.IdleModeAlways, maxSnooze: 8 * time.Hour,
			why: "requeued by idle rule notebooks (after 15m, mode always): waits held for its owner to resume it (steward resume) or snooze the rule (steward snooze, up to 8h) before it takes 4 GPUs again; resumed by itself it would idle and be stopped again"},
		{name: "always, snoozes not allowed: the reason offers only resume", mode: policy.IdleModeAlways,
			why: "requeued by idle rule notebooks (after 15m, mode always): waits held for its owner to resume it (steward resume) before it takes 4 GPUs again; resumed by itself it would idle and be stopped again"},
		{name: "always, its owner resumed it: resumes on free GPUs", mode: policy.IdleModeAlways, owner: true,
			want: []string{"resume product/notebook"}},
		{name: "always, its owner snoozed the rule: resumes on free GPUs", mode: policy.IdleModeAlways, maxSnooze: 8 * time.Hour, snooze: snoozed,
			want: []string{"resume product/notebook"}},
		{name: "always, the snooze has ended: waits", mode: policy.IdleModeAlways, maxSnooze: 8 * time.Hour, snooze: ended,
			why: "requeued by idle rule notebooks (after 15m, mode always)"},
		{name: "always, other work waits: the other work runs, the notebook waits", mode: policy.IdleModeAlways, maxSnooze: 8 * time.Hour, other: true,
			want: []string{"resume research/train"}, why: "waits held for its owner"},
		{name: "pressure, nothing else waits: resumes on free GPUs", mode: policy.IdleModePressure,
			want: []string{"resume product/notebook"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy(func(p *policy.Policy) {
				p.Idle = []*policy.IdleRule{{Name: "notebooks", Tiers: []string{"interactive"}, Threshold: 10,
					After: 15 * time.Minute, Mode: tc.mode, Action: policy.IdleActionRequeue, MaxSnooze: tc.maxSnooze}}
			})
			job := nb
			job.Snooze = tc.snooze
			s := &Snapshot{
				Nodes: []Node{{ID: "n1", NodePool: "default", GPUs: 4}},
				Waiting: []Demand{{Job: job, Group: "main", GPUsPerAlloc: 4, Count: 1, Since: t0.Add(-time.Minute),
					Held: true, Requeued: true, OwnerResumed: tc.owner}},
			}
			if tc.other {
				s.Waiting = append(s.Waiting, Demand{Job: Job{Ref: JobRef{"research", "train"}, Tier: "training", Priority: 40},
					Group: "main", GPUsPerAlloc: 4, Count: 1, Since: t0, Held: true})
			}
			plan := New(p).Plan(s, t0)
			if got := kinds(plan); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if tc.why == "" {
				return
			}
			i := slices.IndexFunc(plan.Waiting, func(w Waiting) bool { return w.Job == nb.Ref })
			if i < 0 {
				t.Fatalf("the notebook does not wait: %+v", plan.Waiting)
			}
			if w := plan.Waiting[i]; w.Reason.Rule != RuleIdle || w.GPUs != 4 || !strings.Contains(w.Reason.Message, tc.why) {
				t.Fatalf("waits %+v, want rule idle, 4 GPUs, a reason with %q", w, tc.why)
			}
		})
	}
}
