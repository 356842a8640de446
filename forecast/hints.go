package forecast

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// DefaultHintPlans bounds the engine's plans spent on unblock hints per
// forecast: smaller asks and eviction-cap exits are tried for the jobs at
// the head of the queue first, and the rest get only the hints that need
// no plan.
const DefaultHintPlans = 32

// Hints says, for each queued job, what would let it start, one line
// each, most direct first:
//
//   - "no client node can run it: ..." (and no forecast) when no node of
//     its node pool has GPUs its request accepts, or enough of them;
//   - "starts now if it asks for 2 GPUs instead of 4": smaller asks tried
//     against the same snapshot (the engine's answer, not a guess);
//   - "starts when research/train ends, or at 14:30 when the eviction cap
//     no longer spares it": the engine asked again at the moments running
//     work leaves the eviction cap, naming the work it would then preempt;
//   - "tenant research must hold at most 4 GPUs ..." for the limit rule;
//   - what let it start in the forecast's median replay.
//
// Only the first two kinds cost plans, at most maxPlans in all.
func Hints(in Input, queue []Entry, plan *engine.Plan, fc *Result, maxPlans int) map[engine.JobRef][]string {
	h := &hinter{in: in, budget: maxPlans, plan: plan, byJob: map[engine.JobRef][]int{}, most: map[string]int{}}
	for i, d := range in.Snapshot.Waiting {
		if d.GPUsPerAlloc > 0 && d.Count > 0 {
			h.byJob[d.Job.Ref] = append(h.byJob[d.Job.Ref], i)
		}
	}
	out := map[engine.JobRef][]string{}
	for _, e := range queue {
		var lines []string
		demands := h.demandsOf(e.Job)
		if len(demands) == 0 {
			continue
		}
		if why, no := h.noNode(demands); no {
			out[e.Job] = []string{why}
			continue
		}
		if e.Rule == engine.RuleDraining {
			out[e.Job] = []string{"GPUs are being freed for it: it starts when its victims have checkpointed and stopped"}
			continue
		}
		if line, ok := h.smallerAsk(e, demands); ok {
			lines = append(lines, line)
		}
		if line, ok := h.protectedVictim(e, demands); ok {
			lines = append(lines, line)
		}
		if e.Rule == engine.RuleLimit {
			lines = append(lines, h.limitLine(e, demands))
		}
		if f := fc.job(e.Job); f != nil && f.Cause != "" && len(lines) < 3 {
			lines = append(lines, "starts "+f.Cause)
		}
		if len(lines) > 0 {
			out[e.Job] = lines
		}
	}
	return out
}

func (r *Result) job(ref engine.JobRef) *JobForecast {
	if r == nil {
		return nil
	}
	return r.Jobs[ref]
}

type hinter struct {
	in     Input
	plan   *engine.Plan
	budget int
	byJob  map[engine.JobRef][]int // waiting demands' indices by job
	most   map[string]int          // the most GPUs a node has, by node pool and devices asked
}

// demandsOf is the job's waiting demands: their indices in the snapshot.
func (h *hinter) demandsOf(ref engine.JobRef) []int { return h.byJob[ref] }

// noNode reports a demand no node can ever run: none of its node pool has
// GPUs its request accepts, or as many as it asks on one node.
func (h *hinter) noNode(demands []int) (string, bool) {
	for _, i := range demands {
		d := &h.in.Snapshot.Waiting[i]
		key := d.NodePool + "\x00" + strings.Join(d.Devices, "\x00")
		if d.Devices == nil {
			key += "\x00any"
		}
		most, ok := h.most[key]
		if !ok {
			for k := range h.in.Snapshot.Nodes {
				n := &h.in.Snapshot.Nodes[k]
				if (d.NodePool == "" || d.NodePool == "all" || d.NodePool == n.NodePool) && (d.Devices == nil || slices.Contains(d.Devices, n.Device)) {
					most = max(most, n.GPUs)
				}
			}
			h.most[key] = most
		}
		switch {
		case most == 0:
			asks := d.Asks
			if asks == "" {
				asks = "the GPUs its request names"
			}
			where := "no client node"
			if d.NodePool != "" && d.NodePool != "all" {
				where += " in node pool " + d.NodePool
			}
			return where + " has " + asks + ": it cannot start until one joins (no forecast)", true
		case most < d.GPUsPerAlloc:
			return "no client node it may use has " + gpus(d.GPUsPerAlloc) + " (the most is " + strconv.Itoa(most) +
				"): it cannot start as asked (no forecast)", true
		}
	}
	return "", false
}

