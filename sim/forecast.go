package sim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gpu-steward/steward/forecast"
	"github.com/gpu-steward/steward/policy/engine"
)

// The forecast's error, measured in the simulation (Config.Forecasts): at
// some job arrivals, spread evenly over the trace, the simulated
// controller forecasts the start of every job then waiting that never ran
// (package forecast, on the very snapshot the engine plans on, with run
// times from the jobs the simulation finished so far, as the controller
// learns them), and each forecast is compared with the start the
// simulation then gives the job.

// ForecastOptions are the replays each measured forecast makes: the
// controller's 10, of at most 64 plans each, so that a trace's
// measurement takes minutes.
var ForecastOptions = forecast.Options{Seed: 1, Replays: forecast.DefaultReplays, MaxPlans: 64}

// ForecastError is how well the forecasts of one trace did.
type ForecastError struct {
	// Forecasts is how many forecasts were made, Jobs how many waiting
	// jobs' starts they forecast and the simulation then started.
	Forecasts int `json:"forecasts"`
	Jobs      int `json:"jobs"`
	// NoForecast: of those, the ones with no P50 (not started within the
	// horizon in most replays); NoForecastStartedWithin those of them
	// the simulation started within the horizon all the same (the
	// forecast said "not within 7 days" and was wrong); NeverStarted:
	// forecast, never started.
	NoForecast              int `json:"no_forecast"`
	NoForecastStartedWithin int `json:"no_forecast_started_within"`
	NeverStarted            int `json:"never_started"`
	// StartedBeyondHorizon: of Jobs, the ones the simulation started more
	// than the horizon after the forecast.
	StartedBeyondHorizon int `json:"started_beyond_horizon"`
	// P50Given is the share of Jobs whose forecast has a P50.
	P50Given float64 `json:"p50_given"`
	// MedianAbsErrorMin is the median of |P50 − actual start| in minutes
	// (over the jobs with a P50); MedianWaitMin the median of actual start
	// − forecast time, for scale.
	MedianAbsErrorMin float64 `json:"median_abs_error_min"`
	MedianWaitMin     float64 `json:"median_wait_min"`
	// CoverageP50 and CoverageP90: the share of Jobs that started at or
	// before their P50 (P90), over all of them: a job with none (not
	// within the horizon) counts as covered when it did start beyond the
	// horizon, and as a miss when it started within it; a P90 beyond the
	// horizon under a P50 within it covers any start. Counting only the
	// jobs with one measured a minority that a forecast saying "not within
	// 7 days" for most of the queue chose.
	CoverageP50 float64 `json:"coverage_p50"`
	CoverageP90 float64 `json:"coverage_p90"`
	// Raw is the same measure of the replays' quantiles before
	// calibration (forecast.Calibration): the figures above are the
	// calibrated ones, which the controller shows.
	Raw *ForecastScore `json:"raw,omitempty"`
	// ExpectedRuntime: the jobs said their run time exactly
	// (steward.expected_runtime); else run times came from history.
	ExpectedRuntime bool    `json:"expected_runtime,omitempty"`
	WallSeconds     float64 `json:"wall_seconds"`
}

// ForecastScore is how one set of quantiles did (ForecastError's
// fields of the same names).
type ForecastScore struct {
	P50Given                float64 `json:"p50_given"`
	NoForecast              int     `json:"no_forecast"`
	NoForecastStartedWithin int     `json:"no_forecast_started_within"`
	MedianAbsErrorMin       float64 `json:"median_abs_error_min"`
	CoverageP50             float64 `json:"coverage_p50"`
	CoverageP90             float64 `json:"coverage_p90"`
}

type forecastSample struct {
	job      int32
	at       time.Duration
	p50, p90 time.Time // calibrated
	// raw50, raw90: the replays' own.
	raw50, raw90 time.Time
}

// forecaster measures forecasts during one Steward simulation.
type forecaster struct {
	every    int // forecast at every every-th arrival
	expected bool
	history  *forecast.History
	// cal calibrates each forecast on the starts of those made before
	// it, as the controller does.
	cal     forecast.Calibration
	fed     []bool // finished jobs already in the history
	samples []forecastSample
	made    int
	started time.Time
}

func newForecaster(s *simulator) *forecaster {
	return &forecaster{every: max(1, len(s.jobs)/s.cfg.Forecasts), expected: s.cfg.ForecastExpected,
		history: forecast.NewHistory(), fed: make([]bool, len(s.jobs)), started: time.Now()}
}

