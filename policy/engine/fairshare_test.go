package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestFairShareOrder: which of two tenants' waiting work, ranked equal by
// tier, reserve and priority, gets the one free GPU, by the GPUs they
// borrow now (fair share over time off) or by their decayed usage per
// unit of weight (on).
func TestFairShareOrder(t *testing.T) {
	const hour = 3600.0
	job := func(ns, id string) Job { return Job{Ref: JobRef{ns, id}, Tier: "training", Priority: 40} }
	cases := []struct {
		name     string
		halfLife time.Duration
		weightA  float64
		usage    map[string]float64 // GPU-seconds
		want     string             // the job resumed
	}{
		{
			name: "off: the tenant borrowing less now goes first whatever it used before",
			// a holds nothing now, b holds 1: a goes first, though it
			// had the spare GPUs all day.
			usage: map[string]float64{"a": 100 * hour}, weightA: 1,
			want: "a/w",
		},
		{
			name: "on: the tenant that used less goes first though it borrows more now", halfLife: 24 * time.Hour,
			usage: map[string]float64{"a": 100 * hour}, weightA: 1,
			want: "b/w",
		},
		{
			name: "on: equal usage: the GPUs borrowed now decide", halfLife: 24 * time.Hour,
			usage: map[string]float64{"a": 10 * hour, "b": 10 * hour}, weightA: 1,
			want: "a/w",
		},
		{
			name: "on: usage counts per unit of weight", halfLife: 24 * time.Hour,
			// a used 100 GPU-hours at weight 4 (25 per unit), b 30 at 1.
			usage: map[string]float64{"a": 100 * hour, "b": 30 * hour}, weightA: 4,
			want: "a/w",
		},
		{
			name: "on: no usage known yet: the GPUs borrowed now decide", halfLife: 24 * time.Hour,
			weightA: 1,
			want:    "a/w",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(testPolicy(func(p *policy.Policy) {
				p.Tenants["a"] = tenant("a", 0, policy.Unlimited)
				p.Tenants["a"].Weight = tc.weightA
				p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
				p.Preemption.FairShareHalfLife = tc.halfLife
			}))
			s := &Snapshot{
				Nodes: []Node{{ID: "n0", NodePool: "default", GPUs: 2}},
				Allocs: []Alloc{{ID: "b-run", Job: job("b", "run"), Group: "main", NodeID: "n0",
					GPUIDs: []string{"g0"}, StartedAt: t0}},
				Waiting: []Demand{
					{Job: job("a", "w"), Group: "main", GPUsPerAlloc: 1, Count: 1, Since: t0, Held: true},
					{Job: job("b", "w"), Group: "main", GPUsPerAlloc: 1, Count: 1, Since: t0, Held: true},
				},
				Usage: tc.usage,
			}
			plan := e.Plan(s, t0.Add(time.Minute))
			var resumed []string
			for _, a := range plan.Actions {
				if a.Kind == Resume {
					resumed = append(resumed, a.Job.String())
				}
			}
			if len(resumed) != 1 || resumed[0] != tc.want {
				t.Fatalf("resumed %v, want [%s]; plan %v", resumed, tc.want, plan.Actions)
			}
		})
	}
}

