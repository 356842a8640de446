package sim

import (
	"math"
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Fair share over time, in the simulator: the decayed usage the engine
// orders tenants by (engine.Snapshot.Usage), accounted in virtual time as
// the controller accounts it in real time, and the figure that says
// whether the GPUs were shared fairly (Result.FairShareJain).

// fairDebug and fairDebugPlan, where a test sets them (the fair-share
// classifier, fairdebug_test.go), see the cluster before each span of
// virtual time is accounted and each plan Steward makes. Only tests set
// them, never while a simulation runs; nil, each costs one comparison.
var (
	fairDebug     func(s *simulator, from, to time.Duration)
	fairDebugPlan func(s *simulator, plan *engine.Plan)
)

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
	share            []float64 // [tenant] its entitled borrowed GPUs now (entitle)
	held             []float64 // [tenant] its part of the contested GPUs now (contention)
	spare            float64   // GPUs free or borrowed now, but those owed to reserves (contention)
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
	contested, ok := f.contention(m)
	if !ok {
		return
	}
	f.entitle(m, contested)
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
				f.actual[t] += f.held[t] * sec
				f.entitled[t] += f.share[t] * sec
			}
		}
		at = next
	}
}

// contention sets spare and held and reports whether some tenant waits to
// borrow GPUs it may take while at least two contend, and the GPUs the
// contending tenants borrow but those owed to reserves (the contested
// ones).
//
// GPUs a tenant waiting within its reserve is owed are its, not the
// contested ones: the engine gives them back to it before any sharing by
// weight (rule reclaim), and while they are held from it that is its
// reserve falling short (reserve_short_gpu_hours), not others' fair share.
// They come out of the free GPUs first, then out of the borrowed ones,
// each borrowing tenant's part (held) its borrowed GPUs scaled by what is
// left. Before, the GPUs platform borrowed of product's reserve while
// product waited within it counted as contested between platform and
// research (docs/evaluation.md, fair share, full Philly: days 52-58).
func (f *fairShare) contention(m *metrics) (float64, bool) {
	free := m.capacity - float64(m.allocated)
	var borrowed, owed float64
	for t, use := range m.tenantUse {
		ten := m.tenants[t]
		borrowed += float64(max(use-ten.Reserve, 0))
		if waits := m.tenantWaiting[t] - m.idleWaiting[t]; use < ten.Reserve && waits > 0 {
			owed += float64(min(ten.Reserve-use, waits))
		}
	}
	// spare: the GPUs a waiting tenant could be given, all told: those
	// free and those borrowed, but those owed to reserves (wantsMore
	// takes out its own).
	f.spare = max(free+borrowed-owed, 0)
	contested := borrowed - max(owed-free, 0)
	f.held = f.held[:0]
	for t, use := range m.tenantUse {
		h := 0.0
		if contested > 0 {
			h = float64(max(use-m.tenants[t].Reserve, 0)) * contested / borrowed
		}
		f.held = append(f.held, h)
	}
	if contested <= 0 {
		return 0, false
	}
	// Contention: some tenant waits to borrow GPUs it may take. The
	// tenants contending are those waiting so and those borrowing; the
	// GPUs they borrow but those owed are the contested ones, shared by
	// weight as far as each wants them (entitled).
	waits, contending := false, 0
	for t, use := range m.tenantUse {
		if f.contends(m, t, use) {
			contending++
			if f.wantsMore(m, t, use) {
				waits = true
			}
		}
	}
	return contested, waits && contending >= 2
}

// contends says whether tenant t takes part in the contention: it borrows
// GPUs, or wants to borrow more.
func (f *fairShare) contends(m *metrics, t, use int) bool {
	return use > m.tenants[t].Reserve || f.wantsMore(m, t, use)
}

// wantsMore says whether tenant t waits to borrow GPUs it could take:
// waiting work, at or beyond its reserve (below it, it waits for its
// reserve, which reserve_short_gpu_hours measures), whose smallest job
// fits within its limit and in the GPUs free or borrowed by others but
// those owed to reserves (spare, contention). A
// tenant whose every waiting job is larger than all of those together
// could not run one were every borrowed GPU taken back for it (the rest
// are within others' reserves): it is not deprived of the contested GPUs,
// and counting it entitled to them called work-conserving sharing unfair
// (docs/evaluation.md, fair share with example.hcl: product at its reserve
// waiting for 8-GPU jobs, 6 GPUs spare, counted as getting none of its
// entitled two thirds).
//
// Work an idle rule stopped and requeued does not count: it went idle
// after its work, so all it has left is its idle tail; given contested
// GPUs it would hold them idle until the rule took them back. Counting
// a tenant waiting only with such work entitled to them called sharing
// unfair that no scheduler should change (docs/evaluation.md, fair share
// over time: Philly under pressure, day 248, team-d entitled to 720
// contested GPU-hours while it waited with requeued notebooks alone).
func (f *fairShare) wantsMore(m *metrics, t, use int) bool {
	ten := m.tenants[t]
	if m.tenantWaiting[t]-m.idleWaiting[t] <= 0 || use < ten.Reserve {
		return false
	}
	small := m.smallestWaiting(t)
	room := m.deptRoom(t)
	return (ten.Limit < 0 || use+small <= ten.Limit) && (room < 0 || small <= room) &&
		float64(small) <= f.spare-float64(max(use-ten.Reserve, 0))
}

