package engine

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestScratchReuse plans a run of different clusters with one engine, as
// the simulator and the controller do, so that each plan may work in the
// memory the one before it left (scratch.go): larger and smaller clusters,
// one model and two, named groups. Each plan must be byte for byte what a
// new engine plans for the same snapshot.
func TestScratchReuse(t *testing.T) {
	p := genPolicy(8, 300*8/16, 300*8/4)
	shared := New(p)
	gen := func(seed uint64, nodes int) *Snapshot {
		r := rand.New(rand.NewPCG(seed, 2))
		return genCluster(r, nodes, 8, nodes*10, nodes, 8, t0)
	}
	named := func(s *Snapshot) *Snapshot {
		for i := range s.Allocs {
			a := &s.Allocs[i]
			a.Job = s.Allocs[i-i%4].Job
			a.Name = fmt.Sprintf("%s.%s[%d]", a.Job.Ref.ID, a.Group, i%4)
		}
		return s
	}
	for _, c := range []struct {
		name string
		s    func() *Snapshot
	}{
		{"300 nodes", func() *Snapshot { return gen(1, 300) }},
		{"40 nodes after 300", func() *Snapshot { return gen(2, 40) }},
		{"300 nodes one model", func() *Snapshot { return oneModel(gen(3, 300)) }},
		{"120 nodes named groups", func() *Snapshot { return named(gen(4, 120)) }},
		{"empty cluster", func() *Snapshot { return &Snapshot{} }},
		{"300 nodes again", func() *Snapshot { return gen(1, 300) }},
		{"40 nodes named groups", func() *Snapshot { return named(gen(5, 40)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.s()
			got, err := json.Marshal(shared.Plan(s, t0))
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(New(p).Plan(s, t0))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("plan with a reused scratch (%d bytes) differs from a new engine's (%d bytes)", len(got), len(want))
			}
		})
	}
}