// startsNow plans the snapshot with demand i asking g GPUs an allocation
// at time at, and reports whether the demand is then left waiting or
// preempted for, and the plan.
func (h *hinter) tryPlan(i, g int, at time.Time) (*engine.Plan, bool) {
	if h.budget <= 0 {
		return nil, false
	}
	h.budget--
	s := *h.in.Snapshot
	s.Waiting = slices.Clone(s.Waiting)
	s.Waiting[i].GPUsPerAlloc = g
	s.WaitingOrder = nil
	return h.in.Engine.Plan(&s, at), true
}

func waitsIn(p *engine.Plan, d *engine.Demand) bool {
	for _, w := range p.Waiting {
		if w.Job == d.Job.Ref && w.Group == d.Group {
			return true
		}
	}
	return false
}

// smallerAsk finds the largest smaller ask (GPUs an allocation) of the
// job's first demand that asks for more than one with which the engine
// admits it now: 1 first (if even that waits, nothing smaller helps),
// then a binary search.
func (h *hinter) smallerAsk(e Entry, demands []int) (string, bool) {
	if h.budget <= 0 {
		return "", false
	}
	for _, i := range demands {
		d := &h.in.Snapshot.Waiting[i]
		if d.GPUsPerAlloc <= 1 {
			continue
		}
		starts := func(g int) (bool, bool) {
			p, ok := h.tryPlan(i, g, h.in.Now)
			return ok && !waitsIn(p, d), ok
		}
		if ok, tried := starts(1); !tried || !ok {
			return "", false
		}
		lo, hi := 1, d.GPUsPerAlloc-1 // lo starts now; find the largest that does
		for lo < hi {
			mid := (lo + hi + 1) / 2
			ok, tried := starts(mid)
			if !tried {
				break
			}
			if ok {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		each := ""
		if d.Count > 1 {
			each = " an allocation"
		}
		return "starts now if it asks for " + gpus(lo) + each + " instead of " + strconv.Itoa(d.GPUsPerAlloc), true
	}
	return "", false
}

// protectedVictim finds work that would be preempted for the job but for
// a protection that passes with time: the eviction cap
// (max_per_job_per_hour), which spares a job preempted that often in the
// last hour. The engine is asked again a second after the first moments
// (three at most) such work on nodes the job may use leaves the cap, and
// the work it would then preempt for the job is named. (min_runtime
// protects nothing on its own: the engine takes younger work when nothing
// older frees enough, so no job waits for it.)
func (h *hinter) protectedVictim(e Entry, demands []int) (string, bool) {
	pre := h.in.Engine.Policy().Preemption
	if h.budget <= 0 || pre.MaxPerJobPerHour <= 0 || e.Rule == engine.RuleLimit || e.Rule == engine.RuleReserve {
		return "", false
	}
	d := &h.in.Snapshot.Waiting[demands[0]]
	if d.Requeued {
		return "", false
	}
	usable := map[string]bool{}
	for _, n := range h.in.Snapshot.Nodes {
		if (d.NodePool == "" || d.NodePool == "all" || d.NodePool == n.NodePool) && (d.Devices == nil || slices.Contains(d.Devices, n.Device)) {
			usable[n.ID] = true
		}
	}
	var times []time.Time
	hourAgo := h.in.Now.Add(-time.Hour)
	for _, a := range h.in.Snapshot.Allocs {
		if a.Draining || !usable[a.NodeID] || a.Job.Ref == e.Job {
			continue
		}
		var recent []time.Time
		for _, t := range a.Job.Preemptions {
			if !t.Before(hourAgo) {
				recent = append(recent, t)
			}
		}
		if len(recent) >= pre.MaxPerJobPerHour {
			// Under the cap again once all but max-1 of them left the hour.
			slices.SortFunc(recent, time.Time.Compare)
			times = append(times, recent[len(recent)-pre.MaxPerJobPerHour].Add(time.Hour+time.Second))
		}
	}
	slices.SortFunc(times, time.Time.Compare)
	times = slices.Compact(times)
	for _, at := range times[:min(len(times), 3)] {
		p, ok := h.tryPlan(demands[0], d.GPUsPerAlloc, at)
		if !ok {
			return "", false
		}
		var victims []string
		for _, a := range p.Actions {
			if a.Kind == engine.Preempt && a.For != nil && *a.For == e.Job {
				victims = append(victims, a.Job.String())
			}
		}
		if len(victims) > 0 {
			return "starts when " + joinShort(victims) + " ends, or at " + Clock(at, h.in.Now) +
				" when the eviction cap (" + strconv.Itoa(pre.MaxPerJobPerHour) + " preemptions an hour) no longer spares it", true
		}
	}
	return "", false
}

// limitLine says how far its tenant must come down for the job to fit
// under its limit.
func (h *hinter) limitLine(e Entry, demands []int) string {
	d := &h.in.Snapshot.Waiting[demands[0]]
	need := d.GPUsPerAlloc
	if d.Job.Gang {
		need = d.GPUs()
	}
	if line, ok := h.departmentLimitLine(e, d, need); ok {
		return line
	}
	for _, t := range h.plan.Tenants {
		if t.Tenant == e.Tenant && t.Limit >= 0 && need > t.Limit {
			// No running work ending makes room: the ask itself is
			// over the limit.
			what := "an allocation"
			if d.Job.Gang {
				what = "its gang"
			}
			return "never starts as it is: " + what + " asks for " + gpus(need) + ", more than tenant " + e.Tenant +
				"'s limit of " + strconv.Itoa(t.Limit) + "; it could start if it asked for at most " + gpus(t.Limit)
		}
		if t.Tenant == e.Tenant && t.Limit >= 0 {
			return "starts when tenant " + e.Tenant + " holds at most " + gpus(max(t.Limit-need, 0)) +
				" (it holds " + strconv.Itoa(t.InUse) + ", limit " + strconv.Itoa(t.Limit) + "), " +
				"as its running work ends, or if it asks for fewer"
		}
	}
	return "starts when tenant " + e.Tenant + "'s running work ends and leaves room under its limit"
}

// departmentLimitLine is limitLine for a job its department's limit holds
// (policy.Department) rather than its tenant's own: the tenant is within
// its own limit with the job, the department is not.
func (h *hinter) departmentLimitLine(e Entry, d *engine.Demand, need int) (string, bool) {
	if len(h.plan.Departments) == 0 {
		return "", false
	}
	for _, t := range h.plan.Tenants {
		if t.Tenant == e.Tenant && t.Limit >= 0 && t.InUse+need > t.Limit {
			return "", false // its own limit holds it
		}
	}
	for _, dp := range h.plan.Departments {
		if !slices.Contains(dp.Tenants, e.Tenant) || dp.Limit < 0 {
			continue
		}
		if need > dp.Limit {
			what := "an allocation"
			if d.Job.Gang {
				what = "its gang"
			}
			return "never starts as it is: " + what + " asks for " + gpus(need) + ", more than department " + dp.Department +
				"'s limit of " + strconv.Itoa(dp.Limit) + "; it could start if it asked for at most " + gpus(dp.Limit), true
		}
		if dp.InUse+need > dp.Limit {
			return "starts when department " + dp.Department + " (tenants " + strings.Join(dp.Tenants, ", ") + ") holds at most " +
				gpus(max(dp.Limit-need, 0)) + " (it holds " + strconv.Itoa(dp.InUse) + ", limit " + strconv.Itoa(dp.Limit) + "), " +
				"as its tenants' running work ends, or if it asks for fewer", true
		}
	}
	return "", false
}

func gpus(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return strconv.Itoa(n) + " GPUs"
}

// Clock writes a time for people: "14:30 UTC" within a day of now, else
// with its date ("Nov 27 14:30 UTC").
func Clock(t, now time.Time) string {
	t = t.UTC()
	if d := t.Sub(now); d < 24*time.Hour && d > -24*time.Hour {
		return t.Format("15:04 UTC")
	}
	return t.Format("Jan 2 15:04 UTC")
}
