package engine_test

import (
	"github.com/gpu-steward/steward/policy/engine"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestExamplePolicy plans with the repository's example.hcl, parsed by the
// policy language: the language and the engine agree on the Policy type.
func TestExamplePolicy(t *testing.T) {
	p, diags := policy.Parse("../../example.hcl")
	if diags.HasErrors() {
		t.Fatalf("example.hcl: %s", diags.Error())
	}
	h := newHarness(t, p)
	h.node("gpu-1", "default", 8)
	h.submit("research", "train", "training", 6, 1) // its limit
	h.advance(time.Hour)
	h.submit("product", "notebook", "interactive", 4, 1)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt research/train", "hold product/notebook"})
	a := plan.Actions[0]
	if a.Reason.Rule != engine.RuleReclaim {
		t.Fatalf("%s: want a reclaim by product (reserve %d)", a, p.Tenants["product"].Reserve)
	}
	mustContain(t, a.Reason.Message, "tenant research holds 6 GPUs, reserve 4: reclaiming 6 for product/notebook/main")
}