// afterSettle forecasts at the instants whose arrivals include a sampled
// one.
func (f *forecaster) afterSettle(s *simulator, arrivedFrom, arrivedTo int) {
	due := false
	for i := arrivedFrom; i < arrivedTo; i++ {
		if i%f.every == 0 {
			due = true
		}
	}
	if !due || len(s.queue)+len(s.heldList) == 0 {
		return
	}
	for i := range s.jobs {
		if j := &s.jobs[i]; j.state == done && !f.fed[i] {
			f.fed[i] = true
			f.history.Add(forecast.ClassOf(j.spec.Tenant, j.tier, j.spec.GPUs).WithFamily(j.spec.User), j.spec.RunTime)
		}
	}
	snap := s.snapshot()
	in := forecast.Input{Engine: s.eng, Snapshot: snap, Now: epoch.Add(s.now), Estimates: map[engine.JobRef]forecast.Estimate{},
		Done: map[engine.JobRef]time.Duration{}}
	// Runs still going, by class: what they ran so far tells of long runs
	// the finished ones cannot (forecast.History.EstimateRunning).
	going := map[forecast.Class][]time.Duration{}
	for _, ji := range s.active {
		j := &s.jobs[ji]
		c := forecast.ClassOf(j.spec.Tenant, j.tier, j.spec.GPUs).WithFamily(j.spec.User)
		going[c] = append(going[c], s.workDone(j))
	}
	byClass := map[forecast.Class]forecast.Estimate{}
	estimateOf := func(j *simJob) forecast.Estimate {
		if f.expected {
			return forecast.Estimate{Expected: j.spec.RunTime, Source: forecast.FromExpected}
		}
		c := forecast.ClassOf(j.spec.Tenant, j.tier, j.spec.GPUs).WithFamily(j.spec.User)
		e, ok := byClass[c]
		if !ok {
			e = f.history.EstimateRunning(c, going)
			byClass[c] = e
		}
		return e
	}
	estimate := func(ji int32) {
		j := &s.jobs[ji]
		if _, ok := in.Estimates[j.ref]; !ok {
			in.Estimates[j.ref] = estimateOf(j)
		}
	}
	// The work done so far, kept: a resumed run has done more than its
	// allocation's age, and a preempted job waiting again has work done.
	for _, ji := range s.active {
		estimate(ji)
		in.Done[s.jobs[ji].ref] = s.workDone(&s.jobs[ji])
	}
	for _, list := range [][]int32{s.queue, s.heldList} {
		for _, ji := range list {
			estimate(ji)
			if p := s.jobs[ji].progress; p > 0 {
				in.Done[s.jobs[ji].ref] = p
			}
		}
	}
	// What arrived in the last forecast.ArrivalWindow (the trace up to
	// now, nothing later): the replays' arrivals are drawn from it.
	from := max(s.now-forecast.ArrivalWindow, s.jobs[0].spec.Submit)
	in.ArrivalsSince = epoch.Add(from)
	// Nothing arrives after the trace's last job: the replays must not
	// add work the simulated world never gets (a trace cut by -limit
	// ends within days: Helios's first 3,000 jobs span 96 hours).
	in.ArrivalsUntil = epoch.Add(s.jobs[len(s.jobs)-1].spec.Submit)
	for i := s.nextArrival - 1; i >= 0 && s.jobs[i].spec.Submit >= from; i-- {
		j := &s.jobs[i]
		in.Arrivals = append(in.Arrivals, forecast.Arrival{At: epoch.Add(j.spec.Submit), Estimate: estimateOf(j),
			Demands: []engine.Demand{{
				Job:   engine.Job{Ref: j.ref, Tier: j.spec.Tier, Priority: j.tierPrio, Gang: j.spec.Allocs > 1},
				Group: "main", GPUsPerAlloc: j.spec.GPUs, Count: j.spec.Allocs, Since: epoch.Add(j.spec.Submit),
				Devices: s.devicesOf(j), Asks: j.spec.Model,
			}}})
	}
	slices.Reverse(in.Arrivals)
	opt := ForecastOptions
	opt.MaxNodes = s.cfg.ForecastMaxNodes
	res := forecast.Run(context.Background(), in, opt)
	// The starts seen since the last forecast score the forecasts made
	// before; this one is corrected with them, then kept to be scored.
	for _, ref := range f.cal.Waiting() {
		if j := &s.jobs[s.byRef[ref]]; j.firstStart >= 0 {
			f.cal.Started(ref, epoch.Add(j.firstStart))
		}
	}
	cres, _ := f.cal.Correct(res)
	f.cal.Record(res)
	f.made++
	for ref, fc := range res.Jobs {
		ji := s.byRef[ref]
		if s.jobs[ji].firstStart >= 0 {
			continue // ran before: its start is not what waiting users ask about
		}
		c := cres.Jobs[ref]
		f.samples = append(f.samples, forecastSample{job: ji, at: s.now, p50: c.P50, p90: c.P90, raw50: fc.P50, raw90: fc.P90})
	}
}

