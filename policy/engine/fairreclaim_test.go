package engine_test

import (
	"fmt"
	"github.com/gpu-steward/steward/policy/engine"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestFairShareReclaim: tenant a waits to borrow one GPU of a full 4-GPU
// node; tenant b holds the rest. With fair_share_reclaim_above, a takes
// one of b's GPUs when b used far more than its fair share over time, as
// long as a then borrows no more per unit of weight than b keeps, and the
// usual guards allow it.
func TestFairShareReclaim(t *testing.T) {
	const hour = 3600.0
	type holder struct {
		tenant string
		tier   string
		n      int
	}
	cases := []struct {
		name    string
		mod     func(p *policy.Policy)
		holds   []holder
		usage   map[string]float64
		started time.Duration   // b's allocations' age at the plan
		recent  []time.Duration // b's jobs' preemptions, before the plan
		life    int             // b's jobs' preemptions over their life
		boosted bool            // b's jobs run promoted (priority 50)
		per     int             // GPUs per allocation; 0: 1
		want    string          // the preemption's reason; "" for none
	}{
		{
			name:  "reclaims from a tenant far above its share",
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"b": 40 * hour},
			want: "fair_share: tenant b used 2.0× its fair share over time (40.0 of 40.0 decayed borrowed GPU-hours, " +
				"fair share 50% at weight 1; half-life 24h; reclaim above 1.5×) and borrows 4 GPUs (holds 4, reserve 0): " +
				"reclaiming 1 GPU for a/w/main (tenant a used 0.0× its fair share and borrows 0 GPUs: holds 0, reserve 0, weight 1)",
		},
		{
			name:  "within the margin: no reclaim",
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"a": 10 * hour, "b": 12 * hour},
		},
		{
			name:  "shares meet: reclaims while the waiting tenant then borrows no more than the other keeps",
			holds: []holder{{"a", "training", 1}, {"b", "training", 3}}, usage: map[string]float64{"a": 2 * hour, "b": 40 * hour},
			want: "fair_share: tenant b used 1.9× its fair share over time (40.0 of 42.0 decayed borrowed GPU-hours, " +
				"fair share 50% at weight 1; half-life 24h; reclaim above 1.5×) and borrows 3 GPUs (holds 3, reserve 0): " +
				"reclaiming 1 GPU for a/w/main (tenant a used 0.1× its fair share and borrows 1 GPU: holds 1, reserve 0, weight 1)",
		},
		{
			name:  "no swap back: the waiting tenant would then borrow more than the other keeps",
			holds: []holder{{"a", "training", 2}, {"b", "training", 2}}, usage: map[string]float64{"b": 40 * hour},
		},
		{
			name:  "only borrowed GPUs: a tenant within its reserve keeps them",
			mod:   func(p *policy.Policy) { p.Tenants["b"].Reserve = 3 },
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"b": 40 * hour},
		},
		{
			name:  "weight: three quarters of the use at weight 3 of 4 is not far above its share",
			mod:   func(p *policy.Policy) { p.Tenants["b"].Weight = 3 },
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"a": 13 * hour, "b": 40 * hour},
		},
		{
			name:  "respects the eviction cap",
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"b": 40 * hour},
			recent: []time.Duration{-50 * time.Minute, -20 * time.Minute},
		},
		{
			name:  "respects max_per_job",
			mod:   func(p *policy.Policy) { p.Preemption.MaxPerJob = 5 },
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"b": 40 * hour},
			life: 5,
		},
		{
			name:  "respects min_runtime",
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"b": 40 * hour},
			started: 5 * time.Minute,
		},
		{
			name:  "a promoted job of a tier no higher than the waiting work's is a victim all the same",
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"b": 40 * hour}, boosted: true,
			want: "fair_share: tenant b used 2.0× its fair share over time (40.0 of 40.0 decayed borrowed GPU-hours, " +
				"fair share 50% at weight 1; half-life 24h; reclaim above 1.5×) and borrows 4 GPUs (holds 4, reserve 0): " +
				"reclaiming 1 GPU for a/w/main (tenant a used 0.0× its fair share and borrows 0 GPUs: holds 0, reserve 0, weight 1)",
		},
		{
			name:  "never work of a higher tier",
			holds: []holder{{"b", "interactive", 4}}, usage: map[string]float64{"b": 40 * hour},
		},
		{
			// Issue 31: b, left with 2 of its pool reserve of 3, would
			// reclaim them straight back in the pool.
			name: "a pool reserve keeps the victim whole: taking 2 of b's 4 would leave it below its reserve of 3",
			mod: func(p *policy.Policy) {
				p.Pools["all"] = &policy.Pool{Name: "all", NodePool: "default"}
				p.Tenants["b"].Quotas = map[string]*policy.Quota{"all": {Reserve: 3, Limit: policy.Unlimited}}
			},
			holds: []holder{{"b", "training", 2}}, per: 2, usage: map[string]float64{"b": 40 * hour},
		},
		{
			name: "a department reserve keeps the victim whole: taking 2 of b's 4 would leave it below its reserve of 3",
			mod: func(p *policy.Policy) {
				p.Tenants["c"] = tenant("c", 0, policy.Unlimited)
				p.Departments = map[string]*policy.Department{"d": {Name: "d", Tenants: []string{"b", "c"}, Reserve: 3,
					Limit: policy.Unlimited, Weight: 1}}
			},
			holds: []holder{{"b", "training", 2}}, per: 2, usage: map[string]float64{"b": 40 * hour},
		},
		{
			name: "a pool reserve gives up its surplus: taking 1 of b's 4 leaves it at its reserve of 3",
			mod: func(p *policy.Policy) {
				p.Pools["all"] = &policy.Pool{Name: "all", NodePool: "default"}
				p.Tenants["b"].Quotas = map[string]*policy.Quota{"all": {Reserve: 3, Limit: policy.Unlimited}}
			},
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"b": 40 * hour},
			want: "fair_share: tenant b used 2.0× its fair share over time (40.0 of 40.0 decayed borrowed GPU-hours, " +
				"fair share 50% at weight 1; half-life 24h; reclaim above 1.5×) and borrows 4 GPUs (holds 4, reserve 0): " +
				"reclaiming 1 GPU for a/w/main (tenant a used 0.0× its fair share and borrows 0 GPUs: holds 0, reserve 0, weight 1)",
		},
		{
			name:  "off without fair_share_reclaim_above",
			mod:   func(p *policy.Policy) { p.Preemption.FairShareReclaimAbove = 0 },
			holds: []holder{{"b", "training", 4}}, usage: map[string]float64{"b": 40 * hour},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := fairTwoTenants(1.5, tc.mod)
			e := engine.New(pol)
			now := t0.Add(2 * time.Hour)
			age := tc.started
			if age == 0 {
				age = time.Hour
			}
			s := &engine.Snapshot{Nodes: []engine.Node{{ID: "n0", NodePool: "default", GPUs: 4}}, Usage: tc.usage}
			g := 0
			for _, h := range tc.holds {
				for i := 0; i < h.n; i++ {
					job := engine.Job{Ref: engine.JobRef{h.tenant, fmt.Sprintf("run%d", i)}, Tier: h.tier, Priority: pol.Tiers[h.tier].Priority,
						PreemptionsTotal: tc.life}
					if tc.boosted && h.tenant == "b" {
						job.Promoted, job.Priority = true, job.Priority+10
					}
					for _, d := range tc.recent {
						job.Preemptions = append(job.Preemptions, now.Add(d))
					}
					var ids []string
					for range max(tc.per, 1) {
						ids = append(ids, fmt.Sprintf("g%d", g))
						g++
					}
					s.Allocs = append(s.Allocs, engine.Alloc{ID: fmt.Sprintf("%s-%d", h.tenant, i), Job: job, Group: "main", NodeID: "n0",
						GPUIDs: ids, StartedAt: now.Add(-age)})
				}
			}
			s.Waiting = []engine.Demand{{Job: engine.Job{Ref: engine.JobRef{"a", "w"}, Tier: "training", Priority: 40}, Group: "main",
				GPUsPerAlloc: 1, Count: 1, Since: now.Add(-time.Minute), Held: true}}
			plan := e.Plan(s, now)
			var got []string
			for _, a := range plan.Actions {
				if a.Kind == engine.Preempt {
					got = append(got, a.Reason.String())
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("preempted %v; want none", got)
			case tc.want != "" && (len(got) != 1 || got[0] != tc.want):
				t.Fatalf("preempted %q\nwant [%q]", got, tc.want)
			case tc.want == "" && (len(plan.Waiting) != 1 || strings.Contains(plan.Waiting[0].Reason.Message, "reclaiming")):
				t.Fatalf("waiting %v; want a/w waiting", plan.Waiting)
			}
		})
	}
}

