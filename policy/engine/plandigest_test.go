package engine

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestBenchPlanDigests pins the plans of the benchmark clusters (the
// BenchmarkPlan* snapshots and policies, 10,000 nodes) by the SHA-256 of
// their JSON: a refactoring or a speed-up of the engine must leave every
// plan byte-identical, and this says so on each run. A change meant to
// change plans updates the digests here, in the same commit, and says why.
func TestBenchPlanDigests(t *testing.T) {
	want := map[string]string{
		"nodes=1000":            "bb9d3fe7e4d707855f3327bff883f5e7a41b0d29f5180f409591eb3733f03782",
		"nodes=10000":           "2964b671fee7cc23c76045550cb7d6d3ff2ab0f5757d41d1dd737f2c7a265185",
		"nodes=10000/one-model": "fba3c9b446b3c09ffbd46506a0b848833cb04ffe407b7aebb5354d056955eeaf",
		"fair-share":            "66451c410e48813557f4dca80d6a4daa099c07504bb342d82d253cac7d696a16",
		"fair-share-reclaim":    "c0c096bb4753839b7fc54fd4de086f171017be7fd69c7c494c8141a0b544ff72",
		"departments":           "c948a58aef321d9a3691cdb2b94e0cc45305dd05ce413916a03b162385bfcbbb",
		"groups/names=false":    "7ee1acc0e5b81512b84ec12204afcc7312699c1b23a41d5c792c7bd42af51b13",
		"groups/names=true":     "c5a18ac6a9f9228a7079b80c3fc7537c74cd981de4d810b0e51e455ddfaa81d1",
		"checkpoints":           "04b9198cfdd7a352a9d9984e43db32fe91cf2f27902ef19fb45fc73e87cbf9c3",
	}
	for _, c := range benchPlanCases() {
		t.Run(c.name, func(t *testing.T) {
			s, p := c.build()
			plan := New(p).Plan(s, t0)
			b, err := json.Marshal(plan)
			if err != nil {
				t.Fatalf("marshal plan: %v", err)
			}
			got := fmt.Sprintf("%x", sha256.Sum256(b))
			t.Logf("%s %s actions=%d", c.name, got, len(plan.Actions))
			if w, ok := want[c.name]; !ok || got != w {
				t.Errorf("plan digest %s (%d actions, %d bytes), want %s", got, len(plan.Actions), len(b), w)
			}
		})
	}
}

// benchPlanCase is one benchmark cluster: a snapshot and its policy.
type benchPlanCase struct {
	name  string
	build func() (*Snapshot, *policy.Policy)
}

// benchPlanCases are the clusters BenchmarkPlan and its siblings plan,
// built as they build them.
func benchPlanCases() []benchPlanCase {
	gen := func(nodes int) *Snapshot {
		r := rand.New(rand.NewPCG(1, 2))
		return genCluster(r, nodes, 8, nodes*10, nodes, 8, t0)
	}
	pol := func(nodes int) *policy.Policy { return genPolicy(8, nodes*8/16, nodes*8/4) }
	usage := func(s *Snapshot) {
		s.Usage = map[string]float64{}
		for i := range 8 {
			s.Usage[fmt.Sprintf("team%d", i)] = float64(1000 * (i + 1) * (i%3 + 1))
		}
	}
	groups := func(named bool) func() (*Snapshot, *policy.Policy) {
		return func() (*Snapshot, *policy.Policy) {
			s := gen(10000)
			for i := range s.Allocs {
				first := &s.Allocs[i-i%4]
				a := &s.Allocs[i]
				a.Job = first.Job
				if named {
					a.Name = fmt.Sprintf("%s.%s[%d]", a.Job.Ref.ID, a.Group, i%4)
				}
			}
			return s, pol(10000)
		}
	}
	return []benchPlanCase{
		{"nodes=1000", func() (*Snapshot, *policy.Policy) { return gen(1000), pol(1000) }},
		{"nodes=10000", func() (*Snapshot, *policy.Policy) { return gen(10000), pol(10000) }},
		{"nodes=10000/one-model", func() (*Snapshot, *policy.Policy) { return oneModel(gen(10000)), pol(10000) }},
		{"fair-share", func() (*Snapshot, *policy.Policy) {
			s, p := gen(10000), pol(10000)
			usage(s)
			p.Preemption.FairShareHalfLife = 24 * time.Hour
			return s, p
		}},
		{"fair-share-reclaim", func() (*Snapshot, *policy.Policy) {
			s, p := gen(10000), pol(10000)
			usage(s)
			p.Preemption.FairShareHalfLife = 24 * time.Hour
			p.Preemption.FairShareReclaimAbove = 1.5
			return s, p
		}},
		{"departments", func() (*Snapshot, *policy.Policy) {
			s, p := gen(10000), pol(10000)
			p.Departments = map[string]*policy.Department{}
			for i, name := range p.TenantNames() {
				dn := fmt.Sprintf("dept%d", i/4)
				d := p.Departments[dn]
				if d == nil {
					d = &policy.Department{Name: dn, Weight: 1}
					p.Departments[dn] = d
				}
				tn := p.Tenants[name]
				d.Tenants = append(d.Tenants, name)
				d.Reserve += tn.Reserve
				d.Limit += tn.Limit * 3 / 8
			}
			return s, p
		}},
		{"groups/names=false", groups(false)},
		{"groups/names=true", groups(true)},
		{"checkpoints", func() (*Snapshot, *policy.Policy) {
			r := rand.New(rand.NewPCG(1, 2))
			s := genCluster(r, 10000, 8, 100000, 10000, 8, t0)
			for i := range s.Allocs {
				if i%2 == 0 {
					s.Allocs[i].CheckpointAt = t0.Add(-time.Duration(r.IntN(3600)) * time.Second)
				}
			}
			return s, pol(10000)
		}},
	}
}
