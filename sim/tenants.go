package sim

import (
	"maps"

	"github.com/gpu-steward/steward/policy"
)

// traceTenantsNamed returns the policy with a tenant block for each of the
// trace's tenants that none names: every tier, no reserve, no limit. A
// namespace no tenant block names may use only the default tier
// (policy.TenantOf), which is the controller's guard against unplanned
// namespaces; a trace's tenants are the teams of the cluster it was
// recorded on, which a policy written for that cluster would name, so the
// simulator treats them as named rather than move their work to one tier.
func traceTenantsNamed(p *policy.Policy, jobs []Job) *policy.Policy {
	var cp *policy.Policy
	for _, j := range jobs {
		if !p.TenantOf(j.Tenant).Unnamed || cp != nil && cp.Tenants[j.Tenant] != nil {
			continue
		}
		if cp == nil {
			c := *p
			c.Tenants = maps.Clone(p.Tenants)
			if c.Tenants == nil {
				c.Tenants = map[string]*policy.Tenant{}
			}
			cp = &c
		}
		cp.Tenants[j.Tenant] = &policy.Tenant{Name: j.Tenant, Namespace: j.Tenant, Limit: policy.Unlimited, Weight: policy.DefaultTenantWeight}
	}
	if cp == nil {
		return p
	}
	return cp
}
