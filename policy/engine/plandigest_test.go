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
		"nodes=1000":            "97e21fb731b9be72751c52e701d5b38cbf7f0701b0ad561970c111de4ca6600b", // issue 35: a gang undo no longer hides an idle victim from the walk
		"nodes=10000":           "c3876b6b6c4b2c3acfb9b93ad906146a073d674d75af51d48740db5b3304e7d2",
		"nodes=10000/one-model": "e0b033b9db8d8e901f0d96749bacce1fdfec9d8605d25eafa7e7a3a5a43dad95",
		"fair-share":            "4381b38c7904ca5ec96a4da886ab12ab579d928a22ba6ab59e86a58b70f68946",
		"fair-share-reclaim":    "b0d266b40799574de0bf5533b3ee672670dbab3cf2a8128d64b303763e408688",
		"departments":           "c948a58aef321d9a3691cdb2b94e0cc45305dd05ce413916a03b162385bfcbbb",
		"groups/names=false":    "655bdc0e5f36a4351466fd37999fe08fcd4056011fb645cf72b63f2a27db0914",
		"groups/names=true":     "497c9ebaca06bfd6a950eec2b6f39779399bbe7f3c112bfddd78dc959b9283b6",
		"checkpoints":           "bee524f0db82537fa7ce9f3eea1265ac65e2809161fdef7731cb3614deda762c",
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
