package forecast

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Calibration corrects forecasts with how the cluster's own past
// forecasts did, as production forecasters do: the replays' model is
// wrong in ways no trace at hand shows (Philly's starts came long before
// its P90 said, Helios's after it), and the starts it has seen say by how
// much. It keeps the raw forecasts made (Record) and, once their jobs
// started (Started), the waits they came to; Correct then moves each new
// quantile so that, on those past forecasts, the share of starts that
// came by it is the quantile's (conformalized quantiles):
//
//   - a quantile the replays put within the horizon is scaled: the wait
//     until it times the factor s with which a share q of past waits came
//     by s × their own forecast's wait (P50: q = 0.5, P90: 0.9), one
//     factor per bin of that wait (WaitBins);
//   - a quantile the replays put beyond the horizon (none) becomes the
//     q-quantile of the waits of past forecasts that had none either;
//   - each forecast is corrected with the past forecasts of its Basis
//     only (its job's run time from its family's own runs, its
//     expected_runtime, or borrowed from other families): how wrong a
//     forecast is depends on what it rests on. On Philly a burst of a
//     family nobody had seen run was forecast days late (×0.1), and one
//     correction for all pulled the next forecasts, of families with
//     runs, in by as much: their P50 covered 11 % where raw it covered
//     94 %.
//
// It is causal (a forecast is corrected with starts seen before it was
// made: jobs still waiting count as waits at least as long as theirs so
// far, the Kaplan-Meier estimate's censored values, or the long waits
// would be missing from the starts seen so far), online (the newest
// CalibrationWindow outcomes) and falls back to the raw quantile while
// fewer than MinCalibration starts were seen. It is pure (the caller says
// what started, and when) and deterministic. Not safe for concurrent use.
type Calibration struct {
	// Horizon is the forecasts' (default DefaultHorizon): a quantile
	// corrected beyond it is none.
	Horizon time.Duration
	pending []madeForecast // by when made, then job
	// outcomes, oldest first, at most CalibrationWindow each, by kind
	// (kind): the bins of the P50's and the P90's waits, none (beyond the
	// horizon) a bin of its own. Kept apart so that a burst of forecasts
	// of one kind does not push the others out (Philly's burst of a
	// thousand jobs forecast days ahead left the forecasts of hours
	// uncorrected).
	outcomes map[int][]outcome
}

// CalibrationWindow is how many of the newest observed starts of each
// kind (the bins of the P50's and the P90's waits) calibrate: enough for
// a 90th percentile to rest on twenty misses, few enough to follow a
// burst's change within hours (on Philly, 500 kept the burst's ×0.1 for
// the forecasts after it: their P50 covered 31 %, 40 % with 200; 100
// gave 43 % on ten misses a P90).
const CalibrationWindow = 200

// MinCalibration is the least observed starts, of forecasts like the one
// corrected (a wait in the same bin, or none), that move it.
const MinCalibration = 30

// MaxPending bounds the forecasts kept while their jobs wait; beyond it
// the oldest go.
const MaxPending = 20000

// calibrationFloor is the least wait a ratio is taken of: a job forecast
// to start now has no wait to scale.
const calibrationFloor = time.Minute

// madeForecast is one job's raw forecast: the waits until its P50 and P90
// from when it was made; beyond (-1): none within the horizon.
type madeForecast struct {
	job      engine.JobRef
	at       time.Time
	p50, p90 time.Duration
	basis    Basis
}

const beyond = time.Duration(-1)

type outcome struct {
	made madeForecast
	wait time.Duration
}

// Record keeps res's raw forecasts, to be scored once their jobs start.
func (c *Calibration) Record(res *Result) {
	refs := make([]engine.JobRef, 0, len(res.Jobs))
	for ref := range res.Jobs {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, cmpRef)
	for _, ref := range refs {
		f := res.Jobs[ref]
		c.pending = append(c.pending, madeForecast{job: ref, at: res.At, p50: waitUntil(res.At, f.P50), p90: waitUntil(res.At, f.P90),
			basis: min(f.Basis, basisCount-1)})
	}
	if n := len(c.pending) - MaxPending; n > 0 {
		c.pending = slices.Delete(c.pending, 0, n)
	}
}

