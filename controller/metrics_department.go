package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// departmentSeries are the per-department gauges (policy.Department),
// beside the per-tenant ones: set by the leader from each plan, dropped
// with the leader's other gauges when it steps down. A policy without
// departments exports none.
type departmentSeries struct {
	deptInUse    *prometheus.GaugeVec // department
	deptReserved *prometheus.GaugeVec // department
	deptLimit    *prometheus.GaugeVec // department
	deptWaiting  *prometheus.GaugeVec // department
	deptUsage    *prometheus.GaugeVec // department
	deptShare    *prometheus.GaugeVec // department
}

func (m *metrics) newDepartments() {
	gauge := func(name, help string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"department"})
		m.register(v)
		return v
	}
	d := &m.departmentSeries
	d.deptInUse = gauge("steward_department_gpus_in_use", "GPUs a department's tenants hold together.")
	d.deptReserved = gauge("steward_department_gpus_reserved", "GPUs reserved to a department's tenants together (its reserve).")
	d.deptLimit = gauge("steward_department_gpus_limit",
		"Most GPUs a department's tenants may hold together (no series for a department without a limit).")
	d.deptWaiting = gauge("steward_department_gpus_waiting", "GPUs a department's waiting work wants.")
	d.deptUsage = gauge("steward_department_fair_share_usage_gpu_hours",
		"A department's decayed use of borrowed GPUs (its tenants' together), in GPU-hours (preemption.fair_share_half_life).")
	d.deptShare = gauge("steward_department_fair_share",
		"A department's fair share (0..1): its weight over the weights of the departments (and tenants in none) that used, hold or wait for GPUs.")
}

// departmentGauges lists the department gauges, for resets.
func (m *metrics) departmentGauges() []*prometheus.GaugeVec {
	d := &m.departmentSeries
	return []*prometheus.GaugeVec{d.deptInUse, d.deptReserved, d.deptLimit, d.deptWaiting, d.deptUsage, d.deptShare}
}

// observeDepartments sets the department gauges from a plan.
func (m *metrics) observeDepartments(plan *engine.Plan) {
	for _, v := range m.departmentGauges() {
		v.Reset()
	}
	if plan == nil {
		return
	}
	for _, d := range plan.Departments {
		m.deptInUse.WithLabelValues(d.Department).Set(float64(d.InUse))
		m.deptReserved.WithLabelValues(d.Department).Set(float64(d.Reserve))
		if d.Limit != policy.Unlimited {
			m.deptLimit.WithLabelValues(d.Department).Set(float64(d.Limit))
		}
		m.deptWaiting.WithLabelValues(d.Department).Set(float64(d.Waiting))
		if d.FairShare > 0 {
			m.deptUsage.WithLabelValues(d.Department).Set(d.UsageGPUHours)
			m.deptShare.WithLabelValues(d.Department).Set(d.FairShare)
		}
	}
}
