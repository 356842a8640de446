package engine

import "time"

// IdleSince returns when the current idle stretch began: the time of the
// first sample after the last one at or above threshold (the first sample
// when none was). A single busy sample restarts the timer. ok is false when
// there are no samples or the latest one is busy.
func IdleSince(samples []Sample, threshold float64) (since time.Time, ok bool) {
	if len(samples) == 0 {
		return time.Time{}, false
	}
	last := len(samples) - 1
	if samples[last].Util >= threshold {
		return time.Time{}, false
	}
	i := last
	for i > 0 && samples[i-1].Util < threshold {
		i--
	}
	return samples[i].At, true
}

// meanUtil is the mean of the samples since a time, for reasons.
func meanUtil(samples []Sample, since time.Time) float64 {
	var sum float64
	var n int
	for _, s := range samples {
		if !s.At.Before(since) {
			sum += s.Util
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
