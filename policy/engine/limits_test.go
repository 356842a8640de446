package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Work Nomad placed over a tenant's limit (between two plans) is taken
// back from what was placed last; the eviction cap holds for it like for
// any preemption, and a tenant left over its limit is told why.
func TestLimitsWithoutThrash(t *testing.T) {
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["a"] = tenant("a", 0, 2)
	})
	alloc := func(id, tier string, age time.Duration, preempted ...time.Duration) Alloc {
		var times []time.Time
		for _, ago := range preempted {
			times = append(times, t0.Add(-ago))
		}
		return Alloc{ID: id, Job: Job{Ref: JobRef{"a", id}, Tier: tier, Priority: map[string]int{"training": 40, "interactive": 60}[tier],
			Preemptions: times}, Group: "main", NodeID: "n1", GPUIDs: []string{id + "-g"}, StartedAt: t0.Add(-age)}
	}
	tests := []struct {
		name      string
		allocs    []Alloc
		want      []string // jobs preempted, in order
		grace     map[string]time.Duration
		tenantHas string
	}{
		{
			name: "the work placed last goes first, whatever its tier",
			allocs: []Alloc{alloc("old-train", "training", 3*time.Hour), alloc("old-nb", "interactive", 2*time.Hour),
				alloc("new-nb", "interactive", 20*time.Second)},
			want:  []string{"a/new-nb"},
			grace: map[string]time.Duration{"a/new-nb": 2 * time.Minute},
		},
		{
			name: "work at the eviction cap is spared: the next newest goes",
			allocs: []Alloc{alloc("old-train", "training", 3*time.Hour), alloc("old-nb", "interactive", 2*time.Hour),
				alloc("new-nb", "interactive", 5*time.Second, 10*time.Minute, 20*time.Minute)},
			want: []string{"a/old-nb"},
		},
		{
			name: "all at the eviction cap: the tenant stays over its limit and is told why",
			allocs: []Alloc{alloc("old-train", "training", 3*time.Hour, 5*time.Minute, 6*time.Minute),
				alloc("old-nb", "interactive", 2*time.Hour, 5*time.Minute, 6*time.Minute),
				alloc("new-nb", "interactive", 5*time.Second, 10*time.Minute, 20*time.Minute)},
			want:      nil,
			tenantHas: "over its limit of 2 by 1 for now: work holding 3 GPUs is at the eviction cap (2 preemptions an hour)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := Snapshot{Nodes: []Node{{ID: "n1", GPUs: 4}}, Allocs: tc.allocs}
			plan := New(pol).Plan(&snap, t0)
			var got []string
			for _, a := range plan.Actions {
				if a.Kind != Preempt {
					continue
				}
				got = append(got, a.Job.String())
				if a.Reason.Rule != RuleLimit {
					t.Errorf("%s: rule %s, want limit", a, a.Reason.Rule)
				}
				if g, ok := tc.grace[a.Job.String()]; ok && a.Grace != g {
					t.Errorf("%s: grace %s, want %s", a.Job, a.Grace, g)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("preempted %v, want %v", got, tc.want)
			}
			note := ""
			for _, tu := range plan.Tenants {
				if tu.Tenant == "a" {
					note = tu.Note
				}
			}
			if note != tc.tenantHas {
				t.Errorf("tenant note %q, want %q", note, tc.tenantHas)
			}
		})
	}
}
