package forecast

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Input is what a forecast starts from: the snapshot the engine planned
// on, when, and what is known of run times.
type Input struct {
	Engine   *engine.Engine
	Snapshot *engine.Snapshot // read only
	Now      time.Time
	// Estimates are the run times of jobs, running or waiting, by job;
	// a job missing here gets the default estimate.
	Estimates map[engine.JobRef]Estimate
	// DrainEnds are the grace ends of draining allocations, by ID; one
	// missing ends after the policy's grace from now.
	DrainEnds map[string]time.Time
	// Done is the work each job has done so far and kept (checkpointed
	// before a preemption, plus its current run), by job; one missing has
	// done what its current allocations ran. A job preempted and resumed
	// has done more than its allocation's age, and one waiting again
	// after a preemption has work done that its run time draw must count:
	// without it, both ran their whole run time again in the replays.
	Done map[engine.JobRef]time.Duration
	// Arrivals are the jobs that arrived from ArrivalsSince until Now
	// (arrivals.go): replays add work arriving at their rate, of their
	// shapes. None: nothing arrives.
	Arrivals      []Arrival
	ArrivalsSince time.Time
	// ArrivalsUntil, when set, is the last moment work arrives: the
	// simulator's trace ends there (-limit), and a replay that kept work
	// arriving past it would measure the forecast against a world that
	// has none. Zero (the controller): work keeps arriving.
	ArrivalsUntil time.Time
}

func (in *Input) policyGrace() time.Duration { return in.Engine.Policy().Preemption.Grace }

// Options bound a forecast's cost.
type Options struct {
	// Replays is how many replays with different run times give the
	// spread (default 10).
	Replays int
	Seed    uint64
	// Horizon is how far ahead a replay looks (default 7 days): a job not
	// started by then in a replay counts as starting after it.
	Horizon time.Duration
	// MaxPlans bounds the engine's plans per replay (default 150).
	MaxPlans int
	// MinStep is the least virtual time between two plans of a replay
	// (default 30s, the simulator's plan interval). Steps grow with how
	// far ahead the replay is, by the least share of that (at least a
	// tenth) with which half of MaxPlans reach the horizon: a start days
	// away needs no 30-second resolution, and the plans stay bounded.
	MinStep time.Duration
	// MaxNodes bounds the nodes a replay plans on (default 128): a larger
	// cluster is replayed a share at a time (reduce.go).
	MaxNodes int

	stepGrowth float64
}

// Defaults for Options.
const (
	DefaultReplays  = 10
	DefaultHorizon  = 7 * 24 * time.Hour
	DefaultMaxPlans = 150
	DefaultMinStep  = 30 * time.Second
	DefaultMaxNodes = 128
)

func (o Options) withDefaults() Options {
	if o.Replays <= 0 {
		o.Replays = DefaultReplays
	}
	if o.Horizon <= 0 {
		o.Horizon = DefaultHorizon
	}
	if o.MaxPlans <= 0 {
		o.MaxPlans = DefaultMaxPlans
	}
	if o.MinStep <= 0 {
		o.MinStep = DefaultMinStep
	}
	if o.MaxNodes <= 0 {
		o.MaxNodes = DefaultMaxNodes
	}
	o.stepGrowth = stepGrowth(o.Horizon, o.MinStep, max(o.MaxPlans/2, 1))
	return o
}

// stepGrowth is the least share f (0.1, then ×1.5) of the time ahead such
// that steps of max(minStep, f × time ahead) reach the horizon within
// plans steps: minStep steps until minStep/f ahead, then f more each.
func stepGrowth(horizon, minStep time.Duration, plans int) float64 {
	f := 0.1
	for ; f < 1000; f *= 1.5 {
		linear := 1 / f
		geometric := math.Log(float64(horizon)*f/float64(minStep)) / math.Log1p(f)
		if linear+geometric <= float64(plans) {
			break
		}
	}
	return f
}

// Result is a forecast for every job waiting in the snapshot.
type Result struct {
	At   time.Time
	Jobs map[engine.JobRef]*JobForecast
	// Replays is how many replays ran (fewer than asked when the context
	// ended first), Plans the engine's plans over all of them.
	Replays, Plans int
	// Shares is in how many shares the cluster was replayed (reduce.go;
	// 1: whole).
	Shares int
}

// JobForecast is one waiting job's forecast start.
type JobForecast struct {
	// P50 and P90: by then it started in half, and in nine tenths, of the
	// replays; zero when it had not within the horizon (or never: no node
	// can run it, nothing it waits for ends).
	P50, P90 time.Time
	// Started is in how many replays it started.
	Started int
	// Cause is what let it start in the replay of its median start:
	// "when research/train ends", "when a/x is preempted for it".
	Cause string
	// Basis is what the job's run time rests on (Input.Estimates): the
	// bucket Calibration corrects it in.
	Basis Basis
}

