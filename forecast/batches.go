package forecast

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Jobs submitted together by a tenant, of one tier and shape, are most
// often one piece of work split up (a sweep, a batch of evaluations) and
// run about as long as each other: Philly's first 3,000 jobs hold a burst
// of about 1,000 one-GPU jobs of four minutes from one user, in a class
// whose history is runs of days. Drawn independently from that history,
// every slot the burst gets in a replay soon holds a run of days, and
// most of the burst did not start within the horizon in any replay (96 %
// of the waiting jobs measured got no P50), though it ran through in
// hours. A replay therefore draws one quantile per batch (its waiting
// jobs of one tenant, tier and size submitted less than BatchGap after
// the one before) and each job's run time at that quantile, give or take
// BatchJitter: in one replay a burst is short, in another long, as often
// as its history says, and the spread between replays carries that.

// BatchGap is the most time between two submissions of one batch.
const BatchGap = time.Hour

// BatchJitter is how far a job's quantile may stray from its batch's
// (uniformly either side): jobs of one batch are alike, not equal.
const BatchJitter = 0.05

// batchQuantiles gives each waiting demand of the replay its batch's
// quantile (rdemand.u), drawn from rng in a fixed order.
func (r *replay) batchQuantiles() {
	groups := map[string][]int{}
	for i := range r.demands {
		d := &r.demands[i].d
		key := d.Job.Ref.Namespace + "\x00" + d.Job.Tier + "\x00" + strconv.Itoa(d.GPUsPerAlloc) + "\x00" + strconv.Itoa(d.Count)
		groups[key] = append(groups[key], i)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		g := groups[k]
		slices.SortStableFunc(g, func(a, b int) int {
			x, y := &r.demands[a].d, &r.demands[b].d
			if c := x.Since.Compare(y.Since); c != 0 {
				return c
			}
			return cmp.Compare(x.Job.Ref.ID, y.Job.Ref.ID)
		})
		var u float64
		var last time.Time
		for p, i := range g {
			d := &r.demands[i]
			if p == 0 || d.d.Since.Sub(last) > BatchGap {
				u = r.rng.Float64()
			}
			last = d.d.Since
			d.u = min(max(u+(r.rng.Float64()-0.5)*2*BatchJitter, 1e-9), 1-1e-9)
		}
	}
}

// drawAt is a total run time at quantile u (in (0, 1)) of the estimate,
// as draw gives them at random.
func (e Estimate) drawAt(rng *rand.Rand, u float64) time.Duration {
	switch {
	case e.Expected > 0:
		return logNormalAt(e.Expected, ExpectedSpread, u)
	case len(e.History) > 0:
		var k int
		if e.cum != nil {
			total := e.cum[len(e.cum)-1]
			k = min(sortSearch(e.cum, u*total), len(e.cum)-1)
			v := e.History[k]
			return time.Duration(float64(v) * (0.9 + 0.2*rng.Float64()))
		}
		// The values are in no order: their order statistics.
		s := slices.Clone(e.History)
		slices.Sort(s)
		k = min(int(u*float64(len(s))), len(s)-1)
		return time.Duration(float64(s[k]) * (0.9 + 0.2*rng.Float64()))
	}
	return logNormalAt(DefaultRuntime, DefaultSpread, u)
}

func sortSearch(cum []float64, x float64) int {
	lo, hi := 0, len(cum)
	for lo < hi {
		m := (lo + hi) / 2
		if cum[m] > x {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// logNormalAt is the u-quantile of a log-normal of that median and σ.
func logNormalAt(median time.Duration, sigma, u float64) time.Duration {
	return time.Duration(float64(median) * math.Exp(sigma*math.Sqrt2*math.Erfinv(2*u-1)))
}