func waitUntil(at, q time.Time) time.Duration {
	if q.IsZero() {
		return beyond
	}
	return max(q.Sub(at), 0)
}

func cmpRef(a, b engine.JobRef) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
}

// Waiting returns the jobs whose forecasts wait for their start, sorted.
func (c *Calibration) Waiting() []engine.JobRef {
	var refs []engine.JobRef
	for _, p := range c.pending {
		refs = append(refs, p.job)
	}
	slices.SortFunc(refs, cmpRef)
	return slices.Compact(refs)
}

// Started scores the forecasts of a job that started at: each one's wait
// becomes an outcome.
func (c *Calibration) Started(job engine.JobRef, at time.Time) {
	c.pending = slices.DeleteFunc(c.pending, func(p madeForecast) bool {
		if p.job != job {
			return false
		}
		if !at.Before(p.at) {
			k := p.kind()
			if c.outcomes == nil {
				c.outcomes = map[int][]outcome{}
			}
			c.outcomes[k] = append(c.outcomes[k], outcome{made: p, wait: at.Sub(p.at)})
			if n := len(c.outcomes[k]) - CalibrationWindow; n > 0 {
				c.outcomes[k] = slices.Delete(c.outcomes[k], 0, n)
			}
		}
		return true
	})
}

// kind is which of Calibration.outcomes a forecast's outcome goes to:
// its basis, and its P50's and P90's bins (waitBins: none).
func (m madeForecast) kind() int {
	bin := func(w time.Duration) int {
		if w == beyond {
			return waitBins
		}
		return binOf(w)
	}
	return (int(m.basis)*(waitBins+1)+bin(m.p50))*(waitBins+1) + bin(m.p90)
}

// Starts is how many outcomes (forecasts whose jobs started) are kept.
func (c *Calibration) Starts() int {
	n := 0
	for _, list := range c.outcomes {
		n += len(list)
	}
	return n
}

// Forget drops the forecasts of a job that went without starting.
func (c *Calibration) Forget(job engine.JobRef) {
	c.pending = slices.DeleteFunc(c.pending, func(p madeForecast) bool { return p.job == job })
}

// Correction is how a forecast was calibrated, per quantile.
type Correction struct {
	P50, P90 QuantileCorrection
}

// Corrections are the corrections of the forecasts of each Basis.
type Corrections [basisCount]Correction

// String says what the corrections did, for the log: the jobs' own run
// times' first, then each other basis's named.
func (ks Corrections) String() string {
	var parts []string
	for b, k := range ks {
		s := k.parts()
		switch {
		case s == "":
		case Basis(b) == BasisOwn:
			parts = append(parts, s)
		default:
			parts = append(parts, Basis(b).String()+": "+s)
		}
	}
	if len(parts) == 0 {
		return "not calibrated (too few starts seen)"
	}
	return "calibrated on past starts: " + strings.Join(parts, "; ")
}

// Note says what the corrections rest on, briefly: the past starts of
// every basis together.
func (ks Corrections) Note() string {
	n := 0
	for _, k := range ks {
		n += k.starts()
	}
	if n == 0 {
		return "not calibrated (too few starts seen)"
	}
	return fmt.Sprintf("calibrated on %d past starts", n)
}

// WaitBins bound the bins of a forecast's wait (until its quantile) that
// are calibrated apart: under an hour, 1–6 hours, 6–24 hours, 1–3 days, 3
// days to the horizon. How wrong a forecast is depends on how far ahead it
// looks: on Philly a burst's forecasts of days came within hours (×0.1),
// while those of hours after it were about right, and one factor for all
// pulled the latter in to cover none.
var WaitBins = [...]time.Duration{time.Hour, 6 * time.Hour, 24 * time.Hour, 72 * time.Hour}

