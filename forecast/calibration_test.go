package forecast

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestRedistribute: runs still going pass their weight to the longer runs
// (the Kaplan-Meier estimate), one named case per story.
func TestRedistribute(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name            string
		finished, going []time.Duration
		per             float64 // the runs each finished one stands for; 0: 1
		vals            []time.Duration
		cum             []float64
	}{
		{"nothing going: all alike", []time.Duration{h, 2 * h}, nil, 0, []time.Duration{h, 2 * h}, []float64{1, 2}},
		{"one going past the shortest: its weight to the longest", []time.Duration{h, 2 * h}, []time.Duration{90 * time.Minute},
			0, []time.Duration{h, 2 * h}, []float64{1, 3}},
		{"going shortest of all: shared by the three longer", []time.Duration{h, 2 * h, 3 * h}, []time.Duration{time.Minute},
			0, []time.Duration{h, 2 * h, 3 * h}, []float64{4. / 3, 8. / 3, 4}},
		{"going longest of all: kept at its age", []time.Duration{h}, []time.Duration{5 * h},
			0, []time.Duration{h, 5 * h}, []float64{1, 2}},
		{"a tie: the one going outlives the one that ended", []time.Duration{h, h, 4 * h}, []time.Duration{h},
			0, []time.Duration{h, h, 4 * h}, []float64{1, 2, 4}},
		{"each finished stands for three: the runs going weigh a third as much", []time.Duration{h, 4 * h}, []time.Duration{5 * h},
			3, []time.Duration{h, 4 * h, 5 * h}, []float64{3, 6, 7}},
		{"going between finished that stand for two: its weight to the longer in proportion", []time.Duration{h, 4 * h}, []time.Duration{2 * h, 5 * h},
			2, []time.Duration{h, 4 * h, 5 * h}, []float64{2, 2 + 2 + 2./3, 6}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			per := tc.per
			if per == 0 {
				per = 1
			}
			vals, cum := redistribute(tc.finished, tc.going, per)
			if !slices.Equal(vals, tc.vals) {
				t.Fatalf("values %v, want %v", vals, tc.vals)
			}
			for i := range cum {
				if d := cum[i] - tc.cum[i]; d > 1e-9 || d < -1e-9 {
					t.Fatalf("cumulative weights %v, want %v", cum, tc.cum)
				}
			}
		})
	}
}

// TestEstimateRunningLonger: a class whose long runs are still going
// draws longer run times than its finished runs alone say.
func TestEstimateRunningLonger(t *testing.T) {
	h := NewHistory()
	c := ClassOf("a", "training", 1)
	for range 10 {
		h.Add(c, 10*time.Minute)
	}
	going := map[Class][]time.Duration{c: {5 * time.Hour, 6 * time.Hour, 7 * time.Hour, 8 * time.Hour, 9 * time.Hour}}
	rng := arrivalRNG(1, 1)
	mean := func(e Estimate) time.Duration {
		var sum time.Duration
		for range 1000 {
			sum += e.draw(rng)
		}
		return sum / 1000
	}
	finished, both := mean(h.Estimate(c)), mean(h.EstimateRunning(c, going))
	if finished > 12*time.Minute || both < 2*time.Hour {
		t.Fatalf("mean draw %s from finished runs alone, %s with the runs going; want about 10m, then hours", finished, both)
	}
}

// TestEstimateRunningFullRing: a class with more runs finished than the
// history keeps weighs each kept one for the runs it replaced: 1,000 runs
// of an hour finished (256 kept) and 400 going at 10 hours draw an hour
// most of the time (1,000 of 1,400), not the 10 hours that 256 against
// 400 would make most of the draws.
func TestEstimateRunningFullRing(t *testing.T) {
	h := NewHistory()
	c := ClassOf("a", "training", 1)
	for range 1000 {
		h.Add(c, time.Hour)
	}
	var ages []time.Duration
	for range 400 {
		ages = append(ages, 10*time.Hour)
	}
	e := h.EstimateRunning(c, map[Class][]time.Duration{c: ages})
	rng := arrivalRNG(1, 1)
	short := 0
	for range 1000 {
		if e.draw(rng) < 2*time.Hour {
			short++
		}
	}
	if short < 650 || short > 780 {
		t.Fatalf("%d of 1000 draws of an hour, want about 714", short)
	}
}