// TestFairShareReclaimStory: tenant b fills an 8-GPU node with long 1-GPU
// jobs for a day; then tenant a submits as many. Planning every ten
// minutes for six hours, with usage accounted as the controller does, a
// takes GPUs from b by fair share until the two hold alike, and then no
// more: no GPU goes from a to b (though b's preempted jobs are promoted
// after an hour's wait), and no job of b is preempted twice. (A promoted
// job of a may take one of a's own: the promotion's business.)
func TestFairShareReclaimStory(t *testing.T) {
	h := newHarness(t, fairTwoTenants(1.5, nil))
	h.node("n1", "default", 8)
	usage := map[string]float64{}
	held := func(ns string) float64 {
		n := 0.0
		for _, a := range h.allocs() {
			if a.Job.Ref.Namespace == ns {
				n += float64(len(a.GPUIDs))
			}
		}
		return n
	}
	step := func(d time.Duration) *engine.Plan {
		for _, ns := range []string{"a", "b"} {
			usage[ns] = engine.DecayUsage(usage[ns], held(ns), d, 24*time.Hour)
		}
		h.advance(d)
		h.usage = usage
		return h.step()
	}
	for i := range 8 {
		h.submit("b", fmt.Sprintf("b%d", i), "training", 1, 1)
	}
	step(time.Minute)
	for range 24 * 6 {
		step(10 * time.Minute)
	}
	for i := range 8 {
		h.submit("a", fmt.Sprintf("a%d", i), "training", 1, 1)
	}
	preempted := map[string]int{}
	for range 6 * 6 {
		for _, a := range step(10 * time.Minute).Actions {
			if a.Kind != engine.Preempt {
				continue
			}
			if a.Job.Namespace == a.For.Namespace {
				continue
			}
			preempted[a.Job.String()]++
			if a.Job.Namespace != "b" || a.Reason.Rule != engine.RuleFairShare || preempted[a.Job.String()] > 1 {
				t.Fatalf("at %s: %s (preemptions so far %v)", h.now.Sub(t0), a, preempted)
			}
		}
	}
	if held("a") != 4 || held("b") != 4 || len(preempted) != 4 {
		t.Fatalf("a holds %v, b %v, preempted %v; want 4, 4 and four of b's jobs once each", held("a"), held("b"), preempted)
	}
}

