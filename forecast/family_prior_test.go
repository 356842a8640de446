package forecast

import (
	"math"
	"testing"
	"time"
)

// TestUnseenFamilyPrior: a family nobody has seen run borrows its run
// times from its class's families, each weighing alike, not from its
// class's runs pooled, where the many runs of a family of long jobs
// (finished and going) decide everything (Philly's burst of 3-minute jobs
// beside its tenant's 450-hour ones). The spread keeps the long runs, and
// a family with runs of its own is not touched.
func TestUnseenFamilyPrior(t *testing.T) {
	c := ClassOf("platform", "training", 1)
	h := NewHistory()
	for range 40 {
		h.Add(c.WithFamily("long"), 450*time.Hour)
	}
	for range 6 {
		h.Add(c.WithFamily("sweep"), 4*time.Minute)
		h.Add(c.WithFamily("build"), 10*time.Minute)
	}
	h.Add(c.WithFamily("probe"), 30*time.Minute)
	going := map[Class][]time.Duration{}
	for range 80 {
		going[c.WithFamily("long")] = append(going[c.WithFamily("long")], 300*time.Hour)
	}
	for _, tc := range []struct {
		name     string
		class    Class
		shortMin float64 // least weight at or below an hour
		shortMax float64 // most weight at or below an hour
		longMin  float64 // least weight at or above 300 hours
		borrowed bool
	}{
		// Four families, three of them short: three quarters of the
		// weight on runs of at most an hour, the long family's quarter
		// kept (a P90 that covers both).
		{"a burst of a family nobody has seen run: the short families count", c.WithFamily("burst"), 0.7, 0.8, 0.2, true},
		// A family with runs of its own: its own, as before.
		{"a family with runs of its own: unchanged", c.WithFamily("sweep"), 1, 1, 0, false},
		{"the long family's own: unchanged", c.WithFamily("long"), 0, 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := h.EstimateRunning(tc.class, going)
			short, long := weightBelow(e, time.Hour), 1-weightBelow(e, 300*time.Hour-time.Second)
			if short < tc.shortMin || short > tc.shortMax || long < tc.longMin || e.Borrowed != tc.borrowed {
				t.Errorf("%s: %.2f of the weight within an hour (want %.2f–%.2f), %.2f at 300 h or more (want ≥ %.2f), borrowed %v (want %v)",
					tc.class, short, tc.shortMin, tc.shortMax, long, tc.longMin, e.Borrowed, tc.borrowed)
			}
		})
	}
}

// TestUnseenFamilyPriorOneFamily: with a single family of finished runs
// in the view there is nothing to mix: the pooled runs stand, as before.
func TestUnseenFamilyPriorOneFamily(t *testing.T) {
	c := ClassOf("platform", "training", 1)
	h := NewHistory()
	for range 10 {
		h.Add(c.WithFamily("long"), 72*time.Hour)
	}
	e := h.Estimate(c.WithFamily("new"))
	if got := weightBelow(e, time.Hour); got != 0 || !e.Borrowed {
		t.Errorf("one family: %.2f of the weight within an hour, borrowed %v; want 0, true", got, e.Borrowed)
	}
}

// TestUnseenFamilyPriorGoing: a family none of whose runs has ended
// counts as one family whose run time is longer than its oldest run's
// age: a family of long jobs still going keeps the mixture's long tail,
// one whose only run started a minute ago changes nothing.
func TestUnseenFamilyPriorGoing(t *testing.T) {
	c := ClassOf("research", "training", 8)
	h := NewHistory()
	for range 6 {
		h.Add(c.WithFamily("sweep"), 4*time.Minute)
		h.Add(c.WithFamily("eval"), 2*time.Hour)
	}
	for _, tc := range []struct {
		name       string
		going      map[Class][]time.Duration
		short, mid float64 // weight within an hour, and within a day
	}{
		{"no runs going: two families, alike", nil, 0.5, 1},
		{"a family of long runs still going keeps the tail", map[Class][]time.Duration{c.WithFamily("pretrain"): {300 * time.Hour, 200 * time.Hour}}, 1.0 / 3, 2.0 / 3},
		{"a family whose run just started changes nothing", map[Class][]time.Duration{c.WithFamily("fresh"): {time.Minute}}, 0.5, 1},
		{"a family going past some: its weight to the longer ones", map[Class][]time.Duration{c.WithFamily("mid"): {time.Hour}}, 1.0 / 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := h.EstimateRunning(c.WithFamily("new"), tc.going)
			short, mid := weightBelow(e, time.Hour), weightBelow(e, 24*time.Hour)
			if math.Abs(short-tc.short) > 1e-9 || math.Abs(mid-tc.mid) > 1e-9 {
				t.Errorf("%.3f of the weight within an hour, %.3f within a day; want %.3f, %.3f", short, mid, tc.short, tc.mid)
			}
		})
	}
}

// weightBelow is the share of e's weight on run times at or below d.
func weightBelow(e Estimate, d time.Duration) float64 {
	total, below := 0.0, 0.0
	for i, v := range e.History {
		w := 1.0
		if e.cum != nil {
			w = e.weight(i)
		}
		total += w
		if v <= d {
			below += w
		}
	}
	return below / total
}