// Run forecasts the start of every waiting job in the snapshot. It stops
// early, with the replays done, when ctx ends (the controller's time
// budget); given the same input, options and no deadline it always gives
// the same result.
func Run(ctx context.Context, in Input, opt Options) *Result {
	opt = opt.withDefaults()
	res := &Result{At: in.Now, Jobs: map[engine.JobRef]*JobForecast{}}
	starts := map[engine.JobRef][]time.Time{}
	causes := map[engine.JobRef][]string{}
	res.Shares = reductionFor(len(in.Snapshot.Nodes), opt.MaxNodes)
	var rd *reduction
	if res.Shares > 1 {
		rd = newReduction(&in, res.Shares)
	}
	for i := range opt.Replays {
		if ctx.Err() != nil {
			break
		}
		rin, share := &in, 0
		if rd != nil {
			share = shareOf(i, opt.Replays, rd.k)
			sub := rd.input(&in, share)
			rin = &sub
		}
		r := newReplay(rin, opt, uint64(i), res.Shares)
		r.run()
		res.Replays++
		res.Plans += r.plans
		if rd == nil {
			for ref, j := range r.jobs {
				if j.target {
					starts[ref] = append(starts[ref], j.started)
					causes[ref] = append(causes[ref], j.cause)
				}
			}
			continue
		}
		own := map[engine.JobRef]time.Time{}
		for ref, j := range r.jobs {
			if j.target {
				own[ref] = j.started
			}
		}
		for k := range rd.jobs {
			t, ok := rd.start(k, share, own)
			if !ok {
				continue
			}
			ref := rd.jobs[k].ref
			cause := ""
			if rd.jobs[k].share == share {
				cause = r.jobs[ref].cause
			}
			starts[ref] = append(starts[ref], t)
			causes[ref] = append(causes[ref], cause)
		}
	}
	for ref, ts := range starts {
		f := &JobForecast{Basis: BasisBorrowed} // no estimate: the default
		if e, ok := in.Estimates[ref]; ok {
			f.Basis = e.Basis()
		}
		idx := make([]int, len(ts))
		for i := range idx {
			idx[i] = i
			if !ts[i].IsZero() {
				f.Started++
			}
		}
		// Not started (zero) sorts last: later than any start.
		slices.SortStableFunc(idx, func(a, b int) int {
			ta, tb := ts[a], ts[b]
			switch {
			case ta.IsZero() && tb.IsZero():
				return 0
			case ta.IsZero():
				return 1
			case tb.IsZero():
				return -1
			}
			return ta.Compare(tb)
		})
		sorted := make([]time.Time, len(idx))
		for i, k := range idx {
			sorted[i] = ts[k]
		}
		median := idx[quantileIndex(len(ts), 0.5)]
		f.P50 = quantile(sorted, 0.5)
		f.P90 = quantile(sorted, 0.9)
		if !f.P50.IsZero() {
			f.Cause = causes[ref][median]
		}
		res.Jobs[ref] = f
	}
	return res
}

// quantile is the q-quantile of n replays' starts, sorted (zero, not
// started, last: later than any start), at rank q·(n+1) between the two
// nearest (Hyndman and Fan's type 6): a start drawn like the replays'
// falls at or before the k-th of n with probability k/(n+1), so that rank
// is the one a start comes at or before with probability q. Nearest rank
// (the k = ⌈q·n⌉-th) is early for few replays: with 10, the 9th covers
// 9/11 = 82 % of starts, not 90 %. Beyond the last rank, the last; zero
// when the ranks it lies between are not both starts.
func quantile(sorted []time.Time, q float64) time.Time {
	n := len(sorted)
	h := q * float64(n+1)
	lo := int(math.Floor(h))
	switch {
	case lo < 1:
		return sorted[0]
	case lo >= n:
		return sorted[n-1]
	}
	a, b, f := sorted[lo-1], sorted[lo], h-float64(lo)
	switch {
	case f == 0:
		return a
	case a.IsZero() || b.IsZero():
		return time.Time{}
	}
	return a.Add(time.Duration(f * float64(b.Sub(a))))
}

// quantileIndex is the nearest-rank index of quantile q among n sorted
// values: the replay whose cause a forecast reports.
func quantileIndex(n int, q float64) int {
	k := int(q*float64(n)+0.999999) - 1
	return min(max(k, 0), n-1)
}
