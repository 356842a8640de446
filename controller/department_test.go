package controller

import (
	"slices"
	"testing"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// TestDepartmentMetrics: the steward_department_* gauges follow the plan's
// departments; fair share figures only when on, a limit only when set, and
// no series at all for a policy without departments or after stepping
// down.
func TestDepartmentMetrics(t *testing.T) {
	pol := metricsPolicy(t)
	type series struct {
		name  string
		label string
		want  float64
	}
	cases := []struct {
		name   string
		depts  []engine.DepartmentUsage
		want   []series
		absent []string
	}{{
		name:   "no departments",
		absent: []string{"steward_department_gpus_in_use", "steward_department_gpus_reserved", "steward_department_gpus_limit"},
	}, {
		name: "a limited department and an unlimited one",
		depts: []engine.DepartmentUsage{
			{Department: "research", Tenants: []string{"ml", "prod"}, Reserve: 8, Limit: 10, InUse: 12, Waiting: 3},
			{Department: "ops", Tenants: []string{"infra"}, Limit: policy.Unlimited, InUse: 1},
		},
		want: []series{
			{"steward_department_gpus_in_use", "research", 12}, {"steward_department_gpus_reserved", "research", 8},
			{"steward_department_gpus_limit", "research", 10}, {"steward_department_gpus_waiting", "research", 3},
			{"steward_department_gpus_in_use", "ops", 1},
		},
		absent: []string{"steward_department_fair_share", "steward_department_fair_share_usage_gpu_hours"},
	}, {
		name: "fair share over time",
		depts: []engine.DepartmentUsage{{Department: "research", Tenants: []string{"ml"}, Limit: policy.Unlimited,
			UsageGPUHours: 41, FairShare: 0.5, UsedShare: 0.8}},
		want:   []series{{"steward_department_fair_share_usage_gpu_hours", "research", 41}, {"steward_department_fair_share", "research", 0.5}},
		absent: []string{"steward_department_gpus_limit"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			r := &round{now: t0, obs: &Observation{At: t0}, plan: &engine.Plan{Departments: tc.depts}}
			m.observePlan(r, &engine.Snapshot{}, pol, map[jobKey]*JobState{})
			for _, s := range tc.want {
				if got, ok := gaugeValue(t, m.reg, s.name, []string{s.label}); !ok || got != s.want {
					t.Errorf("%s{%s} = %v (present %v), want %v", s.name, s.label, got, ok, s.want)
				}
			}
			for _, name := range tc.absent {
				if n := familySize(t, m.reg, name); n != 0 {
					t.Errorf("%s has %d series, want none", name, n)
				}
			}
			m.stepDown()
			if n := familySize(t, m.reg, "steward_department_gpus_in_use"); n != 0 {
				t.Errorf("%d department series after stepping down, want none", n)
			}
			names := MetricNames()
			if !slices.Contains(names, "steward_department_gpus_in_use") {
				t.Error("MetricNames lacks steward_department_gpus_in_use")
			}
		})
	}
}

// TestDepartmentStatus: the status lists the plan's departments, a
// tenant's view shows its own department only, and the fair share
// figures alone publish no new status.
func TestDepartmentStatus(t *testing.T) {
	r := &round{now: t0, obs: &Observation{At: t0}, plan: &engine.Plan{Departments: []engine.DepartmentUsage{
		{Department: "research", Tenants: []string{"ml", "research"}, Reserve: 8, Limit: 10, InUse: 6, Waiting: 2,
			UsageGPUHours: 12, FairShare: 0.5, UsedShare: 0.6},
		{Department: "ops", Tenants: []string{"infra"}, Limit: policy.Unlimited},
	}}}
	s := buildStatus(metricsPolicy(t), r, nil, nil, nil)
	if len(s.Departments) != 2 || s.Departments[0].Department != "research" || s.Departments[0].Pending != 2 ||
		s.Departments[0].FairShare != 0.5 || s.Departments[1].Limit != -1 {
		t.Fatalf("departments %+v", s.Departments)
	}
	v := namespaceView(&s, "ml", "ml", map[string]bool{"ml": true, "infra": true})
	if len(v.Departments) != 1 || v.Departments[0].Department != "research" {
		t.Errorf("ml's view: departments %+v, want research only", v.Departments)
	}
	drifted := s
	drifted.Departments = slices.Clone(s.Departments)
	drifted.Departments[0].UsageGPUHours = 13
	if stableStatus(s) != stableStatus(drifted) {
		t.Error("a change of a department's decayed usage alone changes the stable status")
	}
}