// entitle shares the contested GPUs among the contending tenants by
// weight, max-min fair (water-filling): a tenant gets no more than it
// wants (what it holds, if it waits for no more; that and the GPUs it
// waits for, within its limit and its department's, if it does), the
// tenants of a department with a limit no more together than it lets
// them borrow, and what they do not take goes to the others by weight.
func (f *fairShare) entitle(m *metrics, contested float64) {
	f.share = f.share[:0]
	var open []int
	for t, use := range m.tenantUse {
		f.share = append(f.share, 0)
		if f.contends(m, t, use) {
			open = append(open, t)
		}
	}
	want := func(t int) float64 {
		ten, use := m.tenants[t], m.tenantUse[t]
		if !f.wantsMore(m, t, use) {
			return f.held[t]
		}
		// What it asks for: what it holds and the work it waits with
		// (but requeued work, wantsMore), within its limit and its
		// department's. Before, a tenant waiting with one 1-GPU job was
		// entitled to as many as its limit let it borrow.
		w := f.held[t] + float64(m.tenantWaiting[t]-m.idleWaiting[t])
		if ten.Limit >= 0 {
			w = min(w, float64(ten.Limit-ten.Reserve))
		}
		if room := m.deptRoom(t); room >= 0 {
			w = min(w, f.held[t]+float64(room))
		}
		return w
	}
	// fill shares what left says is left among ts by weight, max-min
	// fair: tenants that want less than their part get what they want,
	// the rest is shared again among the others. With depts, first a
	// department whose tenants would take more than its limit lets them
	// borrow gets just that, shared among them (fillDepts).
	var fill func(ts []int, left func() float64, depts bool)
	fill = func(ts []int, left func() float64, depts bool) {
		for amount := left(); len(ts) > 0 && amount > 1e-9; amount = left() {
			var weights float64
			for _, t := range ts {
				weights += m.tenants[t].Weight
			}
			if weights <= 0 {
				return
			}
			if depts {
				if frozen := f.fillDepts(m, ts, want, amount/weights, fill); len(frozen) > 0 {
					ts = slices.DeleteFunc(ts, func(t int) bool { return slices.Contains(frozen, t) })
					continue
				}
			}
			keep := ts[:0]
			for _, t := range ts {
				if w := want(t) - f.share[t]; w <= amount*m.tenants[t].Weight/weights {
					f.share[t] += max(w, 0)
					continue
				}
				keep = append(keep, t)
			}
			if len(keep) == len(ts) {
				for _, t := range keep {
					f.share[t] += amount * m.tenants[t].Weight / weights
				}
				return
			}
			ts = keep
		}
	}
	fill(open, func() float64 {
		left := contested
		for t := range f.share {
			left -= f.share[t]
		}
		return left
	}, true)
}

// fillDepts gives the tenants ts of each department with a limit that
// would borrow more than it lets them, at perWeight GPUs per unit of
// weight, what it lets them borrow (fill), and returns them.
func (f *fairShare) fillDepts(m *metrics, ts []int, want func(int) float64, perWeight float64,
	fill func([]int, func() float64, bool)) []int {
	var frozen []int
	for di := range m.depts {
		d := &m.depts[di]
		var members []int
		room := float64(m.deptRoom(d.members[0]))
		for _, t := range d.members {
			room += f.held[t]
			if slices.Contains(ts, t) {
				members = append(members, t)
			}
		}
		if len(members) < 2 {
			continue // one tenant's want is capped by the room already
		}
		left := func() float64 {
			l := room
			for _, t := range d.members {
				l -= f.share[t]
			}
			return l
		}
		var adds float64
		for _, t := range members {
			adds += min(want(t)-f.share[t], perWeight*m.tenants[t].Weight)
		}
		if adds > left()+1e-9 {
			fill(slices.Clone(members), left, false)
			frozen = append(frozen, members...)
		}
	}
	return frozen
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
