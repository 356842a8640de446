package forecast

import (
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Arrivals records the jobs that arrived in the last ArrivalWindow, for
// the controller (the simulator builds Input.Arrivals itself). The
// control loop owns it: it is not safe for concurrent use.
//
// It keeps what each arrival asked for and its run-time class, not an
// estimate from its class's history: such an estimate holds the class's
// runs (up to HistorySize finished, and the runs going), and a copy per
// arrival grew with the cluster's churn (72 MB of a 1,000-node leader's
// heap). Window gives each arrival the estimate its class's history
// gives then, one per view of the history (History.EstimatesRunning), as
// the simulator does for its arrivals.
type Arrivals struct {
	since time.Time // when watching began
	list  []keptArrival
	items int // the items of list (MaxArrivalItems)
}

// keptArrival is an arrival as Arrivals keeps it: its Estimate only when
// it is the job's own (own), else its class's, read at Window.
type keptArrival struct {
	Arrival
	class Class
	own   bool
	items int
}

// NewArrivals starts watching at now: arrivals count from then on (what
// was there already had arrived before anyone looked).
func NewArrivals(now time.Time) *Arrivals { return &Arrivals{since: now} }

// MaxArrivals bounds the arrivals Arrivals keeps: beyond it the oldest
// go, and the rate is taken over the span the rest cover.
const MaxArrivals = 8192

// MaxArrivalItems bounds the demands Arrivals keeps and the nodes they
// are pinned to, a tenant's to size (its jobs' groups, its constraints),
// as MaxArrivals bounds the arrivals: beyond it the oldest go.
const MaxArrivalItems = 4 * MaxArrivals

// itemsOf is what an arrival counts towards MaxArrivalItems: each demand,
// and each node it is pinned to.
func itemsOf(ds []engine.Demand) int {
	n := len(ds)
	for _, d := range ds {
		n += len(d.Nodes)
	}
	return n
}

// Add records an arrival (in time order) of a job of run-time class c.
// Its Estimate is kept only when it is the job's own (Expected, Forever);
// otherwise Window gives it c's. Arrivals older than the window, or
// beyond MaxArrivals or MaxArrivalItems, are dropped, the oldest first;
// one arrival larger than MaxArrivalItems alone is not kept.
func (a *Arrivals) Add(arr Arrival, c Class) {
	k := keptArrival{Arrival: arr, class: c, own: arr.Estimate.Expected > 0 || arr.Estimate.Forever, items: itemsOf(arr.Demands)}
	if k.items > MaxArrivalItems {
		return
	}
	if !k.own {
		k.Estimate = Estimate{}
	}
	a.list = append(a.list, k)
	a.items += k.items
	a.prune(arr.At)
}

func (a *Arrivals) prune(now time.Time) {
	from := now.Add(-ArrivalWindow)
	drop, items := 0, a.items
	full := func() bool { return len(a.list)-drop > MaxArrivals || items > MaxArrivalItems }
	for drop < len(a.list) && (a.list[drop].At.Before(from) || full()) {
		items -= a.list[drop].items
		a.list[drop] = keptArrival{} // its demands go now
		drop++
	}
	if drop == 0 {
		return
	}
	if !a.list[drop-1].At.Before(from) {
		// What was dropped for room leaves a span of less than the
		// window: the rate is taken from the oldest kept on.
		a.since = maxTime(a.since, a.list[drop-1].At)
	}
	a.items = items
	// Reslice rather than move the rest down at every arrival (8,192 of
	// them, once full); append moves them when it grows the array.
	a.list = a.list[drop:]
}

// Window returns the arrivals of the last ArrivalWindow before now and
// the start of the span they cover (for the rate), each with its own
// estimate or its class's from h, the runs going counted (as
// History.EstimateRunning). Arrivals of classes that rest on the same
// runs share their estimate's values.
func (a *Arrivals) Window(now time.Time, h *History, going map[Class][]time.Duration) ([]Arrival, time.Time) {
	a.prune(now)
	from := now.Add(-ArrivalWindow)
	if a.since.After(from) {
		from = a.since
	}
	var classes []Class
	for _, k := range a.list {
		if !k.own {
			classes = append(classes, k.class)
		}
	}
	est := h.EstimatesRunning(classes, going)
	out := make([]Arrival, len(a.list))
	for i, k := range a.list {
		out[i] = k.Arrival
		if !k.own {
			out[i].Estimate = est[k.class]
		}
	}
	return out, from
}
