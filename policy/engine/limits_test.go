package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Work Nomad placed over a tenant's limit (between two plans) is taken
// back from what was placed last; the eviction cap spares a job while
// other work can bring the tenant under its limit, and never lets it stay
// over (issue 29).
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
		reason    string // in every preemption's reason
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
			name: "all at the eviction cap: the limit wins, the work placed last goes and its reason says so",
			allocs: []Alloc{alloc("old-train", "training", 3*time.Hour, 5*time.Minute, 6*time.Minute),
				alloc("old-nb", "interactive", 2*time.Hour, 5*time.Minute, 6*time.Minute),
				alloc("new-nb", "interactive", 5*time.Second, 10*time.Minute, 20*time.Minute)},
			want:   []string{"a/new-nb"},
			reason: "(at the eviction cap of 2 preemptions an hour, preempted 2 times in the last hour: a limit is kept whatever the cap)",
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
				if !strings.Contains(a.Reason.Message, tc.reason) {
					t.Errorf("%s: reason %q lacks %q", a, a.Reason.Message, tc.reason)
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

// A tenant at its limit still runs its higher tier first: the waiting work
// takes the place of the tenant's own lower work, never free GPUs (that
// would exceed the limit) and never another tenant's work.
func TestSwapWithinLimit(t *testing.T) {
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["a"] = tenant("a", 0, 2)
		p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
	})
	run := func(ns, id, tier, node string, gpus int) Alloc {
		ids := []string{}
		for i := range gpus {
			ids = append(ids, id+"-g"+itoa(i))
		}
		return Alloc{ID: id, Job: Job{Ref: JobRef{ns, id}, Tier: tier, Priority: map[string]int{"training": 40, "interactive": 60}[tier]},
			Group: "main", NodeID: node, GPUIDs: ids, StartedAt: t0.Add(-2 * time.Hour)}
	}
	nb := Demand{Job: Job{Ref: JobRef{"a", "nb"}, Tier: "interactive", Priority: 60}, Group: "main", GPUsPerAlloc: 2, Count: 1,
		Since: t0.Add(-time.Minute), Held: true}
	tests := []struct {
		name   string
		allocs []Alloc
		want   string // the victims, or "" for none
		why    string // the waiting reason when nothing is preempted
	}{
		{"its own training makes room", []Alloc{run("a", "train", "training", "n1", 2), run("b", "other", "training", "n2", 2)},
			"a/train", ""},
		{"its own work of the same tier stays", []Alloc{run("a", "nb0", "interactive", "n1", 2)},
			"", "tenant a holds 2 GPUs, limit 2: 2 more would exceed it"},
		// No node has room for nb beside a's training, but GPUs are free:
		// a's training on any node makes room under its limit.
		{"its training on other nodes makes room under its limit", []Alloc{run("a", "t1", "training", "n1", 1), run("a", "t2", "training", "n2", 1)},
			"a/t1,a/t2", ""},
		{"no GPUs free beside the room its training would make", []Alloc{run("a", "t1", "training", "n1", 1), run("b", "o1", "training", "n1", 3),
			run("a", "t2", "training", "n2", 1), run("b", "o2", "training", "n2", 3)},
			"", "tenant a holds 2 GPUs, limit 2: 2 more would exceed it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := Snapshot{Nodes: []Node{{ID: "n1", GPUs: 4}, {ID: "n2", GPUs: 4}}, Allocs: tc.allocs, Waiting: []Demand{nb}}
			plan := New(pol).Plan(&snap, t0)
			var got []string
			resumed := false
			for _, a := range plan.Actions {
				switch a.Kind {
				case Preempt:
					got = append(got, a.Job.String())
				case Resume:
					resumed = true
				}
			}
			if strings.Join(got, ",") != tc.want || resumed != (tc.want != "") {
				t.Errorf("preempted %v (resumed %v), want %q", got, resumed, tc.want)
			}
			for _, a := range plan.Actions {
				if a.Kind == Preempt && a.MoveTo != "" {
					t.Errorf("%s moves to %s: running again would take its tenant back over its limit", a.Job, a.MoveTo)
				}
				if a.Kind == Preempt && a.Job.ID == "t1" {
					mustContain(t, a.Reason.Message, "tier training (priority 40) yields 1 GPU to a/nb/main, tier interactive (priority 60); "+
						"tenant a holds 2 GPUs, limit 2: they make room under it for a/nb/main, which goes on free GPUs")
				}
			}
			for _, w := range plan.Waiting {
				if w.Reason.Message != tc.why {
					t.Errorf("waits: %s, want %q", w.Reason, tc.why)
				}
			}
			if tc.why != "" && len(plan.Waiting) == 0 {
				t.Errorf("admitted, want waiting: %s", tc.why)
			}
		})
	}
}
