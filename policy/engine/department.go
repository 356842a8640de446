package engine

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/gpu-steward/steward/policy"
)

// Departments (policy.Department): groups of tenants with a reserve and a
// limit of their own. A policy without any leaves e.depts nil, and every
// hook below returns at once: such a policy plans as it did before.
//
//   - limit: work that would take the department's tenants together over
//     it waits (placeOne), and work Nomad placed beyond it is given back,
//     the department's newest first (enforceDeptLimits).
//   - reserve: a member whose department holds less than its reserve is
//     entitled as if the department's reserve were its own, but only
//     against tenants outside the department (bene.deptOnly, ruleFor);
//     work of a department within its reserve is safe from tenants outside
//     it (deptProtected), and its members' waiting work ranks with reserved
//     work (orderDemands), so the department's idle reserve goes to its
//     own tenants first.
//   - weight: with fair share over time, tenants are ordered by their
//     department's decayed usage per unit of its weight before their own
//     (shareKey).
//
// A department's use is the sum of its members' as the plan goes,
// computed when asked: departments have few tenants, and keeping a second
// count in step with every place, take and move would be a second place
// for the accounting to go wrong.

// deptInfo is a compiled department.
type deptInfo struct {
	d       *policy.Department
	members []int  // indices into Engine.tenants, sorted
	names   string // "nlp, vision": its tenants, for reasons
	reserve int    // units
	lim     int    // units; MaxInt when unlimited
}

// compileDepartments indexes the policy's departments and each policy
// tenant's (deptOf: -1 for none).
func (e *Engine) compileDepartments() {
	if len(e.p.Departments) == 0 {
		return
	}
	e.deptOf = make([]int, len(e.tenants))
	for i := range e.deptOf {
		e.deptOf[i] = -1
	}
	idx := map[string]int{}
	for i, t := range e.tenants {
		idx[t.Name] = i
	}
	for _, name := range e.p.DepartmentNames() {
		d := e.p.Departments[name]
		if d == nil {
			continue
		}
		di := deptInfo{d: d, reserve: d.Reserve * gpuUnit, lim: math.MaxInt}
		if d.Limit != policy.Unlimited {
			di.lim = d.Limit * gpuUnit
		}
		for _, tn := range d.Tenants {
			if ti, ok := idx[tn]; ok && e.deptOf[ti] < 0 {
				e.deptOf[ti] = len(e.depts)
				di.members = append(di.members, ti)
			}
		}
		slices.Sort(di.members)
		names := make([]string, len(di.members))
		for i, ti := range di.members {
			names[i] = e.tenants[ti].Name
		}
		di.names = strings.Join(names, ", ")
		e.depts = append(e.depts, di)
	}
}

// dept is tenant ti's department, or -1 (no department, or a namespace no
// tenant names).
func (e *Engine) dept(ti int) int {
	if e.deptOf == nil || ti >= len(e.deptOf) {
		return -1
	}
	return e.deptOf[ti]
}

// deptUse is what department di's tenants hold, draining excluded.
func (l *ledger) deptUse(di int) int {
	sum := 0
	for _, ti := range l.e.depts[di].members {
		sum += l.tenants[ti].use
	}
	return sum
}

// deptHeld is deptUse plus what is set aside for its tenants' waiting
// work: promised, so within the limit as much as held (tenantState.marked).
func (l *ledger) deptHeld(di int) int {
	sum := 0
	for _, ti := range l.e.depts[di].members {
		sum += l.tenants[ti].use + l.tenants[ti].marked
	}
	return sum
}

// overDeptLimit reports whether tenant ti's department would be over its
// limit holding extra more units.
func (l *ledger) overDeptLimit(ti, extra int) bool {
	di := l.e.dept(ti)
	return di >= 0 && l.deptHeld(di)+extra > l.e.depts[di].lim
}

// deptUnder reports whether tenant ti's department stays within its
// reserve holding extra more units.
func (l *ledger) deptUnder(ti, extra int) bool {
	di := l.e.dept(ti)
	return di >= 0 && l.deptUse(di)+extra <= l.e.depts[di].reserve
}

// sameDept reports whether tenants a and b are in one department.
func (c *cluster) sameDept(a, b int) bool {
	da := c.e.dept(a)
	return da >= 0 && da == c.e.dept(b)
}

// deptProtected reports whether unit u's GPUs on node n are within its
// department's reserve, against a beneficiary b outside the department:
// then neither a reclaim nor a priority of b's may take them, as a
// tenant's own reserve protects its work. The walk's victims on n so far
// count as gone; whole asks whether taking u whole would leave the
// department below its reserve (keepsReserve).
func (st *state) deptProtected(u *unit, b *bene, n int32, whole bool) bool {
	di := st.e.dept(u.tenant)
	if di < 0 || di == st.e.dept(b.tenant) || st.e.depts[di].reserve <= 0 {
		return false
	}
	holds := st.deptUse(di)
	for _, ti := range st.e.depts[di].members {
		holds -= st.walk.picked(n, ti)
	}
	return keepsReserve(u, holds, st.e.depts[di].reserve, whole)
}

// deptNote is what a capacity reason adds for a tenant in a department:
// "; department research (tenants a, b) holds 8 GPUs, reserve 8" ("" for
// a tenant in none).
func (l *ledger) deptNote(ti int) string {
	di := l.e.dept(ti)
	if di < 0 {
		return ""
	}
	d := &l.e.depts[di]
	return "; department " + d.d.Name + " (tenants " + d.names + ") holds " + unitsString(l.deptUse(di)) +
		", reserve " + itoa(d.d.Reserve)
}