const waitBins = len(WaitBins) + 1

func binOf(w time.Duration) int {
	for i, b := range WaitBins {
		if w < b {
			return i
		}
	}
	return len(WaitBins)
}

func binName(i int) string {
	names := [...]string{"under 1h", "1h–6h", "6h–24h", "1d–3d", "over 3d"}
	return names[i]
}

// QuantileCorrection moves one quantile: a quantile within the horizon
// is scaled by the factor of its wait's bin (WaitBins; 0: left as the
// replays said), one beyond it becomes Beyond after the forecast (0: left
// beyond). Starts and BeyondStarts are the observed starts each rests on.
type QuantileCorrection struct {
	Factor [waitBins]float64
	Starts [waitBins]int
	Beyond time.Duration
	// BeyondStarts: the starts of forecasts that had none.
	BeyondStarts int
}

// String says what a correction did, for notes: "P50 ×0.41 (820
// starts), P90 ×1.90 (820 starts)".
func (k Correction) String() string {
	if s := k.parts(); s != "" {
		return "calibrated on past starts: " + s
	}
	return "not calibrated (too few starts seen)"
}

// parts is String's list of factors ("" for none).
func (k Correction) parts() string {
	s := ""
	for i, q := range []QuantileCorrection{k.P50, k.P90} {
		name := [...]string{"P50", "P90"}[i]
		for b, f := range q.Factor {
			if f > 0 {
				s += fmt.Sprintf(", %s %s ×%.2f (%d starts)", name, binName(b), f, q.Starts[b])
			}
		}
		if q.Beyond > 0 {
			s += fmt.Sprintf(", %s beyond the horizon → %s (%d starts)", name, q.Beyond.Round(time.Minute), q.BeyondStarts)
		}
	}
	if s == "" {
		return ""
	}
	return s[2:]
}

// Note says what a correction rests on, briefly (for a record or the
// status, where every waiting job carries it): "calibrated on 1457 past
// starts".
func (k Correction) Note() string {
	if n := k.starts(); n > 0 {
		return fmt.Sprintf("calibrated on %d past starts", n)
	}
	return "not calibrated (too few starts seen)"
}

// starts is how many past starts a correction rests on: the P50's, or
// the P90's where the P50 has none.
func (k Correction) starts() int {
	n := k.P50.BeyondStarts
	for _, c := range k.P50.Starts {
		n += c
	}
	if n == 0 {
		for _, c := range k.P90.Starts {
			n = max(n, c)
		}
		n = max(n, k.P90.BeyondStarts)
	}
	return n
}

// Correct returns res with its quantiles calibrated on the outcomes seen
// so far and the forecasts still waiting (censored at res.At), and the
// corrections made, one per Basis (each job's by its forecast's basis);
// res is left alone.
func (c *Calibration) Correct(res *Result) (*Result, Corrections) {
	horizon := c.Horizon
	if horizon <= 0 {
		horizon = DefaultHorizon
	}
	var ks Corrections
	for b := range ks {
		ks[b].P50 = c.correction(res.At, Basis(b), 0.5, func(m madeForecast) time.Duration { return m.p50 })
		ks[b].P90 = c.correction(res.At, Basis(b), 0.9, func(m madeForecast) time.Duration { return m.p90 })
	}
	out := *res
	out.Jobs = make(map[engine.JobRef]*JobForecast, len(res.Jobs))
	for ref, f := range res.Jobs {
		g := *f
		k := ks[min(f.Basis, basisCount-1)]
		g.P50 = k.P50.apply(res.At, f.P50, horizon, true)
		g.P90 = k.P90.apply(res.At, f.P90, horizon, false)
		// Quantiles corrected apart may cross: sorted, they are again
		// quantiles (none, beyond the horizon, is the latest).
		if later(g.P50, g.P90) {
			g.P50, g.P90 = g.P90, g.P50
		}
		out.Jobs[ref] = &g
	}
	return &out, ks
}

