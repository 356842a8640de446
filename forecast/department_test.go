package forecast

import (
	"context"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// A job its department's limit holds, its tenant having none: the hint
// names the department and how far its tenants must come down; an ask over
// the department's limit never starts as it is.
func TestDepartmentLimitHints(t *testing.T) {
	p, diags := policy.ParseBytes("test.hcl", []byte(`
tier "training" {
  priority = 40
}
tenant "a" {}
tenant "b" {}
department "research" {
  tenants = ["a", "b"]
  limit   = 8
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e := engine.New(p)
	snap := &engine.Snapshot{Nodes: []engine.Node{node("n1", 16)},
		Allocs: []engine.Alloc{running("a", "big", "training", "n1", 8, 2*time.Hour, 0)},
		Waiting: []engine.Demand{waiting("b", "more", "training", 1, 2, 10*time.Minute),
			waiting("b", "huge", "training", 1, 10, 5*time.Minute)}}
	plan := e.Plan(snap, t0)
	in := Input{Engine: e, Snapshot: snap, Now: t0, Estimates: map[engine.JobRef]Estimate{ref("a", "big"): {Expected: 3 * time.Hour}}}
	q := Queue(p, snap, plan)
	hints := Hints(in, q, plan, Run(context.Background(), in, Options{Seed: 1}), DefaultHintPlans)
	wantEntry(t, q, ref("b", "more"), 1, 1, engine.RuleLimit)
	wantHint(t, hints[ref("b", "more")], "starts when department research (tenants a, b) holds at most 6 GPUs (it holds 8, limit 8), "+
		"as its tenants' running work ends, or if it asks for fewer")
	wantHint(t, hints[ref("b", "huge")], "never starts as it is: an allocation asks for 10 GPUs, more than department research's limit of 8; "+
		"it could start if it asked for at most 8 GPUs")
}

// A share of the cluster shrinks departments with their tenants.
func TestScaledPolicyDepartments(t *testing.T) {
	p := &policy.Policy{Tenants: map[string]*policy.Tenant{"a": {Name: "a", Reserve: 8, Limit: policy.Unlimited}},
		Departments: map[string]*policy.Department{"d": {Name: "d", Tenants: []string{"a"}, Reserve: 8, Limit: 12}}}
	q := scaledPolicy(p, 4)
	if d := q.Departments["d"]; d.Reserve != 2 || d.Limit != 3 {
		t.Errorf("department d scaled by 4: reserve %d, limit %d; want 2, 3", d.Reserve, d.Limit)
	}
	if p.Departments["d"].Limit != 12 {
		t.Error("scaling changed the policy's own department")
	}
}