// TestFairShields: tenant b's job, promoted after a long wait (training at
// priority 50), waits for a full 4-GPU node where tenant a runs training
// at 40. By priority it would take one of a's GPUs; with fair-share reclaim
// on, not while b is a tenant a could reclaim from by fair share: else
// the promotion of a fair-share victim takes the GPUs straight back.
func TestFairShields(t *testing.T) {
	const hour = 3600.0
	cases := []struct {
		name  string
		above float64
		usage map[string]float64
		want  engine.Rule // the preemption's rule; "" for none
	}{
		{name: "far above its share: the promotion does not take from a", above: 1.5, usage: map[string]float64{"b": 40 * hour}},
		{name: "within its share: the promotion takes by priority", above: 1.5, usage: map[string]float64{"a": 10 * hour, "b": 12 * hour},
			want: engine.RulePriority},
		{name: "fair-share reclaim off: priorities as before", usage: map[string]float64{"b": 40 * hour}, want: engine.RulePriority},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := engine.New(fairTwoTenants(tc.above, nil))
			now := t0.Add(2 * time.Hour)
			s := &engine.Snapshot{Nodes: []engine.Node{{ID: "n0", NodePool: "default", GPUs: 4}}, Usage: tc.usage}
			for i := range 4 {
				s.Allocs = append(s.Allocs, engine.Alloc{ID: fmt.Sprintf("a-%d", i), Job: engine.Job{Ref: engine.JobRef{"a", fmt.Sprintf("run%d", i)},
					Tier: "training", Priority: 40}, Group: "main", NodeID: "n0", GPUIDs: []string{fmt.Sprintf("g%d", i)},
					StartedAt: now.Add(-time.Hour)})
			}
			s.Waiting = []engine.Demand{{Job: engine.Job{Ref: engine.JobRef{"b", "w"}, Tier: "training", Priority: 50, Promoted: true}, Group: "main",
				GPUsPerAlloc: 1, Count: 1, Since: now.Add(-90 * time.Minute), Held: true}}
			plan := e.Plan(s, now)
			var got []engine.Rule
			for _, a := range plan.Actions {
				if a.Kind == engine.Preempt {
					got = append(got, a.Reason.Rule)
				}
			}
			if tc.want == "" && len(got) > 0 || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
				t.Fatalf("preempted by %v, want %q; plan %v", got, tc.want, plan.Actions)
			}
		})
	}
}

// fairTwoTenants is testPolicy with tenants a and b (no reserve, no limit),
// fair share over time (a day's half-life) and fair-share reclaim above
// the factor above (0: off), then mod.
func fairTwoTenants(above float64, mod func(p *policy.Policy)) *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		p.Tenants["a"] = tenant("a", 0, policy.Unlimited)
		p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
		p.Preemption.FairShareHalfLife = 24 * time.Hour
		p.Preemption.FairShareReclaimAbove = above
		if mod != nil {
			mod(p)
		}
	})
}
