package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Departments (hierarchical tenants): a and b are in department research,
// x and y are not. One story per case; each lists the plan's actions as
// "kind job" with a reason each must contain, and the waiting reasons.
func TestDepartments(t *testing.T) {
	dept := func(reserve, limit int) map[string]*policy.Department {
		return map[string]*policy.Department{"research": {Name: "research", Tenants: []string{"a", "b"},
			Reserve: reserve, Limit: limit, Weight: 1}}
	}
	run := func(ns, id, tier string, gpus int, age time.Duration) Alloc {
		ids := []string{}
		for i := range gpus {
			ids = append(ids, id+"-g"+itoa(i))
		}
		return Alloc{ID: id, Job: Job{Ref: JobRef{ns, id}, Tier: tier, Priority: map[string]int{"training": 40, "interactive": 60}[tier]},
			Group: "main", NodeID: "n1", GPUIDs: ids, StartedAt: t0.Add(-age)}
	}
	wait := func(ns, id string, gpus int, since time.Duration) Demand {
		return Demand{Job: Job{Ref: JobRef{ns, id}, Tier: "training", Priority: 40}, Group: "main", GPUsPerAlloc: gpus, Count: 1,
			Since: t0.Add(-since), Held: true}
	}
	type act struct{ what, why string }
	tests := []struct {
		name     string
		tenants  map[string][2]int // reserve, limit
		depts    map[string]*policy.Department
		allocs   []Alloc
		waiting  []Demand
		want     []act
		waitWhy  map[string]string  // job -> part of its waiting reason
		deptUsed int                // Plan.Departments' InUse for research
		usage    map[string]float64 // Snapshot.Usage; fair share over time on when set
	}{
		{
			name:     "over the department limit: its newest work goes whichever tenant holds it",
			tenants:  map[string][2]int{"a": {0, -1}, "b": {0, -1}},
			depts:    dept(0, 4),
			allocs:   []Alloc{run("a", "train", "training", 4, 3*time.Hour), run("b", "nb", "interactive", 2, 20*time.Second)},
			want:     []act{{"preempt b/nb", "department research (tenants a, b) holds 6 GPUs, limit 4: giving back 2"}},
			deptUsed: 4,
		},
		{
			name:     "at the department limit: a sibling's work waits on free GPUs",
			tenants:  map[string][2]int{"a": {0, -1}, "b": {0, -1}},
			depts:    dept(0, 4),
			allocs:   []Alloc{run("a", "train", "training", 4, 3*time.Hour)},
			waiting:  []Demand{wait("b", "more", 1, time.Minute)},
			waitWhy:  map[string]string{"b/more": "department research (tenants a, b) holds 4 GPUs, limit 4: 1 more would exceed it"},
			deptUsed: 4,
		},
		{
			name:    "below the department reserve: a member reclaims from a tenant outside",
			tenants: map[string][2]int{"a": {0, -1}, "b": {0, -1}, "x": {0, -1}},
			depts:   dept(4, -1),
			allocs:  []Alloc{run("x", "big", "training", 8, 3*time.Hour)},
			waiting: []Demand{wait("a", "nb", 2, time.Minute)},
			want: []act{{"preempt x/big", "department research (tenants a, b) holds 0 GPUs, reserve 4: reclaiming 8 for a/nb/main from tenant x (holds 8 GPUs, reserve 0)"},
				{"resume a/nb", ""}},
			deptUsed: 2,
		},
		{
			name:    "within the department reserve: safe from a tenant outside, the other tenant yields",
			tenants: map[string][2]int{"a": {0, -1}, "b": {0, -1}, "x": {4, -1}, "y": {0, -1}},
			depts:   dept(4, -1),
			allocs:  []Alloc{run("a", "mine", "training", 4, 3*time.Hour), run("y", "theirs", "training", 4, 3*time.Hour)},
			waiting: []Demand{wait("x", "need", 4, time.Minute)},
			want: []act{{"preempt y/theirs", "tenant y holds 4 GPUs, reserve 0: reclaiming 4 for x/need/main"},
				{"resume x/need", ""}},
			deptUsed: 4,
		},
		{
			name:    "on the department's account: never from a sibling",
			tenants: map[string][2]int{"a": {0, -1}, "b": {0, -1}},
			depts:   dept(8, -1),
			allocs:  []Alloc{run("b", "all", "training", 6, 3*time.Hour), run("b", "rest", "training", 2, 3*time.Hour)},
			waiting: []Demand{wait("a", "nb", 2, time.Minute)},
			waitWhy: map[string]string{"a/nb": "none free, and nothing may be preempted for tier training (priority 40) of tenant a " +
				"(holds 0, reserve 0); department research (tenants a, b) holds 8, reserve 8"},
			deptUsed: 8,
		},
		{
			name:    "its own reserve: a tenant reclaims from a sibling above theirs",
			tenants: map[string][2]int{"a": {2, -1}, "b": {0, -1}},
			depts:   dept(8, -1),
			allocs:  []Alloc{run("b", "all", "training", 8, 3*time.Hour)},
			waiting: []Demand{wait("a", "nb", 2, time.Minute)},
			want: []act{{"preempt b/all", "tenant b holds 8 GPUs, reserve 0: reclaiming 8 for a/nb/main (tenant a holds 0, reserve 2)"},
				{"resume a/nb", ""}},
			deptUsed: 2,
		},
		{
			name:     "the department's idle reserve goes to its own tenants first",
			tenants:  map[string][2]int{"a": {0, -1}, "b": {0, -1}, "x": {6, -1}},
			depts:    dept(4, -1),
			allocs:   []Alloc{run("x", "big", "training", 6, 3*time.Hour)},
			waiting:  []Demand{wait("x", "early", 2, 30*time.Minute), wait("b", "late", 2, time.Minute)},
			want:     []act{{"resume b/late", ""}},
			waitWhy:  map[string]string{"x/early": ""},
			deptUsed: 2,
		},
		{
			name:     "fair share over time: the department's usage counts before its tenant's",
			tenants:  map[string][2]int{"a": {0, -1}, "b": {0, -1}, "x": {0, -1}},
			depts:    dept(0, -1),
			allocs:   []Alloc{run("y", "big", "training", 6, 3*time.Hour)},
			waiting:  []Demand{wait("b", "w", 2, time.Minute), wait("x", "w", 2, time.Minute)},
			usage:    map[string]float64{"a": 100 * 3600, "x": 50 * 3600},
			want:     []act{{"resume x/w", ""}},
			waitWhy:  map[string]string{"b/w": ""},
			deptUsed: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol := testPolicy(func(p *policy.Policy) {
				for name, rl := range tc.tenants {
					limit := rl[1]
					if limit < 0 {
						limit = policy.Unlimited
					}
					p.Tenants[name] = tenant(name, rl[0], limit)
				}
				p.Departments = tc.depts
				if tc.usage != nil {
					p.Preemption.FairShareHalfLife = 24 * time.Hour
				}
				for _, d := range p.Departments {
					if d.Limit < 0 {
						d.Limit = policy.Unlimited
					}
				}
			})
			if err := pol.Validate(); err != nil {
				t.Fatal(err)
			}
			snap := Snapshot{Nodes: []Node{{ID: "n1", GPUs: 8}}, Allocs: tc.allocs, Waiting: tc.waiting, Usage: tc.usage}
			plan := New(pol).Plan(&snap, t0)
			var got []string
			for _, a := range plan.Actions {
				got = append(got, string(a.Kind)+" "+a.Job.String())
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, w.what)
			}
			if strings.Join(got, "; ") != strings.Join(want, "; ") {
				t.Fatalf("actions %v, want %v\n%v", got, want, plan.Actions)
			}
			for i, w := range tc.want {
				if !strings.Contains(plan.Actions[i].Reason.Message, w.why) {
					t.Errorf("%s: reason %q lacks %q", got[i], plan.Actions[i].Reason.Message, w.why)
				}
			}
			for job, why := range tc.waitWhy {
				found := false
				for _, w := range plan.Waiting {
					if w.Job.String() == job {
						found = true
						if !strings.Contains(w.Reason.Message, why) {
							t.Errorf("%s waits: %q lacks %q", job, w.Reason.Message, why)
						}
					}
				}
				if !found {
					t.Errorf("%s does not wait", job)
				}
			}
			if len(plan.Departments) != 1 || plan.Departments[0].InUse != tc.deptUsed {
				t.Errorf("departments %+v, want research in use %d", plan.Departments, tc.deptUsed)
			}
		})
	}
}
