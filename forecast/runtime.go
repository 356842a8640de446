package forecast

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ExpectedRuntimeMetaKey is the job meta key where a job says how long it
// runs in all (a duration: "2h30m"). A tenant writes it about its own job:
// it informs forecasts only, never a decision about anyone's work.
const ExpectedRuntimeMetaKey = "steward.expected_runtime"

// ParseExpectedRuntime reads an expected_runtime value: a positive Go
// duration of at most a year. ok is false for anything else (the job then
// gets what similar jobs took).
func ParseExpectedRuntime(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > 365*24*time.Hour {
		return 0, false
	}
	return d, true
}

// Estimate is what a forecast knows about how long a job runs in all.
type Estimate struct {
	// Expected is the job's steward.expected_runtime; 0: none.
	Expected time.Duration
	// History holds run times of finished similar jobs (any order); used
	// when Expected is 0. Empty: DefaultRuntime.
	History []time.Duration
	// Forever: the job runs until someone stops it (a service that says
	// nothing of its run time): it never ends in a replay.
	Forever bool
	// Source says where the figures come from, for notes.
	Source Source
}

// Source is where a run-time estimate comes from.
type Source string

// Sources of run times, from the most to the least specific.
const (
	FromExpected Source = "expected_runtime"
	FromSimilar  Source = "similar jobs"
	FromDefault  Source = "default"
)

// ExpectedSpread is the spread of a job's own expected_runtime: the run
// time drawn is expected × e^(σ·Z), σ this, Z standard normal (about ±25 %
// for one standard deviation).
const ExpectedSpread = 0.25

// DefaultRuntime is the median run time of a job nothing is known about,
// drawn log-normally with DefaultSpread: wide, since it is a guess.
const (
	DefaultRuntime = time.Hour
	DefaultSpread  = 1.0
)

// minRemaining is the least run time a running job is given: it has not
// ended yet, so it ends some time from now.
const minRemaining = 30 * time.Second

// remaining draws how much longer a job that has run ran already runs.
// Drawn totals at or below ran are redrawn (the job is still running, so
// its run time exceeds ran: the draw is conditioned on that); a job that
// outlived every draw (it runs longer than it said, or than any similar
// job) ends within half its age again, uniformly.
func (e Estimate) remaining(rng *rand.Rand, ran time.Duration) time.Duration {
	if e.Expected == 0 && len(e.History) > 0 {
		// The empirical distribution conditioned exactly: among the runs
		// that (jittered) last longer than ran.
		var longer []time.Duration
		for _, v := range e.History {
			if float64(v)*1.1 > float64(ran) {
				longer = append(longer, v)
			}
		}
		if len(longer) > 0 {
			v := float64(longer[rng.IntN(len(longer))])
			lo := max(0.9*v, float64(ran))
			return max(time.Duration(lo+rng.Float64()*(1.1*v-lo))-ran, minRemaining)
		}
	}
	for range 8 {
		if total := e.draw(rng); total > ran {
			return max(total-ran, minRemaining)
		}
	}
	return max(time.Duration(rng.Float64()*0.5*float64(max(ran, e.median()))), minRemaining)
}

// draw is one total run time.
func (e Estimate) draw(rng *rand.Rand) time.Duration {
	switch {
	case e.Expected > 0:
		return logNormal(rng, e.Expected, ExpectedSpread)
	case len(e.History) > 0:
		// The empirical distribution, each value jittered by up to ±10 %
		// so that a short history does not give the same few figures.
		v := e.History[rng.IntN(len(e.History))]
		return time.Duration(float64(v) * (0.9 + 0.2*rng.Float64()))
	}
	return logNormal(rng, DefaultRuntime, DefaultSpread)
}

func (e Estimate) median() time.Duration {
	switch {
	case e.Expected > 0:
		return e.Expected
	case len(e.History) > 0:
		s := slices.Clone(e.History)
		slices.Sort(s)
		return s[len(s)/2]
	}
	return DefaultRuntime
}

func logNormal(rng *rand.Rand, median time.Duration, sigma float64) time.Duration {
	return time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64()))
}

// Class is what makes jobs similar for their run times: tenant, tier and
// GPUs per allocation, bucketed (1, 2, 3–4, 5–8, 9+).
type Class struct {
	Tenant, Tier string
	GPUs         int // the bucket's upper bound (9+ is 16)
}

// ClassOf returns the class of a job of a tenant and tier asking for gpus
// GPUs an allocation.
func ClassOf(tenant, tier string, gpus int) Class {
	b := 1
	for b < gpus && b < 16 {
		b *= 2
	}
	return Class{Tenant: tenant, Tier: tier, GPUs: b}
}

func (c Class) String() string {
	return c.Tenant + "/" + c.Tier + "/" + strconv.Itoa(c.GPUs) + " GPUs"
}

// HistorySize is how many run times History keeps per class (the newest).
const HistorySize = 256

// minSimilar is how many run times a class needs before they stand for
// its jobs; with fewer the forecast looks wider (the tier and GPUs across
// tenants, then the tier, then every job).
const minSimilar = 5

// History keeps the run times of finished jobs by class, the newest
// HistorySize of each, in memory: what similar jobs took, for jobs that
// do not say how long they run. It is safe for concurrent use.
type History struct {
	mu   sync.Mutex
	runs map[Class]*ring
	// wider views: the tier and GPUs across tenants, the tier, all.
	byTierGPUs map[Class]*ring
	byTier     map[string]*ring
	all        ring
}

type ring struct {
	vals []time.Duration
	next int
}

func (r *ring) add(d time.Duration) {
	if len(r.vals) < HistorySize {
		r.vals = append(r.vals, d)
		return
	}
	r.vals[r.next] = d
	r.next = (r.next + 1) % HistorySize
}

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{runs: map[Class]*ring{}, byTierGPUs: map[Class]*ring{}, byTier: map[string]*ring{}}
}

// Add records a finished run of a job of class c.
func (h *History) Add(c Class, d time.Duration) {
	if d <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	get := func(m map[Class]*ring, k Class) *ring {
		r := m[k]
		if r == nil {
			r = &ring{}
			m[k] = r
		}
		return r
	}
	get(h.runs, c).add(d)
	get(h.byTierGPUs, Class{Tier: c.Tier, GPUs: c.GPUs}).add(d)
	r := h.byTier[c.Tier]
	if r == nil {
		r = &ring{}
		h.byTier[c.Tier] = r
	}
	r.add(d)
	h.all.add(d)
}

// Estimate is the estimate for a job of class c that says nothing of its
// run time: its class's run times, or the widest view with enough, or the
// default.
func (h *History) Estimate(c Class) Estimate {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range []*ring{h.runs[c], h.byTierGPUs[Class{Tier: c.Tier, GPUs: c.GPUs}], h.byTier[c.Tier], &h.all} {
		if r != nil && len(r.vals) >= minSimilar {
			return Estimate{History: slices.Clone(r.vals), Source: FromSimilar}
		}
	}
	return Estimate{Source: FromDefault}
}