// result compares the forecasts with the starts the simulation gave.
func (f *forecaster) result(s *simulator) *ForecastError {
	horizon := ForecastOptions.Horizon
	if horizon <= 0 {
		horizon = forecast.DefaultHorizon
	}
	r := &ForecastError{Forecasts: f.made, ExpectedRuntime: f.expected}
	var waits []float64
	var started []forecastSample
	for _, x := range f.samples {
		j := &s.jobs[x.job]
		if j.firstStart < 0 {
			r.NeverStarted++
			continue
		}
		r.Jobs++
		started = append(started, x)
		waits = append(waits, (j.firstStart - x.at).Minutes())
		if j.firstStart-x.at > horizon {
			r.StartedBeyondHorizon++
		}
	}
	r.MedianWaitMin = median(waits)
	cal := score(s, started, horizon, func(x forecastSample) (time.Time, time.Time) { return x.p50, x.p90 })
	r.Raw = score(s, started, horizon, func(x forecastSample) (time.Time, time.Time) { return x.raw50, x.raw90 })
	r.P50Given, r.NoForecast, r.NoForecastStartedWithin = cal.P50Given, cal.NoForecast, cal.NoForecastStartedWithin
	r.MedianAbsErrorMin, r.CoverageP50, r.CoverageP90 = cal.MedianAbsErrorMin, cal.CoverageP50, cal.CoverageP90
	r.WallSeconds = time.Since(f.started).Seconds()
	return r
}

// score measures one set of quantiles over the samples of jobs that
// started.
func score(s *simulator, samples []forecastSample, horizon time.Duration, q func(forecastSample) (p50, p90 time.Time)) *ForecastScore {
	sc := &ForecastScore{}
	var errs []float64
	in50, in90 := 0, 0
	for _, x := range samples {
		j := &s.jobs[x.job]
		actual := epoch.Add(j.firstStart)
		beyond := j.firstStart-x.at > horizon
		p50, p90 := q(x)
		if p50.IsZero() {
			sc.NoForecast++
			if !beyond {
				sc.NoForecastStartedWithin++
			}
		} else {
			errs = append(errs, actual.Sub(p50).Abs().Minutes())
		}
		if covered(p50, actual, beyond) {
			in50++
		}
		if coveredP90(p50, p90, actual, beyond) {
			in90++
		}
	}
	sc.MedianAbsErrorMin = median(errs)
	if n := len(samples); n > 0 {
		sc.CoverageP50 = float64(in50) / float64(n)
		sc.CoverageP90 = float64(in90) / float64(n)
		sc.P50Given = float64(n-sc.NoForecast) / float64(n)
	}
	return sc
}

// covered reports whether a job that started at actual started by its
// forecast quantile q: at or before it, or, with none (not within the
// horizon), beyond the horizon as forecast.
func covered(q, actual time.Time, beyond bool) bool {
	if q.IsZero() {
		return beyond
	}
	return !actual.After(q)
}

// coveredP90 is covered for a P90: one beyond the horizon (none) while
// the P50 is within it says the start comes before the horizon or later,
// and the start, whenever it came, came before the P90.
func coveredP90(p50, p90, actual time.Time, beyond bool) bool {
	if p90.IsZero() && !p50.IsZero() {
		return true
	}
	return covered(p90, actual, beyond)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// WriteForecast prints the forecast's error of each report that measured
// it, one line a trace.
func WriteForecast(w io.Writer, reps []*Report) error {
	for _, rep := range reps {
		for _, r := range rep.Results {
			fe := r.Forecast
			if fe == nil {
				continue
			}
			basis := "run times from finished similar jobs"
			if fe.ExpectedRuntime {
				basis = "run times as the jobs said (steward.expected_runtime = their run time)"
			}
			if _, err := fmt.Fprintf(w, "Forecast, %s: %d forecasts of %d waiting jobs' starts (%s): median |P50 − start| %.1f min "+
				"(median wait %.1f min); started by the P50 %.0f%%, by the P90 %.0f%% (no P50: a miss unless it started beyond the horizon); "+
				"%.0f%% with a P50; %d with no P50 (not within the horizon), %d of them started within it; %d started beyond the horizon; %d never started\n",
				rep.Trace, fe.Forecasts, fe.Jobs, basis, fe.MedianAbsErrorMin, fe.MedianWaitMin, fe.CoverageP50*100, fe.CoverageP90*100,
				fe.P50Given*100, fe.NoForecast, fe.NoForecastStartedWithin, fe.StartedBeyondHorizon, fe.NeverStarted); err != nil {
				return err
			}
			if raw := fe.Raw; raw != nil {
				if _, err := fmt.Fprintf(w, "Forecast, %s, raw (the replays' quantiles before calibration): median |P50 − start| %.1f min; "+
					"started by the P50 %.0f%%, by the P90 %.0f%%; %.0f%% with a P50; %d with no P50, %d of them started within the horizon\n",
					rep.Trace, raw.MedianAbsErrorMin, raw.CoverageP50*100, raw.CoverageP90*100, raw.P50Given*100, raw.NoForecast,
					raw.NoForecastStartedWithin); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
