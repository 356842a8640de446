package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// A partial preemption lowers the group's count, and Nomad then stops the
// allocations with the highest name indexes: the victims of a group are
// always those, whatever else would rank them (their age, their
// checkpoints), and the node whose GPUs they free is the one the demand
// goes on.
func TestPartialPreemptionTakesHighestNames(t *testing.T) {
	type node struct {
		id   string
		gpus int
	}
	tests := []struct {
		name  string
		nodes []node
		// count allocations of one GPU each, train.work[i] on
		// on[i] (nodes[0] when on is nil); train.work[i] started i
		// minutes before train.work[0], so without names the lowest
		// indexes are the newest: the victims the engine would take
		// first.
		count int
		on    []int
		// ckpt: allocations (by index) that checkpointed a minute
		// ago: the least at risk.
		ckpt []int
		need int // GPUs the interactive notebook asks for
		want []int
	}{
		{name: "group of 4, 2 needed", nodes: []node{{"n1", 4}}, count: 4, need: 2, want: []int{3, 2}},
		{name: "group of 8, 3 needed", nodes: []node{{"n1", 8}}, count: 8, need: 3, want: []int{7, 6, 5}},
		{name: "group of 8, 4 needed, low indexes just checkpointed", nodes: []node{{"n1", 8}}, count: 8, ckpt: []int{0, 1, 2, 3},
			need: 4, want: []int{7, 6, 5, 4}},
		{name: "group of 8 over two nodes: the node of the highest indexes", nodes: []node{{"n1", 4}, {"n2", 4}},
			count: 8, on: []int{1, 1, 1, 1, 0, 0, 0, 0}, need: 2, want: []int{7, 6}},
		{name: "group of 8 over two nodes, alternating: one from the top is all one node frees", nodes: []node{{"n1", 4}, {"n2", 4}},
			count: 8, on: []int{0, 1, 0, 1, 0, 1, 0, 1}, need: 1, want: []int{7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(testPolicy(nil))
			s := &Snapshot{}
			for _, n := range tt.nodes {
				s.Nodes = append(s.Nodes, Node{ID: n.id, NodePool: "default", GPUs: n.gpus})
			}
			used := map[string]int{}
			job := Job{Ref: JobRef{Namespace: "ml", ID: "train"}, Tier: "training", Priority: 40, Checkpoint: "SIGUSR1"}
			for i := range tt.count {
				n := tt.nodes[0].id
				if tt.on != nil {
					n = tt.nodes[tt.on[i]].id
				}
				a := Alloc{ID: fmt.Sprintf("a%d", i), Job: job, Group: "work", Name: fmt.Sprintf("train.work[%d]", i),
					NodeID: n, GPUIDs: []string{fmt.Sprintf("%s-gpu%d", n, used[n])},
					StartedAt: t0.Add(-2*time.Hour - time.Duration(i)*time.Minute)}
				used[n]++
				if slices.Contains(tt.ckpt, i) {
					a.CheckpointAt = t0.Add(-time.Minute)
				}
				s.Allocs = append(s.Allocs, a)
			}
			s.Waiting = []Demand{{Job: Job{Ref: JobRef{Namespace: "ml", ID: "nb"}, Tier: "interactive", Priority: 60},
				Group: "main", GPUsPerAlloc: tt.need, Count: 1, Since: t0}}
			plan := e.Plan(s, t0)
			var got []int
			for _, a := range plan.Actions {
				if a.Kind != Preempt {
					continue
				}
				if a.Job.ID != "train" || a.Group != "work" {
					t.Fatalf("preempts %s/%s", a.Job, a.Group)
				}
				for _, id := range a.Allocs {
					var i int
					fmt.Sscanf(id, "a%d", &i)
					got = append(got, i)
				}
			}
			slices.Sort(got)
			slices.Reverse(got)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("victims %v, want %v (the highest name indexes); plan: %v", got, tt.want, plan.Actions)
			}
		})
	}
}

