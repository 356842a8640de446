package forecast

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
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
	// Borrowed: History is not the runs of the job's own family (or
	// class, when it names no family) but a wider view's, its own having
	// fewer than minSimilar: the runs of other families, which say little
	// of a family nobody has seen run (Basis).
	Borrowed bool

	// cum, when set, weighs History's values (cumulative weights, as
	// History.EstimateRunning derives them from the runs still going);
	// nil: all alike.
	cum []float64
}

// Source is where a run-time estimate comes from.
type Source string

// Sources of run times, from the most to the least specific.
const (
	FromExpected Source = "expected_runtime"
	FromSimilar  Source = "similar jobs"
	FromDefault  Source = "default"
)

// Basis is how much a job's forecast knows of its own run time, the
// bucket Calibration corrects it in: forecasts resting on a family's own
// runs and those resting on other families' are wrong in different ways
// (Philly's burst of a family nobody had seen run was forecast days late
// while the forecasts of families with runs were early), and one
// correction for both moved each by the other's error.
type Basis uint8

// Bases, from the best known; the zero Basis is a job's own runs.
const (
	// BasisOwn: its family's (or class's) own finished runs, or it runs
	// until stopped.
	BasisOwn Basis = iota
	// BasisExpected: its own steward.expected_runtime.
	BasisExpected
	// BasisBorrowed: other families' runs (its class's or wider), or the
	// default: nothing of its own yet.
	BasisBorrowed
	basisCount
)

// Basis is what e rests on.
func (e Estimate) Basis() Basis {
	switch {
	case e.Expected > 0:
		return BasisExpected
	case e.Forever:
		return BasisOwn
	case len(e.History) == 0 || e.Borrowed:
		return BasisBorrowed
	}
	return BasisOwn
}

func (b Basis) String() string {
	switch b {
	case BasisExpected:
		return "expected_runtime"
	case BasisBorrowed:
		return "borrowed run times"
	}
	return "own run times"
}

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
		var cum []float64
		for i, v := range e.History {
			if float64(v)*1.1 > float64(ran) {
				longer = append(longer, v)
				if e.cum != nil {
					cum = append(cum, e.weight(i)+lastOf(cum))
				}
			}
		}
		if len(longer) > 0 {
			k := rng.IntN(len(longer))
			if cum != nil {
				k = pickWeighted(rng, cum)
			}
			v := float64(longer[k])
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
		k := rng.IntN(len(e.History))
		if e.cum != nil {
			k = pickWeighted(rng, e.cum)
		}
		v := e.History[k]
		return time.Duration(float64(v) * (0.9 + 0.2*rng.Float64()))
	}
	return logNormal(rng, DefaultRuntime, DefaultSpread)
}

func (e Estimate) weight(i int) float64 {
	if i == 0 {
		return e.cum[0]
	}
	return e.cum[i] - e.cum[i-1]
}

func lastOf(cum []float64) float64 {
	if len(cum) == 0 {
		return 0
	}
	return cum[len(cum)-1]
}

// pickWeighted draws an index with the weights whose running sums are
// cum.
func pickWeighted(rng *rand.Rand, cum []float64) int {
	u := rng.Float64() * cum[len(cum)-1]
	return min(sort.Search(len(cum), func(i int) bool { return cum[i] > u }), len(cum)-1)
}

// median is the run time at which e's weight passes half: with cum set,
// History's values weigh as draw picks them (a borrowed mixture gives
// each family one weight however many runs it has; a run still going
// weighs as EstimateRunning says), so the median of the values alike
// would be another distribution's than the one drawn from.
func (e Estimate) median() time.Duration {
	switch {
	case e.Expected > 0:
		return e.Expected
	case len(e.History) > 0 && e.cum != nil:
		idx := make([]int, len(e.History))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(e.History[a], e.History[b]) })
		half, sum := e.cum[len(e.cum)-1]/2, 0.0
		for _, i := range idx {
			if sum += e.weight(i); sum > half {
				return e.History[i]
			}
		}
		return e.History[idx[len(idx)-1]]
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
// GPUs per allocation, bucketed (1, 2, 3–4, 5–8, 9+), and, within that,
// the family a job belongs to (Family).
type Class struct {
	Tenant, Tier string
	GPUs         int // the bucket's upper bound (9+ is 16)
	// Family narrows the class to the jobs of one family: the
	// simulator's trace user, the controller's job ID less its run
	// number (JobFamily). "": the class only. A family's own runs stand
	// for its jobs once it has minSimilar of them: a class's history is
	// a mix of families, and one whose jobs are much shorter than the
	// rest (Philly: a thousand 4-minute jobs of one user in a class of
	// days-long runs) was given the others' run times.
	Family string
}

