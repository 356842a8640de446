package forecast

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Work keeps arriving while a job waits, and work of a higher tier (or of a
// tenant under its reserve) goes ahead of it: a replay in which nothing
// arrives forecasts starts too early, the more so the longer the wait
// (Philly's P90 covered 53 % of starts without arrivals). A replay
// therefore adds arrivals as a Poisson process of the rate seen in the
// recent past, each a copy of the shape of a job that arrived then, drawn
// uniformly: per tenant and tier that is a Poisson process of the rate
// that tenant and tier arrived at, with the sizes, gangs and run times its
// jobs had.

// Arrival is one job that arrived in the past: what it asked for and
// what is known of its run time.
type Arrival struct {
	At time.Time
	// Demands are its groups' asks as the engine saw them when it arrived
	// (Job names its tenant's namespace, tier and priority).
	Demands []engine.Demand
	// Estimate is the run time of a job like it (its class's history).
	Estimate Estimate
}

// ArrivalWindow is how far back arrivals count towards the rate: a day,
// long enough to hold a day's rhythm and short enough to follow a change
// of load.
const ArrivalWindow = 24 * time.Hour

// minArrivalSpan is the least span of observation a rate is drawn from: a
// few minutes' arrivals say little about the next days.
const minArrivalSpan = 10 * time.Minute

// arrivalRate is the arrivals per second in.Arrivals stand for; 0 when
// there are none or their span is too short to tell.
func (in *Input) arrivalRate() float64 {
	span := in.Now.Sub(in.ArrivalsSince)
	if len(in.Arrivals) == 0 || span < minArrivalSpan {
		return 0
	}
	return float64(len(in.Arrivals)) / span.Seconds()
}

// arrivalGen draws a replay's arrivals, in time order.
type arrivalGen struct {
	rate float64 // per second; 0: none
	next time.Time
	n    int
}

func (r *replay) initArrivals() {
	r.arr.rate = r.in.arrivalRate() / float64(r.scale)
	if r.arr.rate > 0 {
		r.arr.next = r.now.Add(r.interArrival())
	}
}

func (r *replay) interArrival() time.Duration {
	return max(time.Duration(r.arrRng.ExpFloat64()/r.arr.rate*float64(time.Second)), time.Millisecond)
}

// arrive adds the arrivals due by now as waiting demands.
func (r *replay) arrive() {
	if r.arr.rate == 0 {
		return
	}
	for !r.arr.next.After(r.now) {
		at := r.arr.next
		if u := r.in.ArrivalsUntil; !u.IsZero() && at.After(u) {
			r.arr.rate = 0
			return
		}
		r.arr.next = at.Add(r.interArrival())
		past := &r.in.Arrivals[r.arrRng.IntN(len(r.in.Arrivals))]
		r.arr.n++
		ref := engine.JobRef{Namespace: "", ID: "forecast-arrival-" + strconv.Itoa(r.arr.n)}
		for _, d := range past.Demands {
			if d.GPUsPerAlloc <= 0 || d.Count <= 0 {
				continue
			}
			ref.Namespace = d.Job.Ref.Namespace
			d.Job.Ref = ref
			d.Job.Preemptions = nil
			// Held: it arrived since the last step, when the engine
			// planned for it (Nomad's blocked evaluation asks for a plan)
			// and left it to the engine's order; the engine resumes it
			// in this step's plan if it goes now.
			d.Since, d.Held, d.Requeued, d.Preempted = at, true, false, false
			if r.jobs[ref] == nil {
				r.jobs[ref] = &rjob{est: r.boot.of(past.Estimate), prio: d.Job.Priority, promoted: d.Job.Promoted, arrived: true}
			}
			r.demands = append(r.demands, rdemand{d: d, readyAt: at})
		}
	}
}

// arrivalRNG is the stream arrivals are drawn from, apart from run times
// so that adding arrivals leaves the other draws of a replay alone.
func arrivalRNG(seed, replay uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, replay))
}
