package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Priority preemption across tenants never takes a victim's owner below its
// reserve — its tenant's, its tenant's in the victim's pool, or its
// department's — unless the beneficiary's tier may preempt the victim's
// within reserves (preempts_reserved): the victim's GPUs above the reserve
// are borrowed, the rest are not. Before, a victim whose owner held more
// than its reserve counted as borrowed whole, so an owner just above its
// reserve lost a job larger than its surplus, fell below its reserve and
// reclaimed the GPUs straight back (issue 31: 31 of the 38 tugs of war in
// sim's TestInvariantsOverTime were one tenant's interactive work
// preempting another's by priority, and that tenant reclaiming by
// reserve). The tenant's own reserve was fixed first; pool and department
// reserves asked only whether the owner was already at its reserve.
func TestPriorityKeepsVictimsReserve(t *testing.T) {
	alloc := func(id, node string, gpus int) Alloc {
		ids := []string{}
		for i := range gpus {
			ids = append(ids, id+"-g"+itoa(i))
		}
		return Alloc{ID: id, Job: Job{Ref: JobRef{"q", id}, Tier: "training", Priority: 40}, Group: "main", NodeID: node,
			GPUIDs: ids, StartedAt: t0.Add(-3 * time.Hour)}
	}
	// The owner whose reserve of 4 protects q's work: q itself, q within
	// pool h100 (both nodes are in it; q reserves nothing cluster-wide), or
	// q's department (q and r; q reserves nothing itself).
	owners := map[string]func(p *policy.Policy){
		"tenant": func(p *policy.Policy) { p.Tenants["q"] = tenant("q", 4, policy.Unlimited) },
		"pool": func(p *policy.Policy) {
			p.Pools["h100"] = &policy.Pool{Name: "h100", NodePool: "h100"}
			q := tenant("q", 0, policy.Unlimited)
			q.Quotas = map[string]*policy.Quota{"h100": {Reserve: 4, Limit: policy.Unlimited}}
			p.Tenants["q"] = q
		},
		"department": func(p *policy.Policy) {
			p.Tenants["q"] = tenant("q", 0, policy.Unlimited)
			p.Tenants["r"] = tenant("r", 0, policy.Unlimited)
			p.Departments = map[string]*policy.Department{"research": {Name: "research", Tenants: []string{"q", "r"},
				Reserve: 4, Limit: policy.Unlimited, Weight: 1}}
		},
	}
	tests := []struct {
		name          string
		victim, other int  // q's GPUs: the victim's (all of node n1) and its other job's (all of n2)
		want          int  // the GPUs p waits for
		overReserve   bool // interactive lists training in preempts_reserved
		preempt       bool
	}{
		{name: "a 2-GPU victim would take the owner from 5 to 3, below its reserve of 4", victim: 2, other: 3, want: 2},
		{name: "an 8-GPU victim would take the owner from 9 to 1", victim: 8, other: 1, want: 2},
		{name: "a 1-GPU victim leaves the owner at its reserve", victim: 1, other: 4, want: 1, preempt: true},
		{name: "preempts_reserved crosses the reserve", victim: 2, other: 3, want: 2, overReserve: true, preempt: true},
	}
	for _, owner := range []string{"tenant", "pool", "department"} {
		for _, tc := range tests {
			t.Run(owner+"/"+tc.name, func(t *testing.T) {
				pol := testPolicy(func(p *policy.Policy) {
					p.Tenants["p"] = tenant("p", 0, policy.Unlimited)
					owners[owner](p)
					if tc.overReserve {
						p.Tiers["interactive"].PreemptsReserved = []string{"training"}
					}
				})
				s := &Snapshot{
					Nodes:  []Node{{ID: "n1", NodePool: "h100", GPUs: tc.victim}, {ID: "n2", NodePool: "h100", GPUs: tc.other}},
					Allocs: []Alloc{alloc("victim", "n1", tc.victim), alloc("other", "n2", tc.other)},
					Waiting: []Demand{{Job: Job{Ref: JobRef{"p", "nb"}, Tier: "interactive", Priority: 60}, Group: "main",
						GPUsPerAlloc: tc.want, Count: 1, Since: t0.Add(-time.Hour)}},
				}
				plan := New(pol).Plan(s, t0)
				preempted := false
				for _, a := range plan.Actions {
					preempted = preempted || a.Kind == Preempt && a.Job.Namespace == "q"
				}
				if preempted != tc.preempt {
					t.Errorf("q preempted: %v, want %v\n%s\n%s", preempted, tc.preempt, strings.Join(kinds(plan), "\n"), waitLines(plan))
				}
			})
		}
	}
}
