package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestFairShareAccounting: the controller's decayed usage round by round,
// what it saves, when, and what a new leader loads.
func TestFairShareAccounting(t *testing.T) {
	const halfLife = 24 * time.Hour
	type round struct {
		after    time.Duration                // since the last round
		borrowed map[string]int               // tenant → GPUs held beyond its reserve after this round's plan
		want     map[string]float64           // usage (GPU-seconds) in this round's snapshot
		saves    int                          // writes of the variable so far
		check    func(*testing.T, *fakeNomad) // after the round
	}
	accrue := func(u float64, gpus int, d time.Duration) float64 {
		return engine.DecayUsage(u, float64(gpus), d, halfLife)
	}
	cases := []struct {
		name   string
		saved  *fairShareDoc // in the variable before the lead term
		rounds []round
	}{
		{
			name: "borrowed GPUs accrue from one round to the next and are saved at most every 10 minutes",
			rounds: []round{
				{borrowed: map[string]int{"a": 2}, want: map[string]float64{}},
				{after: 5 * time.Minute, borrowed: map[string]int{"a": 2, "b": 1},
					want: map[string]float64{"a": accrue(0, 2, 5*time.Minute)}},
				{after: 6 * time.Minute, want: map[string]float64{
					"a": accrue(accrue(0, 2, 5*time.Minute), 2, 6*time.Minute), "b": accrue(0, 1, 6*time.Minute)}, saves: 1},
				{after: time.Minute, saves: 1},
			},
		},
		{
			name: "decay alone is never saved: nothing is written as time passes",
			rounds: []round{
				{borrowed: map[string]int{"a": 1}},
				{after: 11 * time.Minute, saves: 1},
				{after: 11 * time.Minute, saves: 1},
				{after: 24 * time.Hour, saves: 1},
			},
		},
		{
			name:  "a new leader loads the saved usage and decays it from when it was saved",
			saved: &fairShareDoc{At: t0.Add(-24 * time.Hour), Usage: map[string]float64{"a": 7200, "gone": 0.5}},
			rounds: []round{
				{want: map[string]float64{"a": 3600, "gone": 0.25}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			if tc.saved != nil {
				b, _ := json.Marshal(tc.saved)
				f.vars[c.cfg().StateNamespace+":"+FairSharePath] = map[string]string{"usage": string(b)}
				f.index[c.cfg().StateNamespace+":"+FairSharePath] = 3
			}
			pol := testPolicy(t)
			pol.Preemption.FairShareHalfLife = halfLife
			now := t0
			for i, r := range tc.rounds {
				now = now.Add(r.after)
				snap := &engine.Snapshot{}
				c.fairShareUsage(context.Background(), pol, snap, now)
				if r.want != nil {
					if len(snap.Usage) != len(r.want) {
						t.Fatalf("round %d: usage %v, want %v", i, snap.Usage, r.want)
					}
					for ten, w := range r.want {
						if math.Abs(snap.Usage[ten]-w) > 1e-6 {
							t.Fatalf("round %d: usage %v, want %v", i, snap.Usage, r.want)
						}
					}
				}
				var tenants []engine.TenantUsage
				for ten, g := range r.borrowed {
					tenants = append(tenants, engine.TenantUsage{Tenant: ten, InUse: g})
				}
				c.holdBorrowed(tenants)
				c.saveFairShare(context.Background(), now)
				if got := len(f.callsMatching("put " + c.cfg().StateNamespace + " " + FairSharePath)); got != r.saves {
					t.Fatalf("round %d: %d saves, want %d", i, got, r.saves)
				}
			}
		})
	}
}

// TestFairShareBounded: what is saved stays bounded, however many tenants
// borrowed once and however long their names: the tenants with the most
// usage are kept.
func TestFairShareBounded(t *testing.T) {
	cases := []struct {
		name     string
		prefix   string // of each of 3,000 tenants' names
		wantKept int
	}{
		{name: "short names: the 1000 with the most usage", prefix: "t", wantKept: fairShareMaxTenants},
		{name: "names of 128 bytes: as many as fit the bytes", prefix: strings.Repeat("n", 120), wantKept: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			usage := map[string]float64{}
			for i := range 3000 {
				usage[fmt.Sprintf("%s%04d", tc.prefix, i)] = float64(i + 1)
			}
			got := boundedUsage(usage, fairShareMaxTenants, fairShareMaxBytes)
			b, _ := json.Marshal(fairShareDoc{At: t0, Usage: got})
			if len(b) > 64<<10 {
				t.Fatalf("saved %d bytes, more than a Nomad variable holds", len(b))
			}
			if tc.wantKept > 0 && len(got) != tc.wantKept {
				t.Fatalf("kept %d tenants, want %d", len(got), tc.wantKept)
			}
			for name := range got {
				if usage[name] < float64(3000-len(got)+1) {
					t.Fatalf("kept %s (usage %v) but not all of the %d with the most", name, usage[name], len(got))
				}
			}
			t.Logf("kept %d tenants in %d bytes", len(got), len(b))
		})
	}
}

// TestFairShareFiguresWriteNoStatus: the tenants' fair-share figures drift
// every round; a change of them alone publishes no status, however long,
// and they go out with the next change of anything else.
func TestFairShareFiguresWriteNoStatus(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	r := roundWith(nil, nil)
	publish := func(at time.Duration, usage float64, inUse int) int {
		r.now = t0.Add(at)
		r.plan = &engine.Plan{Tenants: []engine.TenantUsage{{Tenant: "ml", Limit: -1, InUse: inUse, UsageGPUHours: usage, FairShare: 1, UsedShare: 1}}}
		c.pub.writeStatus(context.Background(), r, c.pol)
		return len(f.callsMatching("put steward steward/status"))
	}
	steps := []struct {
		at    time.Duration
		usage float64
		inUse int
		want  int // status writes so far
	}{
		{0, 1, 2, 1},
		{10 * time.Second, 1.1, 2, 1},
		{2 * time.Minute, 1.5, 2, 1},
		{3 * time.Hour, 9, 2, 1},
		{3*time.Hour + time.Second, 9, 3, 2}, // a real change: the figures go with it
	}
	for _, s := range steps {
		if got := publish(s.at, s.usage, s.inUse); got != s.want {
			t.Errorf("at %s: %d status writes, want %d", s.at, got, s.want)
		}
	}
	items := f.vars[c.cfg().StateNamespace+":"+StatusPath]
	if !strings.Contains(items["status"], `"fair_share_usage_gpu_hours":9`) {
		t.Errorf("the published status lacks the figures of its round: %s", items["status"])
	}
}