// WithFamily is the class narrowed to a family.
func (c Class) WithFamily(f string) Class {
	c.Family = f
	return c
}

// JobFamily is the family of a job by its ID: the ID less a trailing run
// number and the separators before it ("train-0412" and "train-0413" are
// both "train"), so that the runs of one script resemble each other; an
// ID that is all number is its own family.
func JobFamily(id string) string {
	f := strings.TrimRightFunc(id, func(r rune) bool { return r >= '0' && r <= '9' })
	f = strings.TrimRight(f, "-_.")
	if f == "" {
		return id
	}
	return f
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
	s := c.Tenant + "/" + c.Tier + "/" + strconv.Itoa(c.GPUs) + " GPUs"
	if c.Family != "" {
		s += "/" + c.Family
	}
	return s
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
	runs map[Class]*ring // by class and family, and by class alone
	// families counts the rings of runs kept by family, at most
	// MaxFamilies: a family is named by a tenant's job IDs, which a
	// tenant may make unique at will. seq orders adds, to drop the
	// family added to longest ago.
	families int
	seq      uint64
	// wider views: the tier and GPUs across tenants, the tier, all.
	byTierGPUs map[Class]*ring
	byTier     map[string]*ring
	all        ring
}

type ring struct {
	vals []time.Duration
	next int
	last uint64 // History.seq at its last add
	// added counts every run ever added, kept or not: each kept value
	// stands for added/len(vals) of them (EstimateRunning).
	added int
}

func (r *ring) add(d time.Duration) {
	r.added++
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
	h.seq++
	if c.Family != "" && h.runs[c] == nil {
		if h.families >= MaxFamilies {
			h.dropOldestFamily()
		}
		h.families++
	}
	fam := get(h.runs, c)
	fam.add(d)
	fam.last = h.seq
	if c.Family != "" {
		get(h.runs, c.WithFamily("")).add(d)
	}
	get(h.byTierGPUs, Class{Tier: c.Tier, GPUs: c.GPUs}).add(d)
	r := h.byTier[c.Tier]
	if r == nil {
		r = &ring{}
		h.byTier[c.Tier] = r
	}
	r.add(d)
	h.all.add(d)
}

// MaxFamilies bounds the families whose run times History keeps apart
// from their class's: past it, the family added to longest ago is
// forgotten (its runs stay in its class's).
const MaxFamilies = 4096

// dropOldestFamily forgets the family whose runs were added to longest
// ago. It scans every ring: it runs only when a new family comes to a
// full History, once per finished job at most.
func (h *History) dropOldestFamily() {
	var oldest Class
	var at uint64
	found := false
	for c, r := range h.runs {
		if c.Family != "" && (!found || r.last < at) {
			oldest, at, found = c, r.last, true
		}
	}
	if found {
		delete(h.runs, oldest)
		h.families--
	}
}

// Estimate is the estimate for a job of class c that says nothing of its
// run time: its family's run times, or its class's, or the widest view
// with enough, or the default.
func (h *History) Estimate(c Class) Estimate {
	return h.EstimateRunning(c, nil)
}

// EstimateRunning is Estimate with the runs still going (their run time
// so far, by class) counted too. Finished runs alone are the short ones:
// a long run is still going when a short one that started with it has
// long ended, so a history of finished runs says jobs are shorter than
// they are, the more so the heavier the tail (Philly's). A run still
// going at age a says "longer than a": its weight goes, in equal shares,
// to the runs, finished or not, longer than a (Efron's redistribution to
// the right, the Kaplan-Meier estimate's); the longest runs still going
// keep their weight at their age, a run time at least that long.
func (h *History) EstimateRunning(c Class, running map[Class][]time.Duration) Estimate {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.view(c)
	if !ok {
		return Estimate{Source: FromDefault}
	}
	return h.estimate(v, running)
}

// EstimatesRunning is EstimateRunning for many classes at once: classes
// whose estimates rest on the same view of the history (the same ring,
// as narrow) share one Estimate, its values not copied per class. A
// forecast's arrivals are thousands of jobs of a few histories: an
// estimate per arrival held 72 MB of a 1,000-node leader's heap.
func (h *History) EstimatesRunning(classes []Class, running map[Class][]time.Duration) map[Class]Estimate {
	h.mu.Lock()
	defer h.mu.Unlock()
	type key struct {
		r     *ring
		level int
	}
	byView := map[key]Estimate{}
	out := make(map[Class]Estimate, len(classes))
	for _, c := range classes {
		if _, ok := out[c]; ok {
			continue
		}
		v, ok := h.view(c)
		if !ok {
			out[c] = Estimate{Source: FromDefault}
			continue
		}
		k := key{v.r, v.level}
		e, ok := byView[k]
		if !ok {
			e = h.estimate(v, running)
			byView[k] = e
		}
		out[c] = e
	}
	return out
}

