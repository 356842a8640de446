package forecast

import (
	"cmp"
	"slices"
	"time"
)

// A family nobody has seen run (fewer than minSimilar runs of its own)
// borrows its run times from a wider view: its class, or wider still.
// Pooled, that view's runs stand for one run drawn at random, and the runs
// of a family with many of them, going as well as finished
// (EstimateRunning weighs each run going as the longer runs it stands
// for), decide it: on Philly a tenant's families of jobs of hundreds of
// hours, finished and going, gave a burst of 3-minute jobs of a new
// family a median of 142 hours, and the replays held that family's slots for days
// while the simulation ran it in hours. But a new family is one family, not
// one run: its jobs resemble each other more than they resemble another
// family's. So a borrowed estimate is a mixture over the view's families,
// each weighing alike, each family's own runs (finished, and going as
// EstimateRunning weighs them within the family) sharing its one weight:
// a family of long jobs stays one family however many of them run, and
// the spread keeps both its long runs and the short families beside it.
// A family none of whose runs has ended yet counts too, as a family
// longer than its oldest run's age (passOnGoing): left out, the families
// of long jobs nobody has seen end would leave the mixture short (on
// Helios seed 1 the P90 covered 4 points fewer starts).
// With fewer than minFamilies families with finished runs the view's runs
// pooled stand, as before.

// minFamilies is how many families with finished runs a view needs
// before its estimate is their mixture rather than its runs pooled.
const minFamilies = 2

// familyQuantiles bounds the values each family brings to a mixture: a
// family with more runs brings this many of its quantiles, so that a
// mixture holds at most a quarter of the values its families' rings do
// (MaxFamilies of them: 262,144, 4 MB while a forecast is made).
const familyQuantiles = 64

// mixture is v's estimate as a mixture of its families (above), or false
// when v has fewer than minFamilies families with finished runs. h.mu is
// held.
func (h *History) mixture(v historyView, running map[Class][]time.Duration) (Estimate, bool) {
	var fams []Class
	for c, r := range h.runs {
		if c.Family != "" && len(r.vals) > 0 && v.same(c) {
			fams = append(fams, c)
		}
	}
	if len(fams) < minFamilies {
		return Estimate{}, false
	}
	// Map order is random: sorted, the mixture's ties come out alike.
	slices.SortFunc(fams, cmpClass)
	var pts []point
	for _, c := range fams {
		r := h.runs[c]
		vals, cum := redistribute(r.vals, running[c], float64(r.added)/float64(len(r.vals)))
		pts = appendFamily(pts, vals, cum)
	}
	slices.SortStableFunc(pts, func(a, b point) int { return cmp.Compare(a.d, b.d) })
	pts = passOnGoing(pts, h.goingOnly(v, running))
	vals := make([]time.Duration, len(pts))
	cum := make([]float64, len(pts))
	total := 0.0
	for i, p := range pts {
		total += p.w
		vals[i], cum[i] = p.d, total
	}
	return Estimate{History: vals, cum: cum, Source: FromSimilar, Borrowed: true}, true
}

// point is a run time of a mixture and its weight.
type point struct {
	d time.Duration
	w float64
}

// appendFamily adds a family's run times, weighed by cum, as one unit of
// weight: at most familyQuantiles of them (its quantiles past that).
func appendFamily(pts []point, vals []time.Duration, cum []float64) []point {
	total := cum[len(cum)-1]
	if len(vals) <= familyQuantiles {
		prev := 0.0
		for i, d := range vals {
			pts = append(pts, point{d, (cum[i] - prev) / total})
			prev = cum[i]
		}
		return pts
	}
	for i := range familyQuantiles {
		k := min(sortSearch(cum, (float64(i)+0.5)/familyQuantiles*total), len(cum)-1)
		pts = append(pts, point{vals[k], 1.0 / familyQuantiles})
	}
	return pts
}

// goingOnly is, for each family of v with runs going and none finished,
// its oldest run's age, ascending. h.mu is held.
func (h *History) goingOnly(v historyView, running map[Class][]time.Duration) []time.Duration {
	var ages []time.Duration
	for c, going := range running {
		if c.Family == "" || len(going) == 0 || !v.same(c) {
			continue
		}
		if r := h.runs[c]; r != nil && len(r.vals) > 0 {
			continue
		}
		ages = append(ages, slices.Max(going))
	}
	slices.Sort(ages)
	return ages
}

// passOnGoing counts the families whose runs all still go, each as one
// family whose run time is longer than its oldest run's age: its unit of
// weight goes to the families' run times longer than that, in proportion
// to theirs (EstimateRunning's redistribution to the right, a family at a
// time), or, with none longer, stays at that age. Left out, families of
// long jobs none of which has ended yet would leave the mixture short;
// one whose run started a minute ago passes its weight to every family
// alike and changes nothing. pts is sorted by run time.
func passOnGoing(pts []point, ages []time.Duration) []point {
	for _, a := range ages {
		k, _ := slices.BinarySearchFunc(pts, a, func(p point, a time.Duration) int {
			if p.d <= a {
				return -1
			}
			return 1
		})
		longer := 0.0
		for _, p := range pts[k:] {
			longer += p.w
		}
		if longer == 0 {
			pts = append(pts, point{a, 1})
			continue
		}
		gain := 1 + 1/longer
		for i := k; i < len(pts); i++ {
			pts[i].w *= gain
		}
	}
	return pts
}

func cmpClass(a, b Class) int {
	return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.GPUs, b.GPUs),
		cmp.Compare(a.Family, b.Family))
}
