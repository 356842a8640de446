package engine

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestTierPriority: a job's Nomad priority follows its tier's; only a job
// Steward promoted may sit above it, and by no more than the boost.
func TestTierPriority(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		tier     string
		priority int
		promoted bool
		want     int // new priority; 0: no action
		reason   string
	}{
		{"Nomad's default priority is corrected to the tier's", "training", 50, false, 40,
			"tier training runs at priority 40; the job had priority 50"},
		{"at the tier's priority: nothing to do", "training", 40, false, 0, ""},
		{"promoted within the boost: kept", "training", 50, true, 0, ""},
		{"promoted beyond the boost: corrected", "training", 70, true, 40,
			"tier training runs at priority 40; the job had priority 70"},
		{"below the tier: corrected", "interactive", 30, false, 60,
			"tier interactive runs at priority 60; the job had priority 30"},
		{"unknown tier gets the default tier's, and is told so", "gold", 50, false, 40,
			`tier "gold" is not defined: runs as training; tier training runs at priority 40; the job had priority 50`},
		{"unknown tier with a suggestion", "infrence", 90, false, 40,
			`tier "infrence" is not defined (did you mean inference?): runs as training; tier training runs at priority 40; the job had priority 90`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(testPolicy(nil))
			job := Job{Ref: JobRef{Namespace: "ml", ID: "j"}, Tier: tc.tier, Priority: tc.priority, Promoted: tc.promoted}
			s := &Snapshot{
				Nodes:  []Node{{ID: "n1", NodePool: "default", GPUs: 4}},
				Allocs: []Alloc{{ID: "a1", Job: job, Group: "main", NodeID: "n1", GPUIDs: []string{"g0"}, StartedAt: now.Add(-time.Hour)}},
			}
			plan := e.Plan(s, now)
			var got []Action
			for _, a := range plan.Actions {
				if a.Kind == SetPriority {
					got = append(got, a)
				}
			}
			if tc.want == 0 {
				if len(got) != 0 {
					t.Fatalf("want no set-priority, got %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Priority != tc.want || got[0].Reason.Rule != RuleTier || got[0].Reason.Message != tc.reason {
				t.Fatalf("want one set-priority to %d (%q), got %v", tc.want, tc.reason, got)
			}
		})
	}
}

// researchOnly: research may use interactive and training (default
// training); platform interactive only, with no default_tier.
func researchOnly(p *policy.Policy) {
	p.Tenants["research"] = &policy.Tenant{Name: "research", Namespace: "research", Reserve: 4, Limit: policy.Unlimited,
		Weight: 1, Tiers: []string{"interactive", "training"}, DefaultTier: "training"}
	p.Tenants["platform"] = &policy.Tenant{Name: "platform", Namespace: "platform", Reserve: 2, Limit: policy.Unlimited,
		Weight: 1, Tiers: []string{"interactive"}}
}

// TestTierPerTenant: the engine resolves a job's tier in its tenant and
// never trusts the tier a job names; the set-priority says what was asked
// for and what it got.
func TestTierPerTenant(t *testing.T) {
	cases := []struct {
		name      string
		namespace string
		tier      string
		priority  int
		want      int // new priority; 0: no action
		reason    string
	}{
		{"a tier the tenant may not use runs as its default tier", "research", "inference", 90, 40,
			"tier inference is not allowed for tenant research: runs as training; tier training runs at priority 40; the job had priority 90"},
		{"an allowed tier is honoured", "research", "interactive", 60, 0, ""},
		{"no default_tier: the lowest tier it may use", "platform", "build", 80, 60,
			"tier build is not allowed for tenant platform: runs as interactive; tier interactive runs at priority 60; the job had priority 80"},
		{"a namespace no tenant names may use every tier", "elsewhere", "build", 80, 0, ""},
		{"a typo in a restricted tenant", "research", "traning", 50, 40,
			`tier "traning" is not defined (did you mean training?): runs as training; tier training runs at priority 40; the job had priority 50`},
	}
	e := New(testPolicy(researchOnly))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := Job{Ref: JobRef{Namespace: tc.namespace, ID: "j"}, Tier: tc.tier, Priority: tc.priority}
			s := &Snapshot{
				Nodes:   []Node{{ID: "n1", NodePool: "default", GPUs: 4}},
				Waiting: []Demand{{Job: job, Group: "main", GPUsPerAlloc: 1, Count: 1, Since: t0}},
			}
			var got []Action
			for _, a := range e.Plan(s, t0).Actions {
				if a.Kind == SetPriority {
					got = append(got, a)
				}
			}
			if tc.want == 0 {
				if len(got) != 0 {
					t.Fatalf("want no set-priority, got %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Priority != tc.want || got[0].Reason.Message != tc.reason {
				t.Fatalf("want one set-priority to %d (%q), got %v", tc.want, tc.reason, got)
			}
		})
	}
}

// TestTenantTierTable: the engine's per-tenant table agrees with
// policy.TenantTier for every tenant and every value a job may name.
func TestTenantTierTable(t *testing.T) {
	p := testPolicy(researchOnly)
	e := New(p)
	st := newState(e, &Snapshot{}, t0)
	values := append(slices.Collect(maps.Keys(p.Tiers)), "", "gold", "infrence")
	for _, ns := range []string{"research", "platform", "elsewhere"} {
		ti := st.tenantOf(ns)
		for _, v := range values {
			want, _ := p.TenantTier(st.tenants[ti].t, v)
			if got := e.tiers[e.tierFor(ti, v)].name; got != want {
				t.Errorf("tenant %s, tier %q: engine resolves %s, policy %s", ns, v, got, want)
			}
		}
	}
}
