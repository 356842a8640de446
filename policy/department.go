package policy

import (
	"fmt"
	"math"

	"github.com/hashicorp/hcl/v2"
)

// Department is a group of tenants with a reserve and a limit of its own,
// beside theirs (hierarchical tenants, as KAI's parent queues and Kueue's
// cohorts). The semantics, as docs/reference/policy.md states them:
//
//   - Limit caps the GPUs its tenants hold together, borrowed ones
//     included; the engine brings them back under it as it does a
//     tenant's limit.
//   - Reserve is guaranteed to its tenants together while they have work
//     waiting: each tenant's own reserve lies within it (their sum may not
//     exceed it), and the rest, and any member's unused reserve, goes to
//     its other tenants first. A member below the department's reserve
//     reclaims GPUs from tenants outside the department, as a tenant below
//     its own reserve does; within the department only a tenant's own
//     reserve reclaims (from siblings above theirs).
//   - Weight is the department's share of spare GPUs among departments
//     (a tenant in no department counts as a department of its own) when
//     fair share over time is on; its tenants' weights share within it.
type Department struct {
	Name    string
	Reserve int     // GPUs guaranteed to its tenants together while they have demand
	Limit   int     // most GPUs its tenants may hold together; Unlimited if unset
	Weight  float64 // share among departments (fair share over time)
	// Tenants are its member tenants, in file order; a tenant belongs to
	// at most one department.
	Tenants []string
}

// DepartmentOf returns the department tenant belongs to, or nil. A policy
// has few departments: it walks them in name order, so that the answer is
// the same however the map is laid out (Validate refuses a tenant in two).
func (p *Policy) DepartmentOf(tenant string) *Department {
	for _, name := range p.DepartmentNames() {
		if d := p.Departments[name]; d != nil && contains(d.Tenants, tenant) {
			return d
		}
	}
	return nil
}

// DepartmentNames returns department names sorted.
func (p *Policy) DepartmentNames() []string { return keys(p.Departments) }

// department decodes a department block.
func (d *decoder) department(b *hcl.Block, name string) {
	a, _ := d.attrs(b, name, departmentSchema)
	defer d.done(a)
	dp := &Department{Name: name, Limit: Unlimited, Weight: DefaultTenantWeight}
	a.integer("reserve", &dp.Reserve)
	// As a tenant's: once decoded, "limit = -1" would read as no limit.
	if a.integer("limit", &dp.Limit) && dp.Limit < 0 {
		w := a.where("limit")
		p := negativeProblem(w, dp.Limit, " Leave limit out for no limit.")
		a.fail(w, a.attrs["limit"].Expr.Range(), p.summary, p.detail)
	}
	a.number("weight", &dp.Weight)
	a.strings("tenants", &dp.Tenants)
	if d.pol.Departments == nil {
		d.pol.Departments = map[string]*Department{}
	}
	d.pol.Departments[name] = dp
}

// departments checks department blocks: known tenants, each in at most
// one department, member reserves that fit the department's, a limit of
// at least the reserve and a positive weight.
func (c *checker) departments() {
	member := map[string]string{} // tenant -> department
	for _, name := range declared(c, blockDepartment, c.p.Departments) {
		dp := c.p.Departments[name]
		if !c.entry(blockDepartment, name, dp == nil, dp != nil && dp.Name != name) {
			continue
		}
		at := func(attr string) where { return whereAttr(blockDepartment, name, attr) }
		c.reserveAndLimit(at, dp.Reserve, dp.Limit,
			fmt.Sprintf("Department %q has limit %d but reserve %d", name, dp.Limit, dp.Reserve))
		if !(dp.Weight > 0) || math.IsInf(dp.Weight, 0) {
			c.errorf(at("weight"), "Invalid weight",
				"The weight of department %q must be a number greater than 0; got %g.", name, dp.Weight)
		}
		if len(dp.Tenants) == 0 {
			c.errorf(at("tenants"), "Empty department", "Department %q lists no tenants; list the tenants it groups.", name)
		}
		c.refs(at("tenants"), blockTenant, dp.Tenants, keys(c.p.Tenants))
		sum, seen := 0, map[string]bool{}
		for i, tn := range dp.Tenants {
			t := c.p.Tenants[tn]
			if t == nil || seen[tn] {
				continue
			}
			seen[tn] = true
			if prev, dup := member[tn]; dup && prev != name {
				c.errorf(at("tenants").at(i), "Tenant in two departments",
					"Tenant %q is already in department %q; a tenant belongs to at most one department.", tn, prev)
				continue
			}
			member[tn] = name
			sum += t.Reserve
		}
		if dp.Reserve >= 0 && sum > dp.Reserve {
			c.errorf(at("reserve"), "Department reserve below its tenants'",
				"Department %q has reserve %d, but its tenants' reserves add up to %d (%s); each tenant's reserve lies "+
					"within its department's, so the department's must be at least their sum.",
				name, dp.Reserve, sum, c.memberReserves(dp))
		}
	}
}

// memberReserves lists a department's tenants with their reserves, for
// the reserve check's message: "product 4, research 6".
func (c *checker) memberReserves(dp *Department) string {
	s, seen := "", map[string]bool{}
	for _, tn := range dp.Tenants {
		if t := c.p.Tenants[tn]; t != nil && !seen[tn] {
			seen[tn] = true
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s %d", tn, t.Reserve)
		}
	}
	return s
}
