package forecast

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// busyCluster is 4 nodes of 8 GPUs full of work of both tenants, with a
// queue of 12 jobs, half of them without a run-time estimate.
func busyCluster() (*engine.Snapshot, map[engine.JobRef]Estimate) {
	s := &engine.Snapshot{}
	est := map[engine.JobRef]Estimate{}
	for n := range 4 {
		id := fmt.Sprintf("n%d", n)
		s.Nodes = append(s.Nodes, node(id, 8))
		for k := range 4 {
			ns := []string{"a", "b"}[k%2]
			a := running(ns, fmt.Sprintf("run-%d-%d", n, k), "training", id, 2, time.Duration(10+n*k)*time.Minute, 2*k)
			s.Allocs = append(s.Allocs, a)
			if k%2 == 0 {
				est[a.Job.Ref] = Estimate{Expected: time.Duration(30+20*n) * time.Minute}
			}
		}
	}
	for i := range 12 {
		ns := []string{"a", "b"}[i%2]
		tier := []string{"training", "interactive", "training"}[i%3]
		s.Waiting = append(s.Waiting, waiting(ns, fmt.Sprintf("w%d", i), tier, 1, 1+i%4, time.Duration(i)*time.Minute))
	}
	return s, est
}

// TestForecastDeterministic: the same input and seed give the same
// forecast; another seed draws other run times.
func TestForecastDeterministic(t *testing.T) {
	e := testEngine(t)
	snap, est := busyCluster()
	run := func(seed uint64) *Result {
		return Run(context.Background(), Input{Engine: e, Snapshot: snap, Now: t0, Estimates: est}, Options{Seed: seed})
	}
	a, b := run(7), run(7)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two forecasts with seed 7 differ:\n%+v\n%+v", a.Jobs, b.Jobs)
	}
	if len(a.Jobs) != 12 {
		t.Fatalf("forecasts for %d jobs, want 12", len(a.Jobs))
	}
	for ref, f := range a.Jobs {
		if f.P50.IsZero() || f.P90.Before(f.P50) || f.P50.Before(t0) {
			t.Errorf("%s: P50 %s, P90 %s: want a P50 from now on and a P90 no earlier", ref, f.P50, f.P90)
		}
	}
	if c := run(8); reflect.DeepEqual(a.Jobs, c.Jobs) {
		t.Errorf("seeds 7 and 8 gave the same forecast: the draws do not depend on the seed")
	}
}

// TestForecastStopsWithContext: an ended context stops the replays (the
// controller's time budget), with the replays done so far.
func TestForecastStopsWithContext(t *testing.T) {
	e := testEngine(t)
	snap, est := busyCluster()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := Run(ctx, Input{Engine: e, Snapshot: snap, Now: t0, Estimates: est}, Options{}); r.Replays != 0 || len(r.Jobs) != 0 {
		t.Fatalf("%d replays after the context ended, want 0", r.Replays)
	}
}

// TestHistoryEstimate: a class's own run times once it has enough, else
// wider views, else the default.
func TestHistoryEstimate(t *testing.T) {
	h := NewHistory()
	c := ClassOf("a", "training", 3)
	if got := h.Estimate(c).Source; got != FromDefault {
		t.Fatalf("empty history: source %s, want %s", got, FromDefault)
	}
	for i := range 4 {
		h.Add(ClassOf("b", "training", 4), time.Duration(i+1)*time.Hour)
	}
	h.Add(c, 10*time.Hour)
	// 5 of tier training with 4 GPUs across tenants, 1 of a's own: the wider view.
	if got := h.Estimate(c); got.Source != FromSimilar || len(got.History) != 5 {
		t.Fatalf("estimate %+v, want the 5 runs of training with 3-4 GPUs", got)
	}
	for range 4 {
		h.Add(c, 10*time.Hour)
	}
	if got := h.Estimate(c); len(got.History) != 5 || got.History[0] != 10*time.Hour {
		t.Fatalf("estimate %+v, want a's own 5 runs of 10h", got)
	}
	if ClassOf("a", "t", 5).GPUs != 8 || ClassOf("a", "t", 1).GPUs != 1 || ClassOf("a", "t", 40).GPUs != 16 {
		t.Fatal("GPU buckets are 1, 2, 4, 8, 16+")
	}
}

// TestRemainingConditioned: a running job's remaining time is drawn from
// run times longer than it ran already; a job that outlived them all ends
// within half its age again.
func TestRemainingConditioned(t *testing.T) {
	rng := newReplay(&Input{Engine: testEngine(t), Snapshot: &engine.Snapshot{}, Now: t0}, Options{}.withDefaults(), 1, 1).rng
	e := Estimate{History: []time.Duration{time.Hour, 2 * time.Hour, 3 * time.Hour}}
	for range 100 {
		if r := e.remaining(rng, 150*time.Minute); r > 50*time.Minute || r < minRemaining {
			t.Fatalf("ran 2h30m of at most 3h (+10%%): %s left, want at most 48m", r)
		}
		if r := e.remaining(rng, 10*time.Hour); r > 5*time.Hour {
			t.Fatalf("ran 10h, longer than any similar job: %s left, want at most 5h", r)
		}
	}
}

// TestMedianWeighted: the median a job that outlived every draw is aged
// against is the median of the distribution draw picks from, weights and
// all: a borrowed mixture whose one long family weighs most has a long
// median however many short runs the other families have.
func TestMedianWeighted(t *testing.T) {
	h := []time.Duration{time.Hour, 2 * time.Hour, 10 * time.Hour}
	for _, tc := range []struct {
		name string
		e    Estimate
		want time.Duration
	}{
		{"alike: the middle value", Estimate{History: h}, 2 * time.Hour},
		{"alike, even count: the upper middle", Estimate{History: []time.Duration{4, 1, 3, 2}}, 3},
		{"weights alike by cum: as without", Estimate{History: h, cum: []float64{1, 2, 3}}, 2 * time.Hour},
		{"the long run weighs most", Estimate{History: h, cum: []float64{0.1, 0.2, 1.0}}, 10 * time.Hour},
		{"the short run weighs most, unsorted", Estimate{History: []time.Duration{10 * time.Hour, time.Hour, 2 * time.Hour}, cum: []float64{0.1, 0.9, 1.0}}, time.Hour},
		{"expected_runtime wins", Estimate{History: h, Expected: 5 * time.Hour}, 5 * time.Hour},
		{"nothing known: the default", Estimate{}, DefaultRuntime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.e.median(); got != tc.want {
				t.Errorf("median = %v, want %v", got, tc.want)
			}
		})
	}
}