// later reports whether a is after b, none (zero) after any time.
func later(a, b time.Time) bool {
	switch {
	case a.IsZero():
		return !b.IsZero()
	case b.IsZero():
		return false
	}
	return a.After(b)
}

// apply corrects one quantile. A corrected wait beyond the horizon is
// none, except that a P50 the replays put within it (clamp) stays at the
// horizon: the forecast cannot see further, and a median scaled past it
// would tell a user whose job the replays start within days "not within
// 7 days" (Helios: 29 more of 331 said so, and started within it).
func (q QuantileCorrection) apply(at, raw time.Time, horizon time.Duration, clamp bool) time.Time {
	var wait time.Duration
	switch {
	case raw.IsZero() && q.Beyond > 0:
		wait = q.Beyond
	case raw.IsZero():
		return raw
	case q.Factor[binOf(raw.Sub(at))] > 0:
		wait = time.Duration(q.Factor[binOf(raw.Sub(at))] * float64(max(raw.Sub(at), calibrationFloor)))
	default:
		return raw
	}
	switch {
	case wait > horizon && clamp && !raw.IsZero():
		wait = horizon
	case wait > horizon:
		return time.Time{}
	}
	return at.Add(wait)
}

// correction is one quantile's of the forecasts of one basis: the
// factor from the forecasts that had it within the horizon, the wait
// from those that had none, each from the starts seen (and the waits
// still going) before now.
func (c *Calibration) correction(now time.Time, basis Basis, q float64, of func(madeForecast) time.Duration) QuantileCorrection {
	var ratios [waitBins][]survival
	var waits []survival
	add := func(m madeForecast, wait time.Duration, going bool) {
		if !m.at.Before(now) || m.basis != basis {
			return // made since (not seen yet), or of another basis
		}
		if w := of(m); w == beyond {
			waits = append(waits, survival{float64(wait), going})
		} else {
			b := binOf(w)
			ratios[b] = append(ratios[b], survival{float64(wait) / float64(max(w, calibrationFloor)), going})
		}
	}
	kinds := slices.Sorted(maps.Keys(c.outcomes)) // an order for determinism's sake
	for _, kind := range kinds {
		if kind/((waitBins+1)*(waitBins+1)) != int(basis) {
			continue // another basis's (madeForecast.kind)
		}
		for _, o := range c.outcomes[kind] {
			add(o.made, o.wait, false)
		}
	}
	for _, p := range c.pending {
		add(p, now.Sub(p.at), true)
	}
	var k QuantileCorrection
	for b, rs := range ratios {
		if n := events(rs); n >= MinCalibration {
			if v, ok := kmQuantile(rs, q); ok {
				k.Factor[b], k.Starts[b] = v, n
			}
		}
	}
	if n := events(waits); n >= MinCalibration {
		if v, ok := kmQuantile(waits, q); ok {
			k.Beyond, k.BeyondStarts = time.Duration(v), n
		}
	}
	return k
}

// survival is one value of a Kaplan-Meier estimate: observed, or, going,
// known only to be longer.
type survival struct {
	v     float64
	going bool
}

func events(s []survival) int {
	n := 0
	for _, x := range s {
		if !x.going {
			n++
		}
	}
	return n
}

// kmQuantile is the least value by which a share q of the population
// ends, by the Kaplan-Meier estimate (values going count as longer than
// theirs); ok is false when the values seen do not reach q (too many
// still going).
func kmQuantile(s []survival, q float64) (float64, bool) {
	s = slices.Clone(s)
	// Ascending; at a tie the observed first: one going at v outlives it.
	slices.SortFunc(s, func(a, b survival) int {
		if c := cmp.Compare(a.v, b.v); c != 0 {
			return c
		}
		switch {
		case a.going == b.going:
			return 0
		case a.going:
			return 1
		}
		return -1
	})
	surv := 1.0
	for i, x := range s {
		if x.going {
			continue
		}
		surv *= 1 - 1/float64(len(s)-i)
		if 1-surv >= q-1e-12 {
			return x.v, true
		}
	}
	return 0, false
}
