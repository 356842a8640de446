package forecast

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// calStory builds a calibration from n past forecasts made at t0, each of
// one job with the P50 and P90 waits given (0: none within the horizon),
// of which started ones began after wait; the rest still wait.
type calPast struct {
	n        int
	p50, p90 time.Duration
	wait     time.Duration
	started  bool
}

// TestCalibration: one named case per story of how past forecasts did.
func TestCalibration(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	now := t0.Add(48 * time.Hour)
	h := time.Hour
	tests := []struct {
		name     string
		past     []calPast
		p50, p90 time.Duration // the new raw forecast's waits (0: none)
		want50   time.Duration // corrected (0: none)
		want90   time.Duration
		note     string
	}{
		{"too few starts: left as the replays said", []calPast{{MinCalibration - 1, h, 2 * h, 3 * h, true}},
			h, 2 * h, h, 2 * h, "not calibrated (too few starts seen)"},
		{"starts came at three times the forecast: P50 and P90 scaled", []calPast{{100, h, 2 * h, 3 * h, true}},
			h, 2 * h, 3 * h, 3 * h, "calibrated on past starts: P50 1h–6h ×3.00 (100 starts), P90 1h–6h ×1.50 (100 starts)"},
		{"starts came at half the forecast: pulled in", []calPast{{100, 2 * h, 4 * h, h, true}},
			2 * h, 4 * h, h, h, "calibrated on past starts: P50 1h–6h ×0.50 (100 starts), P90 1h–6h ×0.25 (100 starts)"},
		{"half started on time and half still wait: the P50 stands and no P90 is known", []calPast{{50, h, 2 * h, h, true}, {50, h, 2 * h, 0, false}},
			h, 2 * h, h, 2 * h, "calibrated on past starts: P50 1h–6h ×1.00 (50 starts)"},
		{"none within the horizon: the waits such forecasts came to", []calPast{{100, 0, 0, 5 * h, true}},
			0, 0, 5 * h, 5 * h, "calibrated on past starts: P50 beyond the horizon → 5h0m0s (100 starts), P90 beyond the horizon → 5h0m0s (100 starts)"},
		{"forecasts of days came in hours and of hours on time: each bin its own factor",
			[]calPast{{100, 2 * h, 3 * h, 2 * h, true}, {100, 48 * h, 72 * h, 5 * h, true}},
			2 * h, 3 * h, 2 * h, 2 * h, "calibrated on past starts: P50 1h–6h ×1.00 (100 starts), P50 1d–3d ×0.10 (100 starts), " +
				"P90 1h–6h ×0.67 (100 starts), P90 over 3d ×0.07 (100 starts)"},
		{"a P50 scaled past the horizon stays at it", []calPast{{100, h, 2 * h, 200 * h, true}},
			h, 2 * h, DefaultHorizon, 0, "calibrated on past starts: P50 1h–6h ×200.00 (100 starts), P90 1h–6h ×100.00 (100 starts)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c Calibration
			n := 0
			for _, p := range tc.past {
				n = recordPast(&c, t0, n, p.n, JobForecast{P50: at(t0, p.p50), P90: at(t0, p.p90)}, p.wait, p.started)
			}
			ref := engine.JobRef{Namespace: "ml", ID: "new"}
			raw := &Result{At: now, Jobs: map[engine.JobRef]*JobForecast{ref: {P50: at(now, tc.p50), P90: at(now, tc.p90)}}}
			got, k := c.Correct(raw)
			f := got.Jobs[ref]
			if f.P50 != at(now, tc.want50) || f.P90 != at(now, tc.want90) {
				t.Errorf("corrected P50 %v P90 %v, want %v %v", f.P50, f.P90, at(now, tc.want50), at(now, tc.want90))
			}
			if k.String() != tc.note {
				t.Errorf("note %q, want %q", k.String(), tc.note)
			}
			if short := k.Note(); (short == "not calibrated (too few starts seen)") != (tc.note == short) {
				t.Errorf("short note %q for %q", short, tc.note)
			}
			if raw.Jobs[ref].P50 != at(now, tc.p50) {
				t.Error("the raw result changed")
			}
		})
	}
}

func at(t time.Time, d time.Duration) time.Time {
	if d == 0 {
		return time.Time{}
	}
	return t.Add(d)
}

// TestCalibrationCausal: a forecast is corrected only with forecasts made
// before it; jobs gone without starting count for nothing.
func TestCalibrationCausal(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	var c Calibration
	for i := range 100 {
		ref := engine.JobRef{Namespace: "ml", ID: fmt.Sprint("job-", i)}
		c.Record(&Result{At: t0, Jobs: map[engine.JobRef]*JobForecast{ref: {P50: t0.Add(time.Hour), P90: t0.Add(2 * time.Hour)}}})
		if i%2 == 0 {
			c.Started(ref, t0.Add(3*time.Hour))
		} else {
			c.Forget(ref)
		}
	}
	if len(c.Waiting()) != 0 {
		t.Fatalf("waiting %v, want none", c.Waiting())
	}
	for _, tc := range []struct {
		name string
		now  time.Time
		want string
	}{
		{"made at the same instant: not seen yet", t0, "not calibrated (too few starts seen)"},
		{"made before: the 50 that started", t0.Add(time.Hour), "calibrated on past starts: P50 1h–6h ×3.00 (50 starts), P90 1h–6h ×1.50 (50 starts)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, k := c.Correct(&Result{At: tc.now, Jobs: map[engine.JobRef]*JobForecast{}})
			if k.String() != tc.want {
				t.Errorf("%q, want %q", k.String(), tc.want)
			}
		})
	}
}

// BenchmarkCalibrationCorrect: a correction at its most (MaxPending
// forecasts waiting, every kind's window full) costs milliseconds beside a
// forecast's seconds.
func BenchmarkCalibrationCorrect(b *testing.B) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	var c Calibration
	for i := range MaxPending + 40000 {
		ref := engine.JobRef{Namespace: "ml", ID: fmt.Sprint("job-", i)}
		w := time.Duration(1+i%200) * 10 * time.Minute
		at := t0.Add(time.Duration(i) * time.Second)
		c.Record(&Result{At: at, Jobs: map[engine.JobRef]*JobForecast{ref: {P50: at.Add(w), P90: at.Add(2 * w)}}})
		if i < 40000 {
			c.Started(ref, at.Add(time.Duration(i%7)*w/3))
		}
	}
	res := &Result{At: t0.Add(100 * time.Hour), Jobs: map[engine.JobRef]*JobForecast{}}
	for i := range 1000 {
		res.Jobs[engine.JobRef{Namespace: "ml", ID: fmt.Sprint("new-", i)}] = &JobForecast{P50: res.At.Add(time.Hour), P90: res.At.Add(3 * time.Hour)}
	}
	b.ResetTimer()
	for range b.N {
		c.Correct(res)
	}
}

// recordPast records count past forecasts like f, made at made, of jobs
// numbered on from n, and, when started, each job's start wait after
// made; it returns the last number used.
func recordPast(c *Calibration, made time.Time, n, count int, f JobForecast, wait time.Duration, started bool) int {
	for range count {
		n++
		ref := engine.JobRef{Namespace: "ml", ID: fmt.Sprint("job-", n)}
		jf := f
		c.Record(&Result{At: made, Jobs: map[engine.JobRef]*JobForecast{ref: &jf}})
		if started {
			c.Started(ref, made.Add(wait))
		}
	}
	return n
}
