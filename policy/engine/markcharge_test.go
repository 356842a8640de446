package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// GPUs set aside for a beneficiary count against its tenant's limit (and
// its department's) only as far as it takes them: a victim larger than the
// beneficiary drains all its GPUs for it, but the tenant will hold only
// what the beneficiary runs. Before, the whole victim counted, so the
// tenant's other beneficiaries, whose own victims were draining too, found
// the limit taken and waited, their preemptions wasted (issue 31: on
// pressured Helios, seed 1, five 1-GPU notebooks of platform waited at
// "holds 3 GPUs and 22 being freed for its waiting work, limit 20", 16 of
// the 22 being two 8-GPU victims freed for two 1-GPU notebooks).
func TestMarksChargeWhatTheBeneficiaryTakes(t *testing.T) {
	alloc := func(ns, id, node string, gpus int, forJob *JobRef) Alloc {
		ids := []string{}
		for i := range gpus {
			ids = append(ids, id+"-g"+itoa(i))
		}
		return Alloc{ID: id, Job: Job{Ref: JobRef{ns, id}, Tier: "training", Priority: 40}, Group: "main", NodeID: node,
			GPUIDs: ids, StartedAt: t0.Add(-3 * time.Hour), Draining: forJob != nil, For: forJob, ForGroup: "main"}
	}
	wait := func(id string, since time.Duration) Demand {
		return Demand{Job: Job{Ref: JobRef{"p", id}, Tier: "interactive", Priority: 60}, Group: "main", GPUsPerAlloc: 1, Count: 1,
			Since: t0.Add(-since), Held: true}
	}
	big, small := JobRef{"p", "big"}, JobRef{"p", "small"}
	snap := func(earmarks []Earmark) *Snapshot {
		return &Snapshot{
			Nodes: []Node{{ID: "n1", GPUs: 8}, {ID: "n2", GPUs: 4}},
			Allocs: []Alloc{
				alloc("p", "run", "n2", 1, nil),       // p holds 1 GPU
				alloc("q", "wide", "n1", 8, &big),     // 8 GPUs draining for a 1-GPU notebook
				alloc("q", "narrow", "n2", 1, &small), // 1 GPU draining for another
			},
			// small waits longer: it is served first, with big's GPUs
			// still set aside.
			Waiting:  []Demand{wait("small", time.Hour), wait("big", time.Minute)},
			Earmarks: earmarks,
		}
	}
	tests := []struct {
		name      string
		limit     int  // p's limit
		dept      int  // its department's limit; 0: no department
		given     bool // big's victim already stopped: its 8 GPUs given back (Snapshot.Earmarks)
		limitWait []string
		giveBack  bool // p/run is given back to make room under the limit (onMarksAtLimit)
	}{
		{name: "within the limit with what the beneficiaries take", limit: 3},
		{name: "within it with GPUs given back for a beneficiary", limit: 3, given: true},
		{name: "the limit still holds: the newest work makes room", limit: 2, giveBack: true},
		{name: "within the department's limit", limit: policy.Unlimited, dept: 3},
		{name: "the department's limit still holds", limit: policy.Unlimited, dept: 2, limitWait: []string{"p/small"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol := testPolicy(func(p *policy.Policy) {
				p.Tenants["p"] = tenant("p", 0, tc.limit)
				p.Tenants["q"] = tenant("q", 0, policy.Unlimited)
				if tc.dept > 0 {
					p.Departments = map[string]*policy.Department{"infra": {Name: "infra", Tenants: []string{"p"}, Limit: tc.dept, Weight: 1}}
				}
			})
			s := snap(nil)
			if tc.given {
				// big's victim stopped: its GPUs are free, set aside
				// for big.
				s.Allocs = s.Allocs[:0:0]
				s.Allocs = append(s.Allocs, alloc("p", "run", "n2", 1, nil), alloc("q", "narrow", "n2", 1, &small))
				s.Earmarks = []Earmark{{NodeID: "n1", GPUs: 8, For: big, ForGroup: "main"}}
			}
			plan := New(pol).Plan(s, t0)
			var got []string
			for _, w := range plan.Waiting {
				if w.Reason.Rule == RuleLimit {
					got = append(got, w.Job.String())
				}
			}
			gave := false
			for _, a := range plan.Actions {
				gave = gave || a.Kind == Preempt && a.Job == JobRef{"p", "run"}
			}
			if gave != tc.giveBack {
				t.Errorf("p/run given back: %v, want %v\n%v", gave, tc.giveBack, kinds(plan))
			}
			if strings.Join(got, ",") != strings.Join(tc.limitWait, ",") {
				t.Errorf("held by the limit: %v, want %v\n%s", got, tc.limitWait, waitLines(plan))
			}
		})
	}
}

func waitLines(p *Plan) string {
	var b strings.Builder
	for _, w := range p.Waiting {
		b.WriteString(w.Job.String() + ": " + w.Reason.Message + "\n")
	}
	return b.String()
}
