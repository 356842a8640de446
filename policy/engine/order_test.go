package engine

import (
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestResumeOrder: which of two held demands that tiers, reservations,
// priorities and shares rank equal gets the only free GPUs.
func TestResumeOrder(t *testing.T) {
	gangJob := func(ns, id string) Job {
		return Job{Ref: JobRef{ns, id}, Tier: "training", Priority: 40, Gang: true}
	}
	job := func(ns, id string) Job { return Job{Ref: JobRef{ns, id}, Tier: "training", Priority: 40} }
	cases := []struct {
		name    string
		order   policy.ResumeOrder
		nodes   int // of 8 GPUs, all free: room for one of the two
		waiting []Demand
		want    string // the job resumed
	}{
		{
			name: "preempted-first: preempted work before older work that never ran", order: policy.ResumeOrderPreemptedFirst,
			nodes: 1,
			waiting: []Demand{
				{Job: job("rnd", "limited"), Group: "main", GPUsPerAlloc: 8, Count: 1, Since: t0, Held: true},
				{Job: job("rnd", "preempted"), Group: "main", GPUsPerAlloc: 8, Count: 1, Since: t0.Add(10 * time.Minute), Held: true, Preempted: true},
			},
			want: "rnd/preempted",
		},
		{
			name: "the default is preempted-first", order: "",
			nodes: 1,
			waiting: []Demand{
				{Job: job("rnd", "limited"), Group: "main", GPUsPerAlloc: 8, Count: 1, Since: t0, Held: true},
				{Job: job("rnd", "preempted"), Group: "main", GPUsPerAlloc: 8, Count: 1, Since: t0.Add(10 * time.Minute), Held: true, Preempted: true},
			},
			want: "rnd/preempted",
		},
		{
			name: "longest-waiting: the older, though it never ran", order: policy.ResumeOrderLongestWaiting,
			nodes: 1,
			waiting: []Demand{
				{Job: job("rnd", "limited"), Group: "main", GPUsPerAlloc: 8, Count: 1, Since: t0, Held: true},
				{Job: job("rnd", "preempted"), Group: "main", GPUsPerAlloc: 8, Count: 1, Since: t0.Add(10 * time.Minute), Held: true, Preempted: true},
			},
			want: "rnd/limited",
		},
		{
			name:  "preempted-first does not override the reservation: a gang beyond it waits for one within it",
			order: policy.ResumeOrderPreemptedFirst, nodes: 2,
			waiting: []Demand{
				// b's gang of 2×8 would take b to 16, beyond its reserve
				// of 8; a's 8 keep a within its reserve. Had the gang gone
				// first, a would reclaim from it in the next plan, and the
				// gang, preempted again, go first again.
				{Job: gangJob("b", "gang"), Group: "main", GPUsPerAlloc: 8, Count: 2, Since: t0, Held: true, Preempted: true},
				{Job: job("a", "own"), Group: "main", GPUsPerAlloc: 8, Count: 1, Since: t0.Add(10 * time.Minute), Held: true},
			},
			want: "a/own",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(testPolicy(func(p *policy.Policy) {
				p.Tenants["rnd"] = tenant("rnd", 0, 8)
				p.Tenants["a"] = tenant("a", 8, policy.Unlimited)
				p.Tenants["b"] = tenant("b", 8, policy.Unlimited)
				p.Preemption.ResumeOrder = tc.order
			}))
			s := &Snapshot{Waiting: tc.waiting}
			for i := 0; i < tc.nodes; i++ {
				s.Nodes = append(s.Nodes, Node{ID: "n" + itoa(i), NodePool: "default", GPUs: 8})
			}
			plan := e.Plan(s, t0.Add(2*time.Hour))
			var resumed []string
			for _, a := range plan.Actions {
				if a.Kind == Resume {
					resumed = append(resumed, a.Job.String())
				}
			}
			if len(resumed) != 1 || resumed[0] != tc.want {
				t.Fatalf("resumed %v, want [%s]; plan %v", resumed, tc.want, plan.Actions)
			}
		})
	}
}