// TestArrivalsWindow: the last day's arrivals, the rate over the span
// watched.
func TestArrivalsWindow(t *testing.T) {
	a := NewArrivals(t0)
	for i := range 30 {
		a.Add(Arrival{At: t0.Add(time.Duration(i) * time.Hour)}, Class{})
	}
	now := t0.Add(30 * time.Hour)
	list, since := a.Window(now, NewHistory(), nil)
	if len(list) != 24 || !since.Equal(now.Add(-ArrivalWindow)) || !list[0].At.Equal(t0.Add(6*time.Hour)) {
		t.Fatalf("%d arrivals since %s (first %s); want 24 since %s", len(list), since, list[0].At, now.Add(-ArrivalWindow))
	}
	b := NewArrivals(t0)
	b.Add(Arrival{At: t0.Add(time.Hour)}, Class{})
	if _, since := b.Window(t0.Add(2*time.Hour), NewHistory(), nil); !since.Equal(t0) {
		t.Fatalf("watched for 2h: since %s, want %s (when watching began)", since, t0)
	}
}

// TestArrivalStories: work that arrives while a job waits, one named case
// per story.
func TestArrivalStories(t *testing.T) {
	e := testEngine(t)
	full := engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
		Allocs:  []engine.Alloc{running("a", "run", "training", "n1", 8, 10*time.Minute, 0)},
		Waiting: []engine.Demand{waiting("b", "train", "training", 1, 8, time.Minute)}}
	est := map[engine.JobRef]Estimate{ref("a", "run"): {Expected: time.Hour}, ref("b", "train"): {Expected: time.Hour}}
	arrivals := func(tier string, n int) []Arrival {
		var out []Arrival
		for i := range n {
			d := waiting("a", fmt.Sprint("past-", i), tier, 1, 8, 0)
			d.Held = false
			out = append(out, Arrival{At: t0.Add(-time.Duration(n-i) * 20 * time.Minute), Demands: []engine.Demand{d},
				Estimate: Estimate{Expected: time.Hour}})
		}
		return out
	}
	p50 := func(arr []Arrival) time.Time {
		since := t0.Add(-time.Duration(len(arr)) * 20 * time.Minute)
		if len(arr) == 1 {
			since = t0.Add(-5 * time.Minute) // watched for 5 minutes only
		}
		in := Input{Engine: e, Snapshot: &full, Now: t0, Estimates: est, Arrivals: arr, ArrivalsSince: since}
		return Run(context.Background(), in, Options{Seed: 1}).Jobs[ref("b", "train")].P50
	}
	alone := p50(nil)
	tests := []struct {
		name  string
		arr   []Arrival
		check func(t *testing.T, got time.Time)
	}{
		{"interactive work arriving every 20 minutes goes ahead", arrivals("interactive", 12), func(t *testing.T, got time.Time) {
			if !got.IsZero() && !got.After(alone.Add(30*time.Minute)) {
				t.Errorf("P50 %s with interactive arrivals, %s without: want later by far", got, alone)
			}
		}},
		{"training work arriving later waits behind it", arrivals("training", 12), func(t *testing.T, got time.Time) {
			if got.Sub(alone).Abs() > 5*time.Minute {
				t.Errorf("P50 %s with training arrivals, %s without: want about the same", got, alone)
			}
		}},
		{"a few minutes watched: no rate yet", arrivals("interactive", 1), func(t *testing.T, got time.Time) {
			if !got.Equal(alone) {
				t.Errorf("P50 %s after 5 minutes watched, %s without arrivals: want the same (none drawn)", got, alone)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, p50(tc.arr)) })
	}
}

