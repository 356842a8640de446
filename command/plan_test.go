package command

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

func testPlan() *engine.Plan {
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	return &engine.Plan{
		Actions: []engine.Action{{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "research", ID: "train"}, Group: "work", GPUs: 4,
			For: &nb, Reason: engine.Reason{Rule: engine.RulePriority, Message: "tier training yields 4 GPUs to ml/nb/work"}}},
		Waiting: []engine.Waiting{{Job: engine.JobRef{Namespace: "ml", ID: "big"}, Group: "work", GPUs: 8,
			Reason: engine.Reason{Rule: engine.RuleLimit, Message: "tenant ml is at its limit"}}},
		Tenants: []engine.TenantUsage{{Tenant: "research", Reserve: 4, Limit: policy.Unlimited, InUse: 4},
			{Tenant: "ml", Reserve: 2, Limit: 8, InUse: 6, Waiting: 8}},
	}
}

// steward plan exits 2 when actions are pending and 0 when there are
// none, as `nomad job plan`; with -namespace only that namespace's
// actions count.
func TestPlanExit(t *testing.T) {
	pol := &policy.Policy{Tenants: map[string]*policy.Tenant{"research": {Name: "research", Namespace: "research"}, "ml": {Name: "ml", Namespace: "ml"}}}
	cases := []struct {
		name    string
		plan    *engine.Plan
		ns      string
		want    int
		actions int
		tenants []string
	}{
		{name: "actions pending", plan: testPlan(), want: planPending, actions: 1, tenants: []string{"research", "ml"}},
		{name: "nothing to do", plan: &engine.Plan{Tenants: testPlan().Tenants}, want: planNothing, tenants: []string{"research", "ml"}},
		{name: "another namespace's actions", plan: testPlan(), ns: "ml", want: planNothing, tenants: []string{"ml"}},
		{name: "the namespace's own actions", plan: testPlan(), ns: "research", want: planPending, actions: 1, tenants: []string{"research"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			po := planOutput(tc.plan, tc.ns, pol)
			if got := planExit(po); got != tc.want {
				t.Errorf("exit %d, want %d", got, tc.want)
			}
			if len(po.Actions) != tc.actions {
				t.Errorf("%d actions, want %d", len(po.Actions), tc.actions)
			}
			var tenants []string
			for _, t := range po.Tenants {
				tenants = append(tenants, t.Tenant)
			}
			if strings.Join(tenants, ",") != strings.Join(tc.tenants, ",") {
				t.Errorf("tenants %v, want %v", tenants, tc.tenants)
			}
		})
	}
}

// The plan's JSON carries each action's job, rule, reason and
// beneficiary, and an unlimited tenant's limit as -1.
func TestPlanJSON(t *testing.T) {
	b, err := (&outputFlags{json: true}).format(planOutput(testPlan(), "", nil))
	if err != nil {
		t.Fatal(err)
	}
	var got PlanOutput
	if err := json.Unmarshal([]byte(b), &got); err != nil {
		t.Fatalf("decode: %v\n%s", err, b)
	}
	a := got.Actions[0]
	if a.Kind != "preempt" || a.Job != "research/train" || a.For != "ml/nb" || a.Rule != string(engine.RulePriority) || a.GPUs != 4 ||
		!strings.Contains(a.Reason, "yields 4 GPUs") {
		t.Errorf("action = %+v", a)
	}
	if w := got.Waiting[0]; w.Job != "ml/big" || w.GPUs != 8 || w.Rule != string(engine.RuleLimit) {
		t.Errorf("waiting = %+v", w)
	}
	if got.Tenants[0].Limit != -1 || got.Tenants[1].Limit != 8 || got.Tenants[1].Borrowed != 4 {
		t.Errorf("tenants = %+v", got.Tenants)
	}
	text := FormatPlan(&got)
	for _, want := range []string{"preempt  research/train  work   4     priority", "Waiting", "ml/big", "research  4        none"} {
		if !strings.Contains(text, want) {
			t.Errorf("plan text lacks %q:\n%s", want, text)
		}
	}
}