// historyView is the runs an estimate for a class rests on: the ring of
// the narrowest view with minSimilar runs, and which runs going count
// with it (level: 0 the class as given, 1 the class less its family, 2
// the tier and GPUs, 3 the tier, 4 all).
type historyView struct {
	r     *ring
	level int
	same  func(Class) bool
}

// view is the view c's estimate rests on; false: none has enough runs
// (the default). h.mu is held.
func (h *History) view(c Class) (historyView, bool) {
	class := c.WithFamily("")
	views := []historyView{
		{h.runs[c], 0, func(o Class) bool { return o == c }},
		{h.runs[class], 1, func(o Class) bool { return o.WithFamily("") == class }},
		{h.byTierGPUs[Class{Tier: c.Tier, GPUs: c.GPUs}], 2, func(o Class) bool { return o.Tier == c.Tier && o.GPUs == c.GPUs }},
		{h.byTier[c.Tier], 3, func(o Class) bool { return o.Tier == c.Tier }},
		{&h.all, 4, func(Class) bool { return true }},
	}
	for _, v := range views {
		if v.r != nil && len(v.r.vals) >= minSimilar {
			return v, true
		}
	}
	return historyView{}, false
}

// estimate is the estimate v gives: a class's own runs as they are, a
// wider view's as a mixture of its families (family_prior.go). h.mu is
// held.
func (h *History) estimate(v historyView, running map[Class][]time.Duration) Estimate {
	if v.level > 0 {
		if e, ok := h.mixture(v, running); ok {
			return e
		}
	}
	return v.estimate(running)
}

// estimate is the view's runs, and those of running it covers, weighed.
func (v historyView) estimate(running map[Class][]time.Duration) Estimate {
	var still []time.Duration
	for o, ages := range running {
		if v.same(o) {
			still = append(still, ages...)
		}
	}
	if len(still) == 0 {
		// Sorted, with weights, like the values with runs going:
		// drawAt takes a quantile.
		vals, cum := redistribute(v.r.vals, nil, 1)
		return Estimate{History: vals, cum: cum, Source: FromSimilar, Borrowed: v.level > 0}
	}
	// The ring keeps the newest HistorySize runs of all that finished,
	// while every run still going counts: each value kept stands for
	// the runs it replaced too, or a class with thousands finished
	// and hundreds going would weigh its long runs going as if a
	// third of all its runs were that long (the forecast's run times
	// were twice the simulation's on Philly).
	vals, cum := redistribute(v.r.vals, still, float64(v.r.added)/float64(len(v.r.vals)))
	return Estimate{History: vals, cum: cum, Source: FromSimilar, Borrowed: v.level > 0}
}

// redistribute weighs finished run times, each of weight per (the runs
// it stands for), and the ages of runs still going, each of weight 1, as
// EstimateRunning says: the values and their cumulative weights. A run
// going passes its weight on to the longer ones in proportion to theirs.
func redistribute(finished, going []time.Duration, per float64) ([]time.Duration, []float64) {
	type obs struct {
		d     time.Duration
		going bool
	}
	base := func(o obs) float64 {
		if o.going {
			return 1
		}
		return per
	}
	all := make([]obs, 0, len(finished)+len(going))
	for _, d := range finished {
		all = append(all, obs{d: d})
	}
	for _, d := range going {
		all = append(all, obs{d: max(d, time.Second), going: true})
	}
	// Ascending; at a tie a finished run comes first: a run going at age
	// a outlives one that ended at a.
	slices.SortFunc(all, func(a, b obs) int {
		if a.d != b.d {
			return cmpDuration(a.d, b.d)
		}
		switch {
		case a.going == b.going:
			return 0
		case b.going:
			return -1
		}
		return 1
	})
	// after[i]: the base weights of the values after the i-th.
	after := make([]float64, len(all)+1)
	for i := len(all) - 1; i >= 0; i-- {
		after[i] = after[i+1] + base(all[i])
	}
	// Of the runs going only the last is kept (each other passes its
	// weight on): sized for the finished ones, not for every run going.
	vals := make([]time.Duration, 0, len(finished)+1)
	cum := make([]float64, 0, len(finished)+1)
	gain, total := 1.0, 0.0 // gain: what each later value's weight is multiplied by
	for i, o := range all {
		w := base(o) * gain
		if o.going && i < len(all)-1 {
			gain += w / after[i+1]
			continue
		}
		total += w
		vals = append(vals, o.d)
		cum = append(cum, total)
	}
	return vals, cum
}

func cmpDuration(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