// enforceDeptLimits gives back a department's newest work, whichever of
// its tenants holds it, while its tenants together hold more than its
// limit, as enforceLimits does a tenant's (the limit wins over the
// eviction cap).
func (st *state) enforceDeptLimits() {
	for di := range st.e.depts {
		d := &st.e.depts[di]
		if st.deptUse(di) <= d.lim {
			continue
		}
		holds := st.deptUse(di)
		over := func(extra int) bool { return st.deptUse(di)+extra > d.lim }
		taken, capped := st.giveBackOf(-1, d.members, over, nil, false)
		if over(0) && capped > 0 {
			more, _ := st.giveBackOf(-1, d.members, over, nil, true)
			taken = append(taken, more...)
		}
		st.emitGiveBack(-1, taken, d.d.Limit, func(m *msg) {
			m.start("department ", d.d.Name, " (tenants ", d.names, ") holds ").u(holds).s(" GPUs")
		}, st.emit)
	}
}

// deptLimitReason explains work held by its department's limit:
// "department research (tenants nlp, vision) holds 12 GPUs, limit 12: 1
// more would exceed it".
func (o *output) deptLimitReason(b *bene, need int) Reason {
	di := o.m.e.dept(b.tenant)
	d := &o.m.e.depts[di]
	m := o.text.start("department ", d.d.Name, " (tenants ", d.names, ") holds ").u(o.m.deptUse(di)).s(" GPUs")
	if held := o.m.deptHeld(di); held > o.m.deptUse(di) {
		m.s(" and ").u(held - o.m.deptUse(di)).s(" being freed for its waiting work")
	}
	return m.s(", limit ").n(d.d.Limit).s(": ").u(need).s(" more would exceed it").reason(RuleLimit)
}

// deptReclaimReason explains a reclaim on a department's account:
// "department research (tenants nlp, vision) holds 2 GPUs, reserve 8:
// reclaiming 4 for nlp/train/main from tenant ops (holds 6, reserve 2)".
// It reads only the policy and the victim's figures: it may be written on
// the explainer's goroutine.
func (o *output) deptReclaimReason(m *msg, b *bene, v victim, gpus int) Reason {
	u := &o.m.units[v.ui]
	d := &o.m.e.depts[v.dept-1]
	vt := o.m.tenants[u.tenant].t
	m.start("department ", d.d.Name, " (tenants ", d.names, ") holds ").gpusU(int(v.beneHolds)).s(", reserve ").n(d.d.Reserve).
		s(": reclaiming ")
	if !o.where(m, u, gpus) {
		m.n(gpus)
	}
	m.s(" for ").demand(b.d).s(" from tenant ", vt.Name, " (holds ").gpusU(v.holdsPrev).s(", reserve ").n(vt.Reserve).s(")")
	o.exposedNote(m, u)
	o.protectedNote(m, u, RuleReclaim)
	return m.reason(RuleReclaim)
}

// deptUsageKey orders tenants by their department's decayed usage per
// unit of its weight (fair share over time at the department level); a
// tenant in no department is a department of its own.
func (l *ledger) deptUsageKey(ti int) uint64 {
	di := l.e.dept(ti)
	if di < 0 {
		return l.usageKey(ti)
	}
	var u float64
	for _, mi := range l.e.depts[di].members {
		if x := l.s.Usage[l.tenants[mi].t.Name]; x > 0 && !math.IsInf(x, 0) {
			u += x
		}
	}
	return floatKey(u / l.e.depts[di].d.Weight)
}

// DepartmentUsage is one department's GPU accounting after the plan.
type DepartmentUsage struct {
	Department string
	Tenants    []string
	Reserve    int
	Limit      int // policy.Unlimited when unset
	InUse      int
	Waiting    int
	// With fair share over time: its tenants' decayed borrowed
	// GPU-hours, its weight over the weights of the departments (and
	// tenants in none) that used, hold or wait for GPUs, and its part of
	// their decayed use. All 0 when off.
	UsageGPUHours, FairShare, UsedShare float64
}

// departmentUsage fills Plan.Departments from the tenants' standing.
func (o *output) departmentUsage(fair []standing) {
	if len(o.m.e.depts) == 0 {
		return
	}
	// Fair shares among departments: a counted tenant in no department
	// weighs as a department of its own.
	var weights, usage float64
	counted := make([]bool, len(o.m.e.depts))
	for ti := range fair {
		if !fair[ti].counted {
			continue
		}
		usage += fair[ti].usage
		if di := o.m.e.dept(ti); di < 0 {
			weights += o.m.tenants[ti].t.Weight
		} else if !counted[di] {
			counted[di] = true
			weights += o.m.e.depts[di].d.Weight
		}
	}
	for di := range o.m.e.depts {
		d := &o.m.e.depts[di]
		du := DepartmentUsage{Department: d.d.Name, Reserve: d.d.Reserve, Limit: d.d.Limit}
		var u float64
		var use, waiting int
		for _, ti := range d.members {
			t := &o.m.tenants[ti]
			du.Tenants = append(du.Tenants, t.t.Name)
			use += t.use
			waiting += t.waiting
			if ti < len(fair) {
				u += fair[ti].usage
			}
		}
		du.InUse, du.Waiting = gpusOfUnits(use), gpusOfUnits(waiting)
		if fair != nil {
			du.UsageGPUHours = u / 3600
			if counted[di] && weights > 0 {
				du.FairShare = d.d.Weight / weights
			}
			if usage > 0 {
				du.UsedShare = u / usage
			}
		}
		o.out.Departments = append(o.out.Departments, du)
	}
	slices.SortFunc(o.out.Departments, func(a, b DepartmentUsage) int { return cmp.Compare(a.Department, b.Department) })
}
