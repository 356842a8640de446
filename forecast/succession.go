package forecast

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/gpu-steward/steward/policy/engine"
)

// Work a tenant's limit holds back starts as the tenant's own work ends:
// the engine resumes the next of it at the plan after. A replay plans at
// steps that grow to a share of the time ahead, so a tenant at its limit
// with short jobs queued started one job per freed slot per step: a
// thousand 3-minute jobs behind a limit that leaves them two or three
// slots (Philly's burst) took hundreds of steps, past the horizon, where
// the simulation ran them within a day. succeed lets them follow each
// other within a step instead: when work ends before the step does, the
// next job of its tenant (namespace), tier and size that the plan left
// held for the limit (engine.RuleLimit), in the plan's order, starts on
// its GPUs at its end, and so on, as the engine would have resumed it at
// a plan then. It costs run-time draws, no plans. Only work waiting for
// the limit follows, and only work the replay placed (the engine let it
// start, so within the limit: a tenant over it with work that was
// running before, which the engine would not let grow back, follows
// nothing): the GPUs stay the tenant's, within its limit, so no other
// waiting work had a claim the engine would weigh.
//
// Work waiting for GPUs in a full cluster (engine.RuleCapacity) follows
// the same way, and for the same reason: a tenant whose short jobs hold a
// hundred GPUs of a full cluster, its next ones waiting for them, ran a
// hundred jobs per step, where the engine starts the next on each GPU at
// the plan after it frees (Philly, after its burst's first hours: a
// family of 3-minute jobs forecast at 50 hours, started within 3.4). The
// GPUs pass from one run to the next of its tenant, tier and size, so
// that no tenant holds more than it did; but the engine gives freed GPUs
// to the first waiting work that fits them, so a class follows only ahead
// of any work of another class held for capacity that the GPUs would fit
// (capacityAhead): from there on its work waits for the next plan, as
// before.

// maxSuccessions bounds the starts succeed makes in one step.
const maxSuccessions = 4096

type successionKey struct {
	ns, tier string
	gpus     int
}

func (r *replay) succeed(plan *engine.Plan) {
	queues := map[successionKey][]int{}
	seen := map[engine.JobRef]bool{}
	ahead := capacityAhead{blocked: map[successionKey]bool{}, checked: map[successionKey]int{}, known: map[successionKey]bool{}}
	for _, w := range plan.Waiting {
		rule := w.Reason.Rule
		if !w.Held || seen[w.Job] || (rule != engine.RuleLimit && rule != engine.RuleCapacity) {
			continue
		}
		seen[w.Job] = true
		for _, i := range r.byJob[w.Job] {
			d := &r.demands[i]
			if !d.d.Held || d.d.Count <= 0 || d.parked || d.d.GPUsPerAlloc <= 0 {
				continue
			}
			k := successionKey{d.d.Job.Ref.Namespace, d.d.Job.Tier, d.d.GPUsPerAlloc}
			if rule == engine.RuleCapacity {
				follows := !d.d.Job.Gang && !ahead.passed(k)
				ahead.add(k)
				if !follows {
					continue
				}
			} else if d.d.Job.Gang {
				continue
			}
			queues[k] = append(queues[k], i)
		}
	}
	if len(queues) == 0 {
		return
	}
	keyOf := func(a *ralloc) successionKey {
		return successionKey{a.a.Job.Ref.Namespace, a.a.Job.Tier, len(a.a.GPUIDs)}
	}
	// The runs over by now whose class has work to follow, earliest end
	// first (ties by ID: deterministic).
	var ended []int
	for i := range r.allocs {
		a := &r.allocs[i]
		if a.placed && !a.gone && a.drainEnd.IsZero() && !a.end.After(r.now) && len(queues[keyOf(a)]) > 0 {
			ended = append(ended, i)
		}
	}
	byEnd := func(x, y int) int {
		a, b := &r.allocs[x], &r.allocs[y]
		return cmp.Or(a.end.Compare(b.end), cmp.Compare(a.a.ID, b.a.ID))
	}
	slices.SortFunc(ended, byEnd)
	done := map[int]bool{} // allocations succeeded: over, their GPUs passed on
	for n := 0; len(ended) > 0 && n < maxSuccessions; n++ {
		prev := ended[0]
		ended = ended[1:]
		k := keyOf(&r.allocs[prev])
		q := queues[k]
		for len(q) > 0 && r.demands[q[0]].d.Count <= 0 {
			q = q[1:]
		}
		queues[k] = q
		if len(q) == 0 {
			continue
		}
		d := &r.demands[q[0]]
		pa := r.allocs[prev]
		start := maxTime(pa.end, d.readyAt)
		if start.After(r.now) {
			continue
		}
		j := r.jobs[d.d.Job.Ref]
		run := r.runOf(d, j)
		r.nextID++
		r.allocs = append(r.allocs, ralloc{node: pa.node, end: start.Add(run), placed: true, a: engine.Alloc{
			ID: "forecast-alloc-" + strconv.Itoa(r.nextID), Job: d.d.Job, Group: d.d.Group, NodeID: pa.a.NodeID,
			GPUIDs: pa.a.GPUIDs, StartedAt: start,
		}})
		done[prev] = true
		d.d.Count--
		j.placed = maxTime(j.placed, start)
		if j.target && j.cause == "" {
			j.cause = "when " + pa.a.Job.Ref.String() + " ends"
		}
		if next := len(r.allocs) - 1; !r.allocs[next].end.After(r.now) {
			i, _ := slices.BinarySearchFunc(ended, next, byEnd)
			ended = slices.Insert(ended, i, next)
		}
	}
	if len(done) == 0 {
		return
	}
	kept := r.allocs[:0]
	for i, a := range r.allocs {
		if !done[i] {
			kept = append(kept, a)
		}
	}
	r.allocs = kept
	r.demands = slices.DeleteFunc(r.demands, func(d rdemand) bool { return d.d.Count <= 0 })
	r.index()
}

// capacityAhead is the classes of the work held for capacity met so far
// in the plan's order. Work of a class follows its class's runs only
// while no work of another class that would fit the GPUs they free (as
// many GPUs or fewer) came before it: that work is the engine's to start
// first, at the next plan.
type capacityAhead struct {
	classes []successionKey
	known   map[successionKey]bool
	blocked map[successionKey]bool
	// checked: how many of classes each class was checked against (they
	// only grow: a long queue costs one pass per class, not per job).
	checked map[successionKey]int
}

func (c *capacityAhead) add(k successionKey) {
	if !c.known[k] {
		c.known[k] = true
		c.classes = append(c.classes, k)
	}
}

func (c *capacityAhead) passed(k successionKey) bool {
	if c.blocked[k] {
		return true
	}
	for _, o := range c.classes[c.checked[k]:] {
		if o != k && o.gpus <= k.gpus {
			c.blocked[k] = true
			return true
		}
	}
	c.checked[k] = len(c.classes)
	return false
}
