package engine

import (
	"testing"
	"time"
)

// TestSinceIsSub holds clock.since to time.Time.Sub: with and without a
// monotonic reading on either side, the zero time, differences that
// saturate, nanoseconds that borrow, other zones.
func TestSinceIsSub(t *testing.T) {
	mono := time.Now()
	wall := mono.Round(0)
	far := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		now, t time.Time
	}{
		{"an hour ago", t0, t0.Add(-time.Hour)},
		{"in the future", t0, t0.Add(90 * time.Second)},
		{"nanoseconds borrow", t0.Add(3), t0.Add(-time.Second + 7)},
		{"the zero time", t0, time.Time{}},
		{"now is the zero time", time.Time{}, t0},
		{"272 years and more", far.AddDate(300, 0, 0), far.AddDate(-300, 0, 0)},
		{"just inside the bound", t0, t0.Add(-(maxSinceSecs - 1) * time.Second)},
		{"other zone", t0.In(time.FixedZone("x", 3600)), t0.Add(-time.Minute)},
		{"now monotonic, t wall", mono, wall.Add(-time.Minute)},
		{"both monotonic", mono.Add(time.Second), mono},
		{"now wall, t monotonic", wall, mono.Add(-time.Minute)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newClock(c.now)
			if got, want := cl.since(c.t), c.now.Sub(c.t); got != want {
				t.Errorf("since = %v, Sub = %v", got, want)
			}
		})
	}
}
