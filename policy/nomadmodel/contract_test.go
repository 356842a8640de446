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
		c, err := contract.Model(tc)
		if err != nil {
			t.Fatal(err)
		}
		return &modelSide{c: c, e: engine.New(p)}, ""
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
