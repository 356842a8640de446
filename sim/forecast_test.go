package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestForecastError measures the start-time forecast on both shared
// traces under pressure (10 nodes, the first 1,500 jobs, 20 forecasts
// each) and checks only that the figures are sane: forecasts were made
// and compared, coverage is a share, errors are not negative. The figures themselves are logged,
// not asserted: they depend on the trace.
func TestForecastError(t *testing.T) {
	for _, name := range []string{"philly", "helios"} {
		t.Run(name, func(t *testing.T) {
			tr := loadShared(t, name)
			p := examplePolicy(t)
			ScaleTenants(p, 0.1)
			rep, err := Compare(tr, Options{Config: Config{Policy: p, Nodes: 10, GPUsPerNode: 8,
				CheckpointEvery: DefaultCheckpointEvery, CheckpointCost: DefaultCheckpointCost, PlanInterval: DefaultPlanInterval,
				Forecasts: 20}, Seed: 1, Limit: 1500, Policies: []PolicyKind{Steward}})
			if err != nil {
				t.Fatal(err)
			}
			fe := rep.Results[0].Forecast
			if fe == nil || fe.Forecasts == 0 || fe.Jobs == 0 {
				t.Fatalf("forecast %+v: want forecasts compared with starts", fe)
			}
			if fe.CoverageP50 < 0 || fe.CoverageP50 > 1 || fe.CoverageP90 < 0 || fe.CoverageP90 > 1 || fe.MedianAbsErrorMin < 0 || fe.NoForecast > fe.Jobs {
				t.Errorf("forecast %+v: coverage must be a share, errors not negative", fe)
			}
			var b bytes.Buffer
			if err := WriteForecast(&b, []*Report{rep}); err != nil || !strings.HasPrefix(b.String(), "Forecast, "+rep.Trace+": ") {
				t.Errorf("WriteForecast: %q, %v", b.String(), err)
			}
			t.Log(strings.TrimSpace(b.String()))
		})
	}
}

// TestForecastCoveredP90: a P90 beyond the horizon (none) under a P50
// within it covers any start; with no P50 either, as covered does (a
// miss unless it started beyond the horizon).
func TestForecastCoveredP90(t *testing.T) {
	at := epoch.Add(10 * time.Hour)
	for _, tc := range []struct {
		name     string
		p50, p90 time.Time
		actual   time.Time
		beyond   bool
		want     bool
	}{
		{"a P50 and a P90: started by the P90", at.Add(-time.Hour), at, at, false, true},
		{"a P50 and a P90: started after the P90", at.Add(-time.Hour), at, at.Add(time.Minute), false, false},
		{"a P50 and no P90 and started within the horizon: covered", at, time.Time{}, at.Add(time.Hour), false, true},
		{"a P50 and no P90 and started beyond the horizon: covered", at, time.Time{}, at.Add(200 * time.Hour), true, true},
		{"neither and started within the horizon: a miss", time.Time{}, time.Time{}, at, false, false},
		{"neither and started beyond the horizon: covered", time.Time{}, time.Time{}, at, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := coveredP90(tc.p50, tc.p90, tc.actual, tc.beyond); got != tc.want {
				t.Errorf("coveredP90(%v, %v, %v, beyond %v) = %v, want %v", tc.p50, tc.p90, tc.actual, tc.beyond, got, tc.want)
			}
		})
	}
}

// TestForecastCovered: a job with no quantile (not within the horizon) is
// covered only when it did start beyond the horizon; one with a quantile
// when it started at or before it.
func TestForecastCovered(t *testing.T) {
	at := epoch.Add(10 * time.Hour)
	for _, tc := range []struct {
		name   string
		q      time.Time
		actual time.Time
		beyond bool
		want   bool
	}{
		{"started before its quantile", at, at.Add(-time.Minute), false, true},
		{"started at its quantile", at, at, false, true},
		{"started after its quantile", at, at.Add(time.Minute), false, false},
		{"no quantile and started within the horizon: a miss", time.Time{}, at, false, false},
		{"no quantile and started beyond the horizon: covered", time.Time{}, at, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := covered(tc.q, tc.actual, tc.beyond); got != tc.want {
				t.Errorf("covered(%v, %v, beyond %v) = %v, want %v", tc.q, tc.actual, tc.beyond, got, tc.want)
			}
		})
	}
}
