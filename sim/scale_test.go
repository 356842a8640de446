package sim

import (
	"testing"

	"github.com/gpu-steward/steward/policy"
)

// ScaleTenants sizes departments with their tenants: a department's limit
// left as written would cap its scaled tenants.
func TestScaleTenantsDepartments(t *testing.T) {
	p := &policy.Policy{
		Tenants: map[string]*policy.Tenant{"a": {Name: "a", Reserve: 4, Limit: 8}, "b": {Name: "b", Reserve: 2, Limit: policy.Unlimited}},
		Departments: map[string]*policy.Department{
			"d": {Name: "d", Tenants: []string{"a", "b"}, Reserve: 6, Limit: 12},
			"e": {Name: "e", Tenants: []string{}, Reserve: 1, Limit: policy.Unlimited},
		},
	}
	ScaleTenants(p, 10)
	if d := p.Departments["d"]; d.Reserve != 60 || d.Limit != 120 {
		t.Errorf("department d: reserve %d, limit %d; want 60, 120", d.Reserve, d.Limit)
	}
	if e := p.Departments["e"]; e.Reserve != 10 || e.Limit != policy.Unlimited {
		t.Errorf("department e: reserve %d, limit %d; want 10, unlimited", e.Reserve, e.Limit)
	}
	if a := p.Tenants["a"]; a.Reserve != 40 || a.Limit != 80 {
		t.Errorf("tenant a: reserve %d, limit %d; want 40, 80", a.Reserve, a.Limit)
	}
}
