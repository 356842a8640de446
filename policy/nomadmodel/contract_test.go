package nomadmodel_test

import (
	"slices"
	"testing"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
	"github.com/gpu-steward/steward/policy/nomadmodel/contract"
)

// TestContract runs the contract's cases against the model; the
// controller runs the same table (controller/contract_test.go).
func TestContract(t *testing.T) {
	if contract.SignalDelay != nomadmodel.SignalDelay {
		t.Fatalf("contract.SignalDelay is %s, the model's %s", contract.SignalDelay, nomadmodel.SignalDelay)
	}
	p, diags := policy.ParseBytes("contract.hcl", []byte(contract.Policy))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	for _, tc := range contract.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			c := build(t, tc)
			e := engine.New(p)
			var kinds []engine.Kind
			for i, after := range contract.Rounds {
				if contract.PlansOnNext(i) {
					c.Advance(contract.Start.Add(after))
					if got := contract.State(c.Snapshot()); !slices.Equal(got, tc.Next) {
						t.Errorf("state round %d plans on:\n got  %q\n want %q", i, got, tc.Next)
					}
				}
				plan, err := c.Round(e, contract.Start.Add(after))
				if err != nil {
					t.Fatal(err)
				}
				kinds = append(kinds, contract.Kinds(plan)...)
			}
			if !slices.Contains(kinds, tc.Kind) {
				t.Errorf("no %s in the plans: %v", tc.Kind, kinds)
			}
			if got := contract.State(c.Snapshot()); !slices.Equal(got, tc.Want) {
				t.Errorf("state after the rounds:\n got  %q\n want %q", got, tc.Want)
			}
		})
	}
}

// build is a case's start state in the model.
func build(t *testing.T, tc contract.Case) *nomadmodel.Cluster {
	t.Helper()
	var nodes []engine.Node
	for _, n := range tc.Nodes {
		pool := n.Pool
		if pool == "" {
			pool = "default"
		}
		nodes = append(nodes, engine.Node{ID: n.ID, Name: n.ID, NodePool: pool, GPUs: n.GPUs})
	}
	c, err := nomadmodel.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range tc.Jobs {
		pool := j.Pool
		if pool == "" {
			pool = "default"
		}
		g, err := c.AddGroup(nomadmodel.Group{Job: engine.Job{Ref: engine.JobRef{Namespace: j.Namespace, ID: j.ID}, Tier: j.Tier, Priority: j.Priority, Gang: j.Gang},
			Name: contract.Group, GPUsPerAlloc: j.GPUs, Count: j.Count, NodePool: pool, Since: contract.Start.Add(-j.WaitedFor)})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range j.Running {
			id, err := c.Start(g, n, contract.Start.Add(-j.RanFor))
			if err != nil {
				t.Fatal(err)
			}
			if j.Idle {
				idle := []engine.Sample{{At: contract.Start.Add(-j.RanFor), Util: 0}, {At: contract.Start, Util: 0}}
				if err := c.SetUsage(id, idle); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return c
}
