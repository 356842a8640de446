// Package backoff is Steward's one retry backoff: how long to wait before
// the next attempt, as a pure function of how many attempts failed.
//
// It is hand-written rather than github.com/cenkalti/backoff (in the module
// graph through Nomad): that library's ExponentialBackOff is a stateful
// timer with its own clock (MaxElapsedTime, Reset) and jitter on both sides
// of the interval, so a wait could exceed its cap. Steward's callers keep
// the count themselves (a refused write's count lives in the controller's
// per-job state, the loops count their failures), want the same wait for
// the same count, so that tests can assert it, and never more than the cap.
package backoff

import "time"

// Exponential is the wait after n doublings: first·2^n, at most max. n ≤ 0
// gives first (or max, when that is smaller).
func Exponential(first, max time.Duration, n int) time.Duration {
	d := first
	for i := 0; i < n && d < max; i++ {
		if d > max/2 {
			return max // doubling would pass max (or overflow)
		}
		d *= 2
	}
	return min(d, max)
}

// Jitter spreads a wait d within [d/2, d] by a draw f in [0, 1), so that
// callers failing together do not retry together. f is the caller's, so
// that a test can pass a fixed one.
func Jitter(d time.Duration, f float64) time.Duration {
	return d/2 + time.Duration(f*float64(d/2))
}