// TestReducedLikeWhole: a cluster replayed a quarter at a time forecasts
// about what the whole replayed gives, for every waiting job.
func TestReducedLikeWhole(t *testing.T) {
	e := testEngine(t)
	s := &engine.Snapshot{}
	est := map[engine.JobRef]Estimate{}
	for n := range 64 {
		id := fmt.Sprintf("n%02d", n)
		s.Nodes = append(s.Nodes, node(id, 8))
		for k := range 4 {
			a := running([]string{"a", "b"}[k%2], fmt.Sprintf("run-%d-%d", n, k), "training", id, 2, time.Duration(5*((n*7+k*13)%24))*time.Minute, 2*k)
			s.Allocs = append(s.Allocs, a)
			est[a.Job.Ref] = Estimate{Expected: time.Duration(60+(n*k)%120) * time.Minute}
		}
	}
	for i := range 96 {
		d := waiting([]string{"a", "b", "c"}[i%3], fmt.Sprintf("w%02d", i), []string{"training", "interactive"}[i%4/3], 1, 1<<(i%3), time.Duration(i)*time.Minute)
		s.Waiting = append(s.Waiting, d)
		est[d.Job.Ref] = Estimate{Expected: time.Hour}
	}
	in := Input{Engine: e, Snapshot: s, Now: t0, Estimates: est}
	whole := Run(context.Background(), in, Options{Seed: 1})
	reduced := Run(context.Background(), in, Options{Seed: 1, MaxNodes: 16})
	if whole.Shares != 1 || reduced.Shares != 4 || len(reduced.Jobs) != 96 || len(whole.Jobs) != 96 {
		t.Fatalf("shares %d and %d, %d and %d jobs; want 1 and 4, 96 each", whole.Shares, reduced.Shares, len(whole.Jobs), len(reduced.Jobs))
	}
	var diffs []float64
	for ref, w := range whole.Jobs {
		// The whole cluster's replays run out of plans (150) sooner: its
		// last jobs may not start within them.
		if r := reduced.Jobs[ref]; !w.P50.IsZero() && !r.P50.IsZero() {
			// Relative to the wait, of at least 5 hours: tenant a's
			// training jobs wait a day behind its limit of 8 (2 a share),
			// and start within 25 % of each other both ways.
			diffs = append(diffs, float64(r.P50.Sub(w.P50).Abs())/float64(max(w.P50.Sub(t0), 5*time.Hour)))
		}
	}
	if len(diffs) < 80 {
		t.Fatalf("%d of 96 jobs with a P50 both ways, want most", len(diffs))
	}
	slices.Sort(diffs)
	if med := diffs[len(diffs)/2]; med > 0.1 {
		t.Errorf("median |P50 reduced − P50 whole| %.0f%% of the wait (at least 5h); want within 10%%", med*100)
	}
}

// TestQuantile: the q-quantile at rank q·(n+1), one named case per story.
func TestQuantile(t *testing.T) {
	at := func(mins ...int) []time.Time {
		var out []time.Time
		for _, m := range mins {
			if m < 0 {
				out = append(out, time.Time{})
				continue
			}
			out = append(out, t0.Add(time.Duration(m)*time.Minute))
		}
		return out
	}
	tests := []struct {
		name   string
		starts []time.Time
		q      float64
		want   time.Time
	}{
		{"median of ten: halfway between the 5th and 6th", at(1, 2, 3, 4, 5, 7, 8, 9, 10, 11), 0.5, t0.Add(6 * time.Minute)},
		{"P90 of ten: nine tenths of the way from the 9th to the 10th", at(1, 2, 3, 4, 5, 6, 7, 8, 10, 20), 0.9, t0.Add(19 * time.Minute)},
		{"P90 of eight: the last", at(1, 2, 3, 4, 5, 6, 7, 8), 0.9, t0.Add(8 * time.Minute)},
		{"P90 of ten, the 10th not started: none within the horizon", at(1, 2, 3, 4, 5, 6, 7, 8, 9, -1), 0.9, time.Time{}},
		{"median of ten, the 6th not started: none", at(1, 2, 3, 4, 5, -1, -1, -1, -1, -1), 0.5, time.Time{}},
		{"one replay", at(3), 0.9, t0.Add(3 * time.Minute)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := quantile(tc.starts, tc.q); !got.Equal(tc.want) {
				t.Errorf("quantile %.1f = %s, want %s", tc.q, got, tc.want)
			}
		})
	}
}
