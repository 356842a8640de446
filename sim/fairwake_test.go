package sim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestNextFairCrossing: the closed-form crossing of decayed usages (half-life
// 24h; u·λ is the usage as a rate of GPUs, so 6 is six GPUs' worth of
// decayed borrowing).
func TestNextFairCrossing(t *testing.T) {
	const hl = 24 * time.Hour
	lambda := math.Ln2 / hl.Seconds()
	u := func(gpus float64) float64 { return gpus / lambda }
	// at: the crossing where k = e^(−λτ) is num/den.
	at := func(num, den float64) time.Duration {
		return time.Duration(float64(hl) * math.Log2(den/num))
	}
	one := func(usage, borrowed float64, holds, waits bool) fairTenant {
		return fairTenant{usage: usage, borrowed: borrowed, weight: 1, dept: -1, holds: holds, waits: waits}
	}
	cases := []struct {
		name     string
		in       fairCrossing
		want     time.Duration
		wantWake bool
	}{
		{
			// a borrows 8 from nothing, b used 6 and borrows none: a's
			// usage 8(1−k) passes b's 6k at k = 8/14.
			name: "two tenants crossing",
			in:   fairCrossing{tenants: []fairTenant{one(0, 8, true, false), one(u(6), 0, false, true)}},
			want: at(8, 14), wantWake: true,
		},
		{
			name: "weights scale usage: b of weight 2 crosses at half the usage",
			in: fairCrossing{tenants: []fairTenant{one(0, 8, true, false),
				{usage: u(12), weight: 2, dept: -1, waits: true}}},
			want: at(8, 14), wantWake: true,
		},
		{
			name: "never crossing: the tenant ahead keeps borrowing, the other decays",
			in:   fairCrossing{tenants: []fairTenant{one(u(2), 8, true, false), one(u(1), 0, false, true)}},
		},
		{
			// 1(1−k) = 6k at k = 1/7: three half-lives ahead.
			name: "crossing beyond the horizon",
			in:   fairCrossing{tenants: []fairTenant{one(0, 1, true, false), one(u(6), 0, false, true)}},
		},
		{
			name: "no one waits: no order to flip",
			in:   fairCrossing{tenants: []fairTenant{one(0, 8, true, false), one(u(6), 0, true, false)}},
		},
		{
			name: "equal curves never cross",
			in:   fairCrossing{tenants: []fairTenant{one(u(3), 4, true, true), one(u(3), 4, true, true)}},
		},
		{
			// a is already ahead (5 against 4): no order crossing. Its
			// part u_a/U·2 passes 1.5 where 8 − 3k = 3·4k, k = 8/15.
			name: "threshold crossing",
			in: fairCrossing{above: 1.5,
				tenants: []fairTenant{one(u(5), 8, true, false), one(u(4), 0, false, true)}},
			want: at(8, 15), wantWake: true,
		},
		{
			name: "threshold off: the same tenants need no wake",
			in:   fairCrossing{tenants: []fairTenant{one(u(5), 8, true, false), one(u(4), 0, false, true)}},
		},
		{
			// a1 and a2 each cross b only at k = 4/10 (beyond the
			// horizon), but their department's 8(1−k) passes b's 6k at 8/14.
			name: "departments cross before their tenants",
			in: fairCrossing{deptWeights: []float64{1, 1}, tenants: []fairTenant{
				{borrowed: 4, weight: 1, dept: 0, holds: true, waits: true},
				{borrowed: 4, weight: 1, dept: 0, holds: true},
				{usage: u(6), weight: 1, dept: 1, waits: true}}},
			want: at(8, 14), wantWake: true,
		},
		{
			name: "a tenant in no department is a department of its own",
			in: fairCrossing{deptWeights: []float64{1}, tenants: []fairTenant{
				{borrowed: 4, weight: 1, dept: 0, holds: true, waits: true},
				{borrowed: 4, weight: 1, dept: 0, holds: true},
				{usage: u(6), weight: 1, dept: -1, waits: true}}},
			want: at(8, 14), wantWake: true,
		},
		{
			name: "the same tenants without departments: no crossing within the horizon",
			in: fairCrossing{tenants: []fairTenant{
				one(0, 4, true, true), one(0, 4, true, false), one(u(6), 0, false, true)}},
		},
		{
			name: "no half-life: no wake",
			in:   fairCrossing{tenants: []fairTenant{one(0, 8, true, false), one(u(6), 0, false, true)}, halfLife: -1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			switch in.halfLife {
			case 0:
				in.halfLife = hl
			case -1:
				in.halfLife = 0
			}
			in.horizon = hl
			got, ok := nextFairCrossing(in)
			if ok != tc.wantWake || (ok && (got-tc.want).Abs() > time.Second) {
				t.Errorf("crossing in %v (%v), want %v (%v)", got, ok, tc.want, tc.wantWake)
			}
		})
	}
}

// TestFairShareWakeSim: team b fills the one 8-GPU node for two days, then
// team a takes it with 10-day jobs and b waits again. Nothing happens until
// a's jobs end; meanwhile a's decayed usage passes b's (19.4 hours on) and
// then 1.5 times its fair part (40.8 hours on: 8(1−k) = 3·6k, k = 8/26).
// Without a wake-up at that moment nothing plans again and a keeps every
// GPU for eight more days (promotion, off here, would take them back by
// priority instead); with it, b reclaims its share (4 GPUs, the most
// that leaves it borrowing no more than a) within minutes: the plan
// interval and the victims' grace. Without fair-share reclaim the wake
// changes nothing: b waits for a's jobs to end.
func TestFairShareWakeSim(t *testing.T) {
	src := `
tier "training" {
  priority = 40
}
tenant "a" {}
tenant "b" {}
preemption {
  fair_share_half_life = "24h"
  fair_share_reclaim_above = ABOVE
  promote {
    boost = 0
  }
}
`
	const aStart = 48*time.Hour + 10*time.Second
	var jobs []Job
	add := func(tenant string, i int, submit, run time.Duration) {
		jobs = append(jobs, Job{ID: tenant + itoa(i), Line: len(jobs) + 2, User: tenant, Tenant: tenant, Tier: "training",
			GPUs: 1, Allocs: 1, Submit: submit, RunTime: run, IdleAfter: NeverIdle})
	}
	for i := range 8 {
		add("b", i, time.Duration(i)*time.Second, 48*time.Hour)
	}
	for i := range 8 {
		add("a", i, aStart, 10*24*time.Hour)
	}
	for i := range 8 {
		add("b", 8+i, aStart+10*time.Second, 10*24*time.Hour)
	}
	due := aStart + time.Duration(float64(24*time.Hour)*math.Log2(26.0/8))
	cases := []struct {
		name      string
		above     string
		from, to  time.Duration // when b's first waiting job starts
		fairShare int           // fair_share preemptions
	}{
		// 4 at the crossing, 4 more by a's preempted work once b's new
		// jobs took the node as a's others ended (day 12).
		{name: "reclaim due between events", above: "1.5", from: due - time.Minute, to: due + 15*time.Minute, fairShare: 8},
		{name: "ordering alone: b waits for a's jobs to end", above: "0",
			from: aStart + 10*24*time.Hour, to: aStart + 10*24*time.Hour + time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol, diags := policy.ParseBytes("fair.hcl", []byte(strings.ReplaceAll(src, "ABOVE", tc.above)))
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			s, err := newSimulator(jobs, Config{Policy: pol, Nodes: 1, GPUsPerNode: 8, CheckpointEvery: DefaultCheckpointEvery,
				CheckpointCost: DefaultCheckpointCost, PlanInterval: DefaultPlanInterval}, Steward)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.run(); err != nil {
				t.Fatal(err)
			}
			first := s.jobs[16].firstStart
			for i := 17; i < len(s.jobs); i++ {
				first = min(first, s.jobs[i].firstStart)
			}
			if got := first; got < tc.from || got > tc.to {
				t.Errorf("b's waiting work first started at %v, want within [%v, %v]", got, tc.from, tc.to)
			}
			r := s.m.result(s)
			if got := r.PreemptionsByRule["fair_share"]; got != tc.fairShare {
				t.Errorf("fair_share preemptions %d, want %d (by rule %v)", got, tc.fairShare, r.PreemptionsByRule)
			}
			if r.WastedPreemptions != 0 || r.CapBreaches != 0 {
				t.Errorf("wasted preemptions %d, cap breaches %d; want none", r.WastedPreemptions, r.CapBreaches)
			}
		})
	}
}
