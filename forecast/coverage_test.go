package forecast

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestCoverageKnownDistribution: on a workload whose run times come from
// a known distribution, of which the forecast knows only a short history
// (the runs of similar jobs that finished), the starts a queue then gets
// come by the P90 in nine cases of ten and by the P50 in about half.
//
// One node of 4 GPUs runs a queue of one-GPU jobs first come, first
// served; each trial draws the history and the queue's true run times
// from the same log-normal, forecasts with the history, and compares each
// job's forecast with the start the true run times give it. A forecast
// whose replays draw every run time from the history as it is gets a
// spread of the run times' own variation alone, which averages out over a
// queue: the start of a job ten runs deep is off by what the history's
// mean is off by (a fifth, with 8 runs), and the replays never say so.
func TestCoverageKnownDistribution(t *testing.T) {
	const (
		gpus   = 4
		queue  = 32
		trials = 100
	)
	tests := []struct {
		name    string
		history int           // runs of similar jobs known
		median  time.Duration // of the true run times
		sigma   float64       // of their logarithm
	}{
		{"eight runs known, moderate spread", 8, time.Hour, 0.6},
		{"twelve runs known, wide spread", 12, 2 * time.Hour, 1.0},
		{"forty runs known, moderate spread", 40, time.Hour, 0.6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			draw := func() time.Duration { return logNormal(rng, tc.median, tc.sigma) }
			in50, in90, n := 0, 0, 0
			for trial := range trials {
				h := NewHistory()
				c := ClassOf("b", "training", 1)
				for range tc.history {
					h.Add(c, draw())
				}
				est := map[engine.JobRef]Estimate{}
				s := &engine.Snapshot{Nodes: []engine.Node{node("n1", gpus)}}
				for i := range queue {
					// Submitted hours apart: each its own batch
					// (batches.go), its run time independent of the others'.
					d := waiting("b", fmt.Sprintf("j%02d", i), "training", 1, 1, time.Duration(2*(queue-i))*time.Hour)
					s.Waiting = append(s.Waiting, d)
					est[d.Job.Ref] = h.Estimate(c)
				}
				res := Run(context.Background(), Input{Engine: testEngine(t), Snapshot: s, Now: t0, Estimates: est},
					Options{Seed: uint64(trial)})
				// The truth: first come, first served on the node's GPUs.
				free := make([]time.Time, gpus)
				for i := range free {
					free[i] = t0
				}
				for i := range queue {
					k := slices.IndexFunc(free, func(x time.Time) bool { return !x.After(slices.MinFunc(free, time.Time.Compare)) })
					start := free[k]
					free[k] = start.Add(draw())
					if i < gpus {
						continue // started at once: nothing to forecast
					}
					f := res.Jobs[ref("b", fmt.Sprintf("j%02d", i))]
					n++
					if !f.P50.IsZero() && !start.After(f.P50) {
						in50++
					}
					if !f.P90.IsZero() && !start.After(f.P90) {
						in90++
					}
				}
			}
			c50, c90 := float64(in50)/float64(n), float64(in90)/float64(n)
			t.Logf("%d starts: by the P50 %.1f %%, by the P90 %.1f %%", n, 100*c50, 100*c90)
			if c90 < 0.85 || math.Abs(c50-0.5) > 0.08 {
				t.Errorf("by the P50 %.1f %% (want 42–58 %%), by the P90 %.1f %% (want ≥ 85 %%)", 100*c50, 100*c90)
			}
		})
	}
}

// TestBootstrapStories: what a replay's draw of a history's distribution
// keeps and changes, one named case each.
func TestBootstrapStories(t *testing.T) {
	h := time.Hour
	hist := []time.Duration{3 * h, h, 2 * h, 5 * h, 4 * h}
	total := func(e Estimate) float64 { return e.cum[len(e.cum)-1] }
	tests := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"two jobs of one history draw from one distribution in a replay", func(t *testing.T) {
			b := bootstrap{seed: 1, replay: 3}
			x, y := b.of(Estimate{History: slices.Clone(hist)}), b.of(Estimate{History: slices.Clone(hist)})
			if !slices.Equal(x.cum, y.cum) {
				t.Fatalf("weights %v and %v", x.cum, y.cum)
			}
		}},
		{"another replay draws another distribution", func(t *testing.T) {
			x := (&bootstrap{seed: 1, replay: 3}).of(Estimate{History: hist})
			y := (&bootstrap{seed: 1, replay: 4}).of(Estimate{History: hist})
			if slices.Equal(x.cum, y.cum) {
				t.Fatalf("same weights %v in two replays", x.cum)
			}
		}},
		{"the values are the history's, sorted, none lost", func(t *testing.T) {
			x := (&bootstrap{seed: 1}).of(Estimate{History: hist})
			want := slices.Sorted(slices.Values(hist))
			if !slices.Equal(x.History, want) || len(x.cum) != len(want) {
				t.Fatalf("values %v (%d weights), want %v", x.History, len(x.cum), want)
			}
		}},
		{"weights average to the history's own over replays", func(t *testing.T) {
			// Exp(1) has mean 1: the share of the shortest run stays a
			// fifth on average.
			sum := 0.0
			for r := range uint64(2000) {
				x := (&bootstrap{seed: 1, replay: r}).of(Estimate{History: hist})
				sum += x.cum[0] / total(x)
			}
			if m := sum / 2000; math.Abs(m-0.2) > 0.02 {
				t.Fatalf("mean share of the shortest run %.3f, want 0.2", m)
			}
		}},
		{"a job's own expected_runtime and the default are left alone", func(t *testing.T) {
			b := bootstrap{seed: 1}
			for _, e := range []Estimate{{Expected: h, Source: FromExpected}, {Source: FromDefault}, {Forever: true}} {
				if got := b.of(e); got.cum != nil || got.Expected != e.Expected || got.Forever != e.Forever {
					t.Fatalf("%+v became %+v", e, got)
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.check)
	}
}
