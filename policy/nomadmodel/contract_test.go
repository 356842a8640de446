package nomadmodel_test

import (
	"testing"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
	"github.com/gpu-steward/steward/policy/nomadmodel/contract"
)

// TestContract runs the contract's cases against the model; the
// controller, the simulator and the forecast's replay run the same table.
func TestContract(t *testing.T) {
	if contract.SignalDelay != nomadmodel.SignalDelay {
		t.Fatalf("contract.SignalDelay is %s, the model's %s", contract.SignalDelay, nomadmodel.SignalDelay)
	}
	contract.Run(t, func(t *testing.T, p *policy.Policy, tc contract.Case) (contract.Side, string) {
		return &modelSide{c: build(t, tc), e: engine.New(p)}, ""
	})
}

// modelSide is the model under the contract.
type modelSide struct {
	c *nomadmodel.Cluster
	e *engine.Engine
}

func (m *modelSide) Round(t *testing.T, i int) (planned []string, kinds []engine.Kind) {
	at := contract.Start.Add(contract.Rounds[i])
	if contract.PlansOnNext(i) {
		m.c.Advance(at)
		planned = contract.State(m.c.Snapshot())
	}
	plan, err := m.c.Round(m.e, at)
	if err != nil {
		t.Fatal(err)
	}
	return planned, contract.Kinds(plan)
}

func (m *modelSide) End(*testing.T) []string { return contract.State(m.c.Snapshot()) }

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
