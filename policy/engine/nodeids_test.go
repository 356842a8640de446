package engine

import (
	"strings"
	"testing"
)

// TestDuplicateNodeKeepsTheFirst: a node ID listed twice is skipped the
// second time, and allocations on it are checked against the first node
// with it, wherever the duplicate stands.
func TestDuplicateNodeKeepsTheFirst(t *testing.T) {
	job := Job{Ref: JobRef{"ml", "j"}, Tier: "training", Priority: 40}
	cases := []struct {
		name  string
		nodes []Node
	}{
		{"next to it", []Node{{ID: "n1", GPUs: 2}, {ID: "n1", GPUs: 8}, {ID: "n2", GPUs: 4}}},
		{"after another", []Node{{ID: "n1", GPUs: 2}, {ID: "n2", GPUs: 4}, {ID: "n1", GPUs: 8}}},
		{"twice", []Node{{ID: "n0", GPUs: 1}, {ID: "n1", GPUs: 2}, {ID: "n1", GPUs: 8}, {ID: "n1", GPUs: 16}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Snapshot{Nodes: c.nodes, Allocs: []Alloc{{ID: "a1", Job: job, NodeID: "n1", GPUIDs: []string{"g0", "g1", "g2"}}}}
			plan := New(testPolicy(nil)).Plan(&s, t0)
			var dups, held int
			for _, sk := range plan.Skipped {
				dups += strings.Count(sk.Reason, "duplicate node ID")
				held += strings.Count(sk.Reason, "holds 3 GPUs but node n1 has 2 unclaimed")
			}
			if dups != strings.Count(c.name, "twice")+1 || held != 1 {
				t.Errorf("skipped %+v: want each duplicate and the allocation checked against the first n1 (2 GPUs)", plan.Skipped)
			}
		})
	}
}
