package command

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/controller"
)

func TestFormatStatus(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	s := &controller.Status{Updated: now.Add(-2 * time.Second), Leader: "ctl", Policy: "4 tiers, 3 tenants, 1 pool, 2 idle rules",
		IdleGPUs: 4,
		Tenants:  []controller.TenantStatus{{Tenant: "research", Reserve: 4, Limit: 6, InUse: 6, Borrowed: 2}, {Tenant: "platform", Limit: -1}},
		Held: []controller.HeldStatus{{Job: "research/train", Group: "work", Count: 1, GPUs: 4, State: "preempted", Since: now,
			Reason: "tenant research holds 8 GPUs, reserve 4: reclaiming 4 for product/notebook/work"}},
		Idle: []controller.IdleStatus{{Job: "product/nb", Alloc: "0123456789ab", GPUs: 4, Minutes: 16, Util: 2}},
		Decisions: []controller.Decision{{At: now, Kind: "preempt", Job: "research/train", GPUs: 4, Reason: "reclaiming 4"},
			{At: now, Kind: "set-priority", Job: "research/nb", Reason: "tier interactive has priority 60"},
			{At: now, Kind: "pause", Job: "research/big", GPUs: 2, Reason: "paused by an operator"}},
		Warnings: []controller.JobWarning{{Job: "research/nb", Problem: `tier "infrence" is not defined (did you mean inference?): runs as training`}},
	}
	s.Tenants = append(s.Tenants, controller.TenantStatus{Tenant: "product", Reserve: 2, Limit: 4, InUse: 6})
	out := FormatStatus(s, now, false)
	for _, want := range []string{
		"Leader    = ctl", "Idle GPUs = 4", "Updated   = 2s ago",
		"research  4        6      6       2         0",
		"platform  0        none",
		"research/train  work   1       4     preempted",
		"product/nb  01234567  4     16m   2%",
		"preempt       research/train  4     reclaiming 4",
		"set-priority  research/nb     -     tier interactive",
		"pause         research/big    2     paused by an operator",
		"product   2        4      6       0         0        OVER LIMIT by 2",
		"Job Warnings", `research/nb  tier "infrence" is not defined (did you mean inference?): runs as training`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// TestFormatStatusFairShare: with fair share over time, each tenant's
// decayed use of borrowed GPUs, its part of it and its fair share.
func TestFormatStatusFairShare(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	s := &controller.Status{Updated: now, Leader: "ctl", Tenants: []controller.TenantStatus{
		{Tenant: "ta", Limit: -1, InUse: 2, Borrowed: 2, UsageGPUHours: 30.04, UsedShare: 0.75, FairShare: 0.5},
		{Tenant: "tb", Limit: -1, Pending: 3, UsageGPUHours: 10, UsedShare: 0.25, FairShare: 0.5},
	}}
	out := FormatStatus(s, now, false)
	for _, want := range []string{
		"Used (decayed GPU-h)  Used Share  Fair Share",
		"ta      0        none   2       2         0        30.0                  75%         50%",
		"tb      0        none   0       0         3        10.0                  25%         50%",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// TestFormatStatusDepartments: a Departments table after the tenants' when
// the policy has departments (none otherwise), with fair share figures
// when on and a department over its limit marked.
func TestFormatStatusDepartments(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		depts   []controller.DepartmentStatus
		want    []string
		wantNot []string
	}{
		{name: "no departments", wantNot: []string{"Departments"}},
		{
			name: "one over its limit and one unlimited",
			depts: []controller.DepartmentStatus{
				{Department: "research", Tenants: []string{"nlp", "vision"}, Reserve: 8, Limit: 10, InUse: 12, Pending: 2},
				{Department: "ops", Tenants: []string{"infra"}, Limit: -1, InUse: 1},
			},
			want: []string{"Departments\nDepartment  Tenants      Reserve  Limit  In Use  Pending  Note",
				"research    nlp, vision  8        10     12      2        OVER LIMIT by 2",
				"ops         infra        0        none   1       0"},
		},
		{
			name: "fair share over time",
			depts: []controller.DepartmentStatus{{Department: "research", Tenants: []string{"nlp", "vision"}, Reserve: 8, Limit: -1,
				InUse: 4, UsageGPUHours: 41.25, UsedShare: 0.8, FairShare: 0.5}},
			want: []string{"Used (decayed GPU-h)  Used Share  Fair Share",
				"research    nlp, vision  8        none   4       0        41.2                  80%         50%"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &controller.Status{Updated: now, Leader: "ctl", Departments: tc.depts,
				Tenants: []controller.TenantStatus{{Tenant: "nlp", Limit: -1}}}
			out := FormatStatus(s, now, false)
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("status lacks %q:\n%s", want, out)
				}
			}
			for _, no := range tc.wantNot {
				if strings.Contains(out, no) {
					t.Errorf("status has %q:\n%s", no, out)
				}
			}
		})
	}
}