// The other passes that take a group's allocations keep to the same
// order: a tenant over its limit gives back from the top of a group, and
// an idle rule releases a group's idle allocations only from its top down.
func TestChainOrderInOtherPasses(t *testing.T) {
	job := Job{Ref: JobRef{Namespace: "ml", ID: "train"}, Tier: "training", Priority: 40}
	allocs := func(count int, idle []int) []Alloc {
		var out []Alloc
		for i := range count {
			a := Alloc{ID: fmt.Sprintf("a%d", i), Job: job, Group: "work", Name: fmt.Sprintf("train.work[%d]", i),
				NodeID: "n1", GPUIDs: []string{fmt.Sprintf("gpu%d", i)},
				// The lowest index is the newest: what a limit gives
				// back first, without names.
				StartedAt: t0.Add(-time.Hour - time.Duration(i)*time.Minute)}
			util := 90.0
			if slices.Contains(idle, i) {
				util = 1
			}
			for m := 30; m >= 0; m-- {
				a.Usage = append(a.Usage, Sample{At: t0.Add(-time.Duration(m) * time.Minute), Util: util})
			}
			out = append(out, a)
		}
		return out
	}
	victims := func(p *Plan, kind Kind) []string {
		var out []string
		for _, a := range p.Actions {
			if a.Kind == kind {
				out = append(out, a.Allocs...)
			}
		}
		slices.Sort(out)
		return out
	}
	t.Run("limit: the tenant gives back its group's highest names", func(t *testing.T) {
		e := New(testPolicy(func(p *policy.Policy) { p.Tenants["ml"] = tenant("ml", 0, 2) }))
		s := &Snapshot{Nodes: []Node{{ID: "n1", NodePool: "default", GPUs: 4}}, Allocs: allocs(4, nil)}
		if got, want := victims(e.Plan(s, t0), Preempt), []string{"a2", "a3"}; !slices.Equal(got, want) {
			t.Fatalf("gives back %v, want %v", got, want)
		}
	})
	idlePolicy := func(p *policy.Policy) {
		p.Idle = []*policy.IdleRule{{Name: "idle", Tiers: []string{"training"}, Threshold: 10, After: 15 * time.Minute,
			Mode: policy.IdleModeAlways, Action: policy.IdleActionStop}}
	}
	for _, tt := range []struct {
		name string
		idle []int
		want []string
	}{
		{"idle always: the idle top of a group goes", []int{3, 2}, []string{"a2", "a3"}},
		{"idle always: an idle allocation below a busy one stays", []int{0, 1}, nil},
		{"idle always: down from the top while idle", []int{3, 1}, []string{"a3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := New(testPolicy(idlePolicy))
			s := &Snapshot{Nodes: []Node{{ID: "n1", NodePool: "default", GPUs: 4}}, Allocs: allocs(4, tt.idle)}
			if got := victims(e.Plan(s, t0), IdleStop); !slices.Equal(got, tt.want) {
				t.Fatalf("releases %v, want %v", got, tt.want)
			}
		})
	}
}

// BenchmarkPlanGroups measures plans of the generated cluster with its
// allocations in groups of four (a job each), with and without their names:
// the cost of keeping victims to the top of each group's name order
// (chains.go) against a plan that does not know the order.
func BenchmarkPlanGroups(b *testing.B) {
	for _, named := range []bool{false, true} {
		b.Run(fmt.Sprintf("names=%v", named), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			nodes := 10000
			s := genCluster(r, nodes, 8, nodes*10, nodes, 8, t0)
			for i := range s.Allocs {
				first := &s.Allocs[i-i%4]
				a := &s.Allocs[i]
				a.Job = first.Job
				if named {
					a.Name = fmt.Sprintf("%s.%s[%d]", a.Job.Ref.ID, a.Group, i%4)
				}
			}
			benchPlan(b, s, nodes)
		})
	}
}
