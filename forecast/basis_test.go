package forecast

import (
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestEstimateBasis: what a job's run time rests on, the bucket its
// forecast is calibrated in.
func TestEstimateBasis(t *testing.T) {
	h, c := familyHistory()
	for _, tc := range []struct {
		name string
		est  Estimate
		want Basis
	}{
		{"a family with enough runs: its own", h.Estimate(c.WithFamily("short")), BasisOwn},
		{"a family with too few runs: borrowed from its class", h.Estimate(c.WithFamily("new")), BasisBorrowed},
		{"a family never seen: borrowed", h.Estimate(c.WithFamily("unseen")), BasisBorrowed},
		{"no family named: its class's runs are its own", h.Estimate(c), BasisOwn},
		{"another tier with no runs at all: the default, borrowed", h.Estimate(ClassOf("a", "build", 1)), BasisBorrowed},
		{"a class of too few runs: the tier's, borrowed", h.Estimate(ClassOf("b", "training", 1)), BasisBorrowed},
		{"the job said its run time", Estimate{Expected: time.Hour, Source: FromExpected}, BasisExpected},
		{"a service that runs until stopped", Estimate{Forever: true}, BasisOwn},
		{"the running runs counted: still the family's own", h.EstimateRunning(c.WithFamily("short"),
			map[Class][]time.Duration{c.WithFamily("short"): {time.Hour}}), BasisOwn},
		{"the running runs counted: still borrowed", h.EstimateRunning(c.WithFamily("new"),
			map[Class][]time.Duration{c.WithFamily("new"): {time.Hour}}), BasisBorrowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.est.Basis(); got != tc.want {
				t.Errorf("basis %v, want %v", got, tc.want)
			}
			// A replay's bootstrap draw keeps what it rests on.
			b := bootstrap{seed: 1}
			if got := b.of(tc.est).Basis(); got != tc.want {
				t.Errorf("bootstrapped basis %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCalibrationByBasis: each forecast is corrected with the past
// forecasts of its own basis. Philly's burst of a family nobody had seen
// run was forecast ten times late; pooled with them, the forecasts of
// families with runs of their own, about right, were pulled in tenfold
// (the old calibration's P50 covered 11 % of one forecast's starts that
// the replays' own P50 covered 94 % of).
func TestCalibrationByBasis(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	now := t0.Add(48 * time.Hour)
	h := time.Hour
	type past struct {
		n     int
		basis Basis
		wait  time.Duration // the forecasts' P50 2h, P90 3h
	}
	tests := []struct {
		name           string
		past           []past
		basis          Basis // the new forecast's, P50 2h and P90 3h
		want50, want90 time.Duration
	}{
		{"a burst of borrowed forecasts ten times late leaves forecasts of a family's own runs alone",
			[]past{{100, BasisBorrowed, 12 * time.Minute}, {100, BasisOwn, 2 * h}}, BasisOwn, 2 * h, 2 * h},
		{"the borrowed forecasts are corrected by the borrowed ones",
			[]past{{100, BasisBorrowed, 12 * time.Minute}, {100, BasisOwn, 2 * h}}, BasisBorrowed, 12 * time.Minute, 12 * time.Minute},
		{"too few starts of its basis: the replays' own stands, whatever others did",
			[]past{{100, BasisBorrowed, 12 * time.Minute}, {MinCalibration - 1, BasisExpected, 2 * h}}, BasisExpected, 2 * h, 3 * h},
		{"a basis out of range counts as borrowed",
			[]past{{100, BasisBorrowed, 12 * time.Minute}}, Basis(200), 12 * time.Minute, 12 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c Calibration
			n := 0
			for _, p := range tc.past {
				n = recordPast(&c, t0, n, p.n, JobForecast{P50: t0.Add(2 * h), P90: t0.Add(3 * h), Basis: p.basis}, p.wait, true)
			}
			ref := engine.JobRef{Namespace: "ml", ID: "new"}
			raw := &Result{At: now, Jobs: map[engine.JobRef]*JobForecast{ref: {P50: now.Add(2 * h), P90: now.Add(3 * h), Basis: tc.basis}}}
			got, ks := c.Correct(raw)
			if f := got.Jobs[ref]; f.P50 != now.Add(tc.want50) || f.P90 != now.Add(tc.want90) {
				t.Errorf("corrected P50 %v P90 %v, want %v %v (%s)", f.P50.Sub(now), f.P90.Sub(now), tc.want50, tc.want90, ks)
			}
		})
	}
}

// TestCorrectionsNote: the log names each basis's factors; the status's
// note counts the starts of all.
func TestCorrectionsNote(t *testing.T) {
	var ks Corrections
	ks[BasisOwn].P50.Factor[1], ks[BasisOwn].P50.Starts[1] = 1, 100
	ks[BasisBorrowed].P50.Factor[1], ks[BasisBorrowed].P50.Starts[1] = 0.1, 40
	want := "calibrated on past starts: P50 1h–6h ×1.00 (100 starts); borrowed run times: P50 1h–6h ×0.10 (40 starts)"
	if got := ks.String(); got != want {
		t.Errorf("String %q, want %q", got, want)
	}
	if got := ks.Note(); got != "calibrated on 140 past starts" {
		t.Errorf("Note %q", got)
	}
	if got := (Corrections{}).Note(); got != "not calibrated (too few starts seen)" {
		t.Errorf("empty Note %q", got)
	}
}

// TestForecastCarriesBasis: each job's forecast says what its run time
// rests on, for Calibration to bucket it.
func TestForecastCarriesBasis(t *testing.T) {
	h := NewHistory()
	c := ClassOf("a", "training", 1)
	for range minSimilar {
		h.Add(c.WithFamily("known"), 30*time.Minute)
	}
	snap := &engine.Snapshot{Nodes: []engine.Node{node("n1", 1)},
		Allocs: []engine.Alloc{running("a", "run", "training", "n1", 1, 5*time.Minute, 0)},
		Waiting: []engine.Demand{waiting("a", "known-1", "training", 1, 1, time.Minute), waiting("a", "unseen-1", "training", 1, 1, time.Minute),
			waiting("a", "said-1", "training", 1, 1, time.Minute), waiting("a", "none-1", "training", 1, 1, time.Minute)}}
	est := map[engine.JobRef]Estimate{
		ref("a", "run"):      h.Estimate(c.WithFamily("known")),
		ref("a", "known-1"):  h.Estimate(c.WithFamily("known")),
		ref("a", "unseen-1"): h.Estimate(c.WithFamily("unseen")),
		ref("a", "said-1"):   {Expected: time.Hour, Source: FromExpected},
	}
	_, _, res := forecastOf(t, snap, est)
	for _, tc := range []struct {
		name string
		job  string
		want Basis
	}{
		{"its family's runs", "known-1", BasisOwn},
		{"a family nobody has seen run", "unseen-1", BasisBorrowed},
		{"its own expected_runtime", "said-1", BasisExpected},
		{"no estimate at all: the default", "none-1", BasisBorrowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := res.Jobs[ref("a", tc.job)]
			if f == nil || f.Basis != tc.want {
				t.Fatalf("forecast %+v, want basis %v", f, tc.want)
			}
		})
	}
}