// TestFairShareReasons: a tenant above its fair share that waits for
// capacity is told where it stands, with the numbers; one within its share,
// or with fair share over time off, is not. Plan.Tenants carries the
// standings.
func TestFairShareReasons(t *testing.T) {
	const hour = 3600.0
	cases := []struct {
		name     string
		halfLife time.Duration
		usage    map[string]float64
		want     string // the end of a/w's reason
		standing [2]float64
	}{
		{
			name: "above its share", halfLife: 24 * time.Hour,
			usage: map[string]float64{"a": 30 * hour, "b": 10 * hour},
			want: "; tenant a used 1.5× its fair share over time (30.0 of 40.0 decayed borrowed GPU-hours, " +
				"fair share 50% at weight 1; half-life 24h): tenants that used less go first",
			standing: [2]float64{0.5, 0.75},
		},
		{
			name: "within its share", halfLife: 24 * time.Hour,
			usage:    map[string]float64{"a": 10 * hour, "b": 30 * hour},
			want:     "(holds 0, reserve 0)",
			standing: [2]float64{0.5, 0.25},
		},
		{
			name:  "off",
			usage: map[string]float64{"a": 30 * hour},
			want:  "(holds 0, reserve 0)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(testPolicy(func(p *policy.Policy) {
				p.Tenants["a"] = tenant("a", 0, policy.Unlimited)
				p.Tenants["b"] = tenant("b", 1, policy.Unlimited)
				p.Preemption.FairShareHalfLife = tc.halfLife
			}))
			s := &Snapshot{
				Nodes: []Node{{ID: "n0", NodePool: "default", GPUs: 1}},
				Allocs: []Alloc{{ID: "b-run", Job: Job{Ref: JobRef{"b", "serve"}, Tier: "inference", Priority: 90},
					Group: "main", NodeID: "n0", GPUIDs: []string{"g0"}, StartedAt: t0}},
				Waiting: []Demand{{Job: Job{Ref: JobRef{"a", "w"}, Tier: "training", Priority: 40}, Group: "main",
					GPUsPerAlloc: 1, Count: 1, Since: t0, Held: true}},
				Usage: tc.usage,
			}
			plan := e.Plan(s, t0.Add(time.Minute))
			if len(plan.Waiting) != 1 || !strings.HasSuffix(plan.Waiting[0].Reason.Message, tc.want) {
				t.Fatalf("waiting %v, want a reason ending %q", plan.Waiting, tc.want)
			}
			for _, tu := range plan.Tenants {
				if tu.Tenant == "a" && (tu.FairShare != tc.standing[0] || tu.UsedShare != tc.standing[1]) {
					t.Errorf("tenant a: fair share %v, used %v; want %v", tu.FairShare, tu.UsedShare, tc.standing)
				}
			}
		})
	}
}

// TestDecayUsage: usage halves every half-life, accrues at the borrowed
// rate, and rounds of any length account alike.
func TestDecayUsage(t *testing.T) {
	const h = 24 * time.Hour
	cases := []struct {
		name string
		got  float64
		want float64
	}{
		{"halves in a half-life", DecayUsage(1000, 0, h, h), 500},
		{"off keeps it", DecayUsage(1000, 4, h, 0), 1000},
		{"a short round accrues about its GPU-seconds", math.Round(DecayUsage(0, 2, time.Minute, h)), 120},
		{"two half rounds are one round", DecayUsage(DecayUsage(300, 3, 30*time.Minute, h), 3, 30*time.Minute, h),
			DecayUsage(300, 3, time.Hour, h)},
		{"held for ever it tends to borrowed / lambda", DecayUsage(0, 1, 100*h, h), h.Seconds() / math.Ln2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if math.Abs(tc.got-tc.want) > 1e-6*math.Max(1, tc.want) && math.Abs(tc.got-tc.want) > 0.01 {
				t.Fatalf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

// TestFairShareOffKeepsPlans: with fair share over time off, usage in the
// snapshot changes nothing: the plan of a generated cluster is the same
// with and without it.
func TestFairShareOffKeepsPlans(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run("seed "+itoa(int(seed)), func(t *testing.T) {
			gen := func() *Snapshot {
				return genCluster(rand.New(rand.NewPCG(seed, 7)), 50, 8, 500, 200, 8, t0)
			}
			e := New(genPolicy(8, 20, 80))
			without := e.Plan(gen(), t0)
			s := gen()
			s.Usage = map[string]float64{"team0": 1e6, "team3": 5, "team7": 3e5}
			with := e.Plan(s, t0)
			if a, b := fmt.Sprint(without.Actions, without.Waiting), fmt.Sprint(with.Actions, with.Waiting); a != b {
				t.Fatalf("usage changed the plan with fair share off:\nwithout: %s\nwith:    %s", a, b)
			}
		})
	}
}
