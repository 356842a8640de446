package sim

import "github.com/gpu-steward/steward/policy"

// deptCap is a department's limit on what its tenants hold together, for
// the fair-share figure: the engine enforces it beside each tenant's own,
// so a tenant whose department is at its limit may borrow no more,
// whatever its own limit says.
type deptCap struct {
	limit   int
	members []int // tenant indexes
}

// addDept records department d of policy p if it has a limit (one
// without caps nothing the tenants' own limits do not).
func (m *metrics) addDept(p *policy.Policy, d *policy.Department) {
	if d == nil || d.Limit == policy.Unlimited {
		return
	}
	dc := deptCap{limit: d.Limit}
	for _, name := range d.Tenants {
		ns := name
		if t := p.Tenants[name]; t != nil {
			ns = t.Namespace
		}
		ti := m.tenantIndex(ns)
		m.dept[ti] = len(m.depts)
		dc.members = append(dc.members, ti)
	}
	m.depts = append(m.depts, dc)
}

// deptRoom is the GPUs tenant t's department lets its tenants take now,
// beyond what they hold; -1 when it has no limit (or t is in none).
func (m *metrics) deptRoom(t int) int {
	if t >= len(m.dept) || m.dept[t] < 0 {
		return -1
	}
	d := &m.depts[m.dept[t]]
	room := d.limit
	for _, mi := range d.members {
		room -= m.tenantUse[mi]
	}
	return max(room, 0)
}
