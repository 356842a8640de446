package sim

import (
	"math"
	"time"
)

// Fair share over time, in the simulator: the decayed usage the engine
// orders tenants by (engine.Snapshot.Usage), accounted in virtual time as
// the controller accounts it in real time, and the figure that says
// whether the GPUs were shared fairly (Result.FairShareJain).

// fairWindow is the span over which shares of contested GPU-hours are
// compared with entitled shares.
const fairWindow = 24 * time.Hour

// fairMinContested is the least contested GPU-hours that make a window
// count: a few minutes of contention say nothing about fairness.
const fairMinContested = 1.0

// fairShare accumulates, per tenant, the decayed borrowed GPU-seconds
// (usage) and, per window, the contested GPU-seconds each held (actual)
// against those it was entitled to (entitled).
type fairShare struct {
	halfLife time.Duration
	usage    []float64

	window           int // index of the window being accumulated
	actual, entitled []float64
	// Summary over the windows closed so far.
	windows, fair int     // windows with contention; those with Jain ≥ 0.9
	jainSum       float64 // sum of their indexes
	jainMin       float64
	within, n     int // tenant-windows within ±20 % of the entitled share; all
}

// grow keeps the per-tenant slices as long as the tenants.
func (f *fairShare) grow(n int) {
	for len(f.usage) < n {
		f.usage = append(f.usage, 0)
		f.actual = append(f.actual, 0)
		f.entitled = append(f.entitled, 0)
	}
}

// advance accounts dt seconds, from virtual time at, during which each
// tenant held use GPUs (reserve its reserve, weight its weight, waiting
// GPUs waited for, atLimit whether it may take no more).
func (f *fairShare) advance(m *metrics, from, to time.Duration) {
	f.grow(len(m.tenants))
	dt := (to - from).Seconds()
	if f.halfLife > 0 {
		lambda := math.Ln2 / f.halfLife.Seconds()
		keep := math.Exp(-lambda * dt)
		for t, use := range m.tenantUse {
			f.usage[t] = f.usage[t]*keep + float64(max(use-m.tenants[t].Reserve, 0))*(1-keep)/lambda
		}
	}
	// Contention: some tenant waits for GPUs it may take. The tenants
	// contending are those waiting so and those borrowing; the GPUs
	// they borrow are the contested ones, to be shared by weight.
	waits, contending := false, 0
	var weights, borrowed float64
	for t, use := range m.tenantUse {
		if f.contends(m, t, use) {
			contending++
			weights += m.tenants[t].Weight
			borrowed += float64(max(use-m.tenants[t].Reserve, 0))
			if m.tenantWaiting[t] > 0 {
				waits = true
			}
		}
	}
	if !waits || contending < 2 || weights <= 0 {
		return
	}
	for at := from; at < to; {
		w := int(at / fairWindow)
		if w != f.window {
			f.close()
			f.window = w
		}
		next := min(to, time.Duration(w+1)*fairWindow)
		sec := (next - at).Seconds()
		for t, use := range m.tenantUse {
			if f.contends(m, t, use) {
				f.actual[t] += float64(max(use-m.tenants[t].Reserve, 0)) * sec
				f.entitled[t] += m.tenants[t].Weight / weights * borrowed * sec
			}
		}
		at = next
	}
}

// contends says whether tenant t takes part in the contention: it borrows
// GPUs, or waits for GPUs its limit lets it take.
func (f *fairShare) contends(m *metrics, t, use int) bool {
	ten := m.tenants[t]
	if use > ten.Reserve {
		return true
	}
	return m.tenantWaiting[t] > 0 && (ten.Limit < 0 || use < ten.Limit)
}

// close ends the window being accumulated: its Jain index over the
// tenants' actual / entitled shares of its contested GPU-hours.
func (f *fairShare) close() {
	var total, sum, sq float64
	n := 0
	for t := range f.entitled {
		total += f.entitled[t]
	}
	if total/3600 >= fairMinContested {
		for t, e := range f.entitled {
			if e <= 0 {
				continue
			}
			x := f.actual[t] / e
			sum += x
			sq += x * x
			n++
			f.n++
			if math.Abs(x-1) <= 0.2 {
				f.within++
			}
		}
	}
	if n >= 2 && sq > 0 {
		jain := sum * sum / (float64(n) * sq)
		if f.windows == 0 || jain < f.jainMin {
			f.jainMin = jain
		}
		f.windows++
		f.jainSum += jain
		if jain >= 0.9 {
			f.fair++
		}
	}
	clear(f.actual)
	clear(f.entitled)
}

// FairShare is how fairly contested GPU-hours were shared (docs/simulator.md).
type FairShare struct {
	// Jain is the mean over the windows with contention of Jain's
	// fairness index of the tenants' actual / entitled shares (1: each
	// got its share; 1/n: one tenant got all). 0 with no such window.
	Jain float64 `json:"fair_share_jain"`
	// JainMin is the worst window's index.
	JainMin float64 `json:"fair_share_jain_min"`
	// Windows counts the 24-hour windows with contention; FairWindows
	// those with an index of 0.9 or more.
	Windows     int `json:"fair_share_windows"`
	FairWindows int `json:"fair_share_fair_windows"`
	// Within20 is the part of the tenants' windows in which a tenant got
	// within ±20 % of its entitled share.
	Within20 float64 `json:"fair_share_within_20pct"`
}

// result closes the last window and summarises.
func (f *fairShare) result() FairShare {
	f.close()
	out := FairShare{JainMin: f.jainMin, Windows: f.windows, FairWindows: f.fair}
	if f.windows > 0 {
		out.Jain = f.jainSum / float64(f.windows)
	}
	if f.n > 0 {
		out.Within20 = float64(f.within) / float64(f.n)
	}
	return out
}
