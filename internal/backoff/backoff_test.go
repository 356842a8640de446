package backoff

import (
	"testing"
	"time"
)

func TestExponential(t *testing.T) {
	for _, tc := range []struct {
		name       string
		first, max time.Duration
		n          int
		want       time.Duration
	}{
		{"first attempt", time.Second, 30 * time.Second, 0, time.Second},
		{"negative count is the first", time.Second, 30 * time.Second, -3, time.Second},
		{"doubles", time.Second, 30 * time.Second, 3, 8 * time.Second},
		{"capped", time.Second, 30 * time.Second, 5, 30 * time.Second},
		{"stays capped for huge counts", time.Second, 30 * time.Second, 1 << 30, 30 * time.Second},
		{"cap below first", time.Second, 500 * time.Millisecond, 0, 500 * time.Millisecond},
		{"refused write, third refusal", 10 * time.Second, 10 * time.Minute, 2, 40 * time.Second},
		{"no overflow near the top", time.Duration(1 << 62), time.Duration(1<<63 - 1), 4, time.Duration(1<<63 - 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Exponential(tc.first, tc.max, tc.n); got != tc.want {
				t.Errorf("Exponential(%s, %s, %d) = %s, want %s", tc.first, tc.max, tc.n, got, tc.want)
			}
		})
	}
}

func TestJitter(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    time.Duration
		f    float64
		want time.Duration
	}{
		{"lowest draw is half", 4 * time.Second, 0, 2 * time.Second},
		{"middle draw", 4 * time.Second, 0.5, 3 * time.Second},
		{"highest draw stays within d", 4 * time.Second, 0.999999, 4*time.Second - 2*time.Microsecond},
		{"zero wait", 0, 0.7, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Jitter(tc.d, tc.f)
			if got != tc.want || got < tc.d/2 || got > tc.d {
				t.Errorf("Jitter(%s, %v) = %s, want %s within [d/2, d]", tc.d, tc.f, got, tc.want)
			}
		})
	}
}
