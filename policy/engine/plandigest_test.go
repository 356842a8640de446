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
	// Issue 31 (i31-drain) moved seven: victims with no more work at risk
	// than their grace (started or checkpointed that recently) are stopped
	// at once, with grace 0 and a note, and their beneficiaries are no
	// longer held for them (grace.go).
	want := map[string]string{
		"nodes=1000":            "97e21fb731b9be72751c52e701d5b38cbf7f0701b0ad561970c111de4ca6600b", // issue 35: a gang undo no longer hides an idle victim from the walk
		"nodes=10000":           "f05060f8183b046644cc95c1a0f1e94ae079ae92abbff73738a65db7297ce565",
		"nodes=10000/one-model": "9757ad1612857f5b0c4b24d50c710a82c19ff683c29c8bc6314bf0f58a6ba2db",
		"fair-share":            "d690babdffbc2b0fb31f1c914e784f8252ce04b326d1d99548935f8ec309eb17",
		"fair-share-reclaim":    "b32257541380f4f88f642b1cbf3b5fc7f5c7d9458a2d781ef15da0045dbab3ac",
		"departments":           "c948a58aef321d9a3691cdb2b94e0cc45305dd05ce413916a03b162385bfcbbb",
		"groups/names=false":    "9279b5a217969c5d0ab129c4c5d082fdd4ed22267f8c46e2326d13bc6649b8ef",
		"groups/names=true":     "5a4d7525974ac119f38269e959f2eccca73a0c0ab5d4667ade435682c790aba5",
		"checkpoints":           "4227d056dae0bc963c5734acfdbdb0e937d9b1e1b0d8b01b7762ba4919e9d52b",
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
