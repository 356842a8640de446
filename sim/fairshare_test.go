package sim

import (
	"math"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestFairShareJain: the fairness figure over a day of contention, for
// tenants that shared contested GPUs evenly, by weight, or not at all.
func TestFairShareJain(t *testing.T) {
	type span struct {
		use, waiting []int
		// jobs: each tenant's waiting jobs' GPUs (instead of waiting),
		// with capacity the cluster's GPUs.
		jobs [][]int
		// requeued: each tenant's waiting jobs an idle rule requeued.
		requeued [][]int
		capacity int
		d        time.Duration
	}
	cases := []struct {
		name     string
		weights  []float64
		limits   []int // -1: none; nil: none for all
		reserves []int
		// depts: departments with a limit, each its limit and members.
		depts []deptCap
		spans []span
		want  FairShare
	}{
		{
			name: "equal weights shared evenly", weights: []float64{1, 1},
			spans: []span{{use: []int{4, 4}, waiting: []int{2, 2}, d: 10 * time.Hour}},
			want:  FairShare{Jain: 1, JainMin: 1, Windows: 1, FairWindows: 1, Within20: 1},
		},
		{
			name: "one tenant holds all while the other waits", weights: []float64{1, 1},
			spans: []span{{use: []int{8, 0}, waiting: []int{2, 2}, d: 10 * time.Hour}},
			want:  FairShare{Jain: 0.5, JainMin: 0.5, Windows: 1, FairWindows: 0, Within20: 0},
		},
		{
			name: "a head start paid back within the day", weights: []float64{1, 1},
			spans: []span{
				{use: []int{8, 0}, waiting: []int{2, 2}, d: 5 * time.Hour},
				{use: []int{0, 8}, waiting: []int{2, 2}, d: 5 * time.Hour},
			},
			want: FairShare{Jain: 1, JainMin: 1, Windows: 1, FairWindows: 1, Within20: 1},
		},
		{
			name: "by weight: 2 to 1 is fair", weights: []float64{2, 1},
			spans: []span{{use: []int{6, 3}, waiting: []int{1, 1}, d: 10 * time.Hour}},
			want:  FairShare{Jain: 1, JainMin: 1, Windows: 1, FairWindows: 1, Within20: 1},
		},
		{
			name: "a tenant that wants no more than it holds is entitled to just that", weights: []float64{1, 1},
			spans: []span{{use: []int{2, 6}, waiting: []int{0, 3}, d: 10 * time.Hour}},
			want:  FairShare{Jain: 1, JainMin: 1, Windows: 1, FairWindows: 1, Within20: 1},
		},
		{
			name: "a tenant at its limit is entitled to no more", weights: []float64{1, 1}, limits: []int{2, -1},
			spans: []span{{use: []int{2, 6}, waiting: []int{4, 3}, d: 10 * time.Hour}},
			want:  FairShare{Jain: 1, JainMin: 1, Windows: 1, FairWindows: 1, Within20: 1},
		},
		{
			name: "a tenant waiting within its reserve waits for its reserve and not the contested GPUs", weights: []float64{1, 1, 1},
			reserves: []int{0, 0, 4},
			// c holds 1 of its reserve of 4 and waits: not contending; a
			// and b borrow 4 each, their share.
			spans: []span{{use: []int{4, 4, 1}, waiting: []int{1, 1, 3}, d: 10 * time.Hour}},
			want:  FairShare{Jain: 1, JainMin: 1, Windows: 1, FairWindows: 1, Within20: 1},
		},
		{
			name: "a tenant whose every waiting job is larger than the GPUs free and borrowed is not deprived", weights: []float64{1, 1},
			reserves: []int{10, 0},
			// a holds its reserve and waits for 8-GPU jobs; b borrows 5
			// and 1 is free: a could not run one were b's all taken
			// back. b alone contends.
			spans: []span{{use: []int{10, 5}, jobs: [][]int{{8, 8}, {1}}, capacity: 16, d: 10 * time.Hour}},
			want:  FairShare{},
		},
		{
			name: "one whose smallest job fits in them is", weights: []float64{1, 1},
			reserves: []int{10, 0},
			spans:    []span{{use: []int{10, 5}, jobs: [][]int{{8, 4}, {1}}, capacity: 16, d: 10 * time.Hour}},
			want:     FairShare{Jain: 0.5, JainMin: 0.5, Windows: 1, FairWindows: 0, Within20: 0},
		},
		{
			name: "a tenant whose smallest job would take it past its limit is entitled to no more", weights: []float64{1, 1},
			reserves: []int{10, 0}, limits: []int{13, -1},
			spans: []span{{use: []int{10, 5}, jobs: [][]int{{4}, {1}}, capacity: 16, d: 10 * time.Hour}},
			want:  FairShare{},
		},
		{
			name: "a tenant waiting only with work an idle rule requeued is not deprived", weights: []float64{1, 1},
			// b's one waiting job went idle after its work and was
			// requeued: it has only its idle tail left. a borrows all 8.
			spans: []span{{use: []int{8, 0}, jobs: [][]int{nil, nil}, requeued: [][]int{nil, {1}}, capacity: 8, d: 10 * time.Hour}},
			want:  FairShare{},
		},
		{
			name: "requeued work does not make a tenant's smallest job", weights: []float64{1, 1},
			// b waits with a requeued 1-GPU notebook and a 12-GPU job:
			// the job is larger than the 8 GPUs a borrows.
			spans: []span{{use: []int{8, 0}, jobs: [][]int{nil, {12}}, requeued: [][]int{nil, {1}}, capacity: 8, d: 10 * time.Hour}},
			want:  FairShare{},
		},
		{
			name: "requeued work beside work that would run is deprived as before", weights: []float64{1, 1},
			spans: []span{{use: []int{8, 0}, jobs: [][]int{nil, {2}}, requeued: [][]int{nil, {1}}, capacity: 8, d: 10 * time.Hour}},
			want:  FairShare{Jain: 0.5, JainMin: 0.5, Windows: 1, FairWindows: 0, Within20: 0},
		},
		{
			name: "a tenant whose department is at its limit is entitled to no more", weights: []float64{1, 1, 1},
			// a and b, no limit of their own, share a department of 4
			// GPUs and hold them; c borrows the other 4. Before, a and b
			// counted entitled to 8/3 each, GPUs the engine may not give
			// them: c, with all it could get, called unfair (0.889).
			depts: []deptCap{{limit: 4, members: []int{0, 1}}},
			spans: []span{{use: []int{2, 2, 4}, jobs: [][]int{{1}, {1}, {1}}, capacity: 8, d: 10 * time.Hour}},
			want:  FairShare{Jain: 1, JainMin: 1, Windows: 1, FairWindows: 1, Within20: 1},
		},
		{
			name: "a department's tenants are entitled together to what its limit lets them borrow", weights: []float64{1, 1, 1},
			// The department of a and b has 1 GPU of room: together they
			// are entitled to 5 of the 12 contested GPUs (2.5 each), c to
			// 7. Before: 4 each, and an index of 0.667.
			depts: []deptCap{{limit: 5, members: []int{0, 1}}},
			spans: []span{{use: []int{2, 2, 8}, jobs: [][]int{{1}, {1}, {1}}, capacity: 12, d: 10 * time.Hour}},
			want:  FairShare{Jain: jain(0.8, 0.8, 8.0/7), JainMin: jain(0.8, 0.8, 8.0/7), Windows: 1, FairWindows: 1, Within20: 1},
		},
		{
			name: "a department with room for all its tenants want changes nothing", weights: []float64{1, 1},
			depts: []deptCap{{limit: 100, members: []int{0, 1}}},
			spans: []span{{use: []int{8, 0}, waiting: []int{2, 2}, d: 10 * time.Hour}},
			want:  FairShare{Jain: 0.5, JainMin: 0.5, Windows: 1, FairWindows: 0, Within20: 0},
		},
		{
			name: "a tenant is entitled to no more than it holds and waits for", weights: []float64{1, 1},
			// b holds 2 and waits with one 1-GPU job: it asks for 3 of
			// the 10 contested GPUs, a (which holds 8) is entitled to the
			// other 7. Before, 5 each (b counted as wanting as many as
			// its limit let it borrow): 0.735.
			spans: []span{{use: []int{8, 2}, jobs: [][]int{nil, {1}}, capacity: 10, d: 10 * time.Hour}},
			want:  FairShare{Jain: jain(8.0/7, 2.0/3), JainMin: jain(8.0/7, 2.0/3), Windows: 1, FairWindows: 1, Within20: 0.5},
		},
		{
			name: "GPUs owed to a tenant waiting within its reserve are not contested", weights: []float64{1, 1, 1},
			reserves: []int{4, 0, 4},
			// a holds 2 of its reserve of 4 and waits for 2; b borrows
			// the other 2 of a's reserve; c, at its reserve, waits with
			// a 1-GPU job. No GPU is beyond the reserves: b's 2 are a's
			// (reserve_short_gpu_hours), not c's. Before, c was counted
			// entitled to 1 of them and b as holding twice its part:
			// 0.5.
			spans: []span{{use: []int{2, 2, 4}, jobs: [][]int{{2}, nil, {1}}, capacity: 8, d: 10 * time.Hour}},
			want:  FairShare{},
		},
		{
			name: "GPUs owed to a reserve come out of the free ones first", weights: []float64{1, 1, 1},
			reserves: []int{4, 0, 4},
			// The same with 2 GPUs free: a's 2 come out of them, b's 2
			// are contested, c holds none of them: 0.5 as before.
			spans: []span{{use: []int{2, 2, 4}, jobs: [][]int{{2}, nil, {1}}, capacity: 10, d: 10 * time.Hour}},
			want:  FairShare{Jain: 0.5, JainMin: 0.5, Windows: 1, FairWindows: 0, Within20: 0},
		},
		{
			name: "GPUs owed to a reserve come out of each borrower's part alike", weights: []float64{1, 1, 1},
			reserves: []int{4, 0, 0},
			// a is owed 1; b and c borrow 3 and 2 of the 8, none free:
			// 4 contested, b's part 2.4 and c's 1.6; c waits for 1 more
			// and both are entitled to 2.
			spans: []span{{use: []int{3, 3, 2}, jobs: [][]int{{1}, nil, {1}}, capacity: 8, d: 10 * time.Hour}},
			want:  FairShare{Jain: jain(1.2, 0.8), JainMin: jain(1.2, 0.8), Windows: 1, FairWindows: 1, Within20: 1},
		},
		{
			name: "nobody waits: no contention", weights: []float64{1, 1},
			spans: []span{{use: []int{8, 0}, waiting: []int{0, 0}, d: 10 * time.Hour}},
			want:  FairShare{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &metrics{tenantNS: map[string]int{}}
			for i, w := range tc.weights {
				ti := m.tenantIndex(string(rune('a' + i)))
				m.tenants[ti].Weight = w
				if tc.limits != nil {
					m.tenants[ti].Limit = tc.limits[i]
				}
				if tc.reserves != nil {
					m.tenants[ti].Reserve = tc.reserves[i]
				}
			}
			for di, d := range tc.depts {
				m.depts = append(m.depts, d)
				for _, ti := range d.members {
					m.dept[ti] = di
				}
			}
			at := time.Duration(0)
			for _, sp := range tc.spans {
				copy(m.tenantUse, sp.use)
				copy(m.tenantWaiting, sp.waiting)
				for ti, jobs := range sp.jobs {
					for _, g := range jobs {
						m.setWaiting(ti, g, false)
					}
				}
				for ti, jobs := range sp.requeued {
					for _, g := range jobs {
						m.setWaiting(ti, g, true)
					}
				}
				if sp.capacity > 0 {
					m.capacity, m.allocated = float64(sp.capacity), 0
					for _, u := range sp.use {
						m.allocated += u
					}
				}
				m.fair.advance(m, at, at+sp.d)
				at += sp.d
			}
			got := m.fair.result()
			if math.Abs(got.Jain-tc.want.Jain) > 1e-9 || math.Abs(got.JainMin-tc.want.JainMin) > 1e-9 ||
				got.Windows != tc.want.Windows || got.FairWindows != tc.want.FairWindows ||
				math.Abs(got.Within20-tc.want.Within20) > 1e-9 {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// jain is Jain's index of xs.
func jain(xs ...float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// TestFairShareUsageDecays: the simulator's decayed usage, beyond the
// reserve, halves in a half-life.
func TestFairShareUsageDecays(t *testing.T) {
	m := &metrics{tenantNS: map[string]int{}}
	m.tenantIndex("a")
	m.tenants[0] = &policy.Tenant{Name: "a", Namespace: "a", Reserve: 2, Limit: policy.Unlimited, Weight: 1}
	m.fair.halfLife = time.Hour
	m.tenantUse[0] = 3 // 1 borrowed
	m.fair.advance(m, 0, 10*time.Hour)
	full := m.fair.usage[0]
	if want := time.Hour.Seconds() / math.Ln2; math.Abs(full-want) > 0.01*want {
		t.Fatalf("usage after 10 half-lives at 1 borrowed GPU: %v, want about %v", full, want)
	}
	m.tenantUse[0] = 2 // within its reserve: not charged
	m.fair.advance(m, 10*time.Hour, 11*time.Hour)
	if got := m.fair.usage[0]; math.Abs(got-full/2) > 1e-6 {
		t.Fatalf("usage a half-life later: %v, want %v", got, full/2)
	}
}
