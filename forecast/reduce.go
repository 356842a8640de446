package forecast

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// A large cluster is replayed reduced: the engine's plan grows with the
// cluster (50–80 ms at 10,000 nodes), and a replay needs tens of plans, so
// ten replays of the whole cluster cannot fit a forecast's budget. A
// replay of a cluster of more than Options.MaxNodes nodes plans on one k-th
// of it (k the least that brings it within MaxNodes) with the same
// proportions: one node in k of each kind (node pool, GPU class and size),
// the work running on those, one waiting job in k of each tenant, tier and
// size (in the order they wait), the tenants' reserves and limits over k,
// and arrivals at a k-th of the rate. Each replay takes another of the k
// shares. A waiting job of the share replayed gets its own start; one of
// another share gets its start from its neighbours of the same tenant,
// tier and size in the order they wait, the replayed jobs just ahead of it
// and just behind it, interpolated by its place between them (wider
// neighbours, across tenants and sizes, when its own group has no job in
// the share). Every replay then informs every job's forecast, at the cost
// of a replay of MaxNodes nodes.

// reduction is how a forecast replays a large cluster k shares at a time.
type reduction struct {
	k      int
	engine *engine.Engine
	// jobs are the waiting jobs in the order they wait (priority, then
	// since), each with its share and its places in its groups.
	jobs  []waitingJob
	index map[engine.JobRef]int
	// groups, widest last: each the jobs' indices in their waiting order.
	groups [3]map[string][]int
}

type waitingJob struct {
	ref   engine.JobRef
	share int
	at    [3]int // its index in each of its groups
	key   [3]string
	since time.Time
	prio  int
}

// reductionFor is how many shares a cluster of n nodes is replayed in.
func reductionFor(n, maxNodes int) int {
	if maxNodes <= 0 || n <= maxNodes {
		return 1
	}
	return (n + maxNodes - 1) / maxNodes
}

func newReduction(in *Input, k int) *reduction {
	rd := &reduction{k: k, engine: engine.New(scaledPolicy(in.Engine.Policy(), k)), index: map[engine.JobRef]int{}}
	for _, d := range in.Snapshot.Waiting {
		if d.GPUsPerAlloc <= 0 || d.Count <= 0 {
			continue
		}
		if i, ok := rd.index[d.Job.Ref]; ok {
			if j := &rd.jobs[i]; d.Since.Before(j.since) {
				j.since = d.Since
			}
			continue
		}
		size := ClassOf("", "", d.GPUsPerAlloc*max(1, boolInt(d.Job.Gang)*d.Count)).GPUs
		tier := d.Job.Tier
		rd.index[d.Job.Ref] = len(rd.jobs)
		rd.jobs = append(rd.jobs, waitingJob{ref: d.Job.Ref, since: d.Since, prio: d.Job.Priority,
			key: [3]string{d.Job.Ref.Namespace + "\x00" + tier + "\x00" + itoa(size), tier + "\x00" + itoa(size), ""}})
	}
	order := make([]int, len(rd.jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := &rd.jobs[a], &rd.jobs[b]
		if c := cmp.Compare(y.prio, x.prio); c != 0 {
			return c
		}
		if c := x.since.Compare(y.since); c != 0 {
			return c
		}
		return cmp.Compare(x.ref.String(), y.ref.String())
	})
	for l := range rd.groups {
		rd.groups[l] = map[string][]int{}
	}
	for _, i := range order {
		j := &rd.jobs[i]
		for l := range rd.groups {
			j.at[l] = len(rd.groups[l][j.key[l]])
			rd.groups[l][j.key[l]] = append(rd.groups[l][j.key[l]], i)
		}
	}
	// Shares go round each tenant, tier and size from a place of its own
	// (its first job's), so that small groups do not all fall in share 0.
	for _, key := range slices.Sorted(maps.Keys(rd.groups[0])) {
		g := rd.groups[0][key]
		off := rd.jobs[g[0]].at[2]
		for p, i := range g {
			rd.jobs[i].share = (p + off) % k
		}
	}
	return rd
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// scaledPolicy is p with every tenant's reserve and limit, tenant-wide
// and per pool, over k (rounded; a limit of some GPUs stays at least 1).
func scaledPolicy(p *policy.Policy, k int) *policy.Policy {
	q := *p
	q.Tenants = make(map[string]*policy.Tenant, len(p.Tenants))
	scale := func(v int, floor int) int {
		if v <= 0 {
			return v // none, or Unlimited
		}
		return max(int(math.Round(float64(v)/float64(k))), floor)
	}
	for name, t := range p.Tenants {
		u := *t
		u.Reserve, u.Limit = scale(t.Reserve, 0), scale(t.Limit, 1)
		if t.Quotas != nil {
			u.Quotas = make(map[string]*policy.Quota, len(t.Quotas))
			for pool, qt := range t.Quotas {
				u.Quotas[pool] = &policy.Quota{Reserve: scale(qt.Reserve, 0), Limit: scale(qt.Limit, 1)}
			}
		}
		q.Tenants[name] = &u
	}
	if p.Departments != nil {
		// Departments shrink with their tenants: left whole, a
		// department's limit would never bind in a share of the cluster.
		q.Departments = make(map[string]*policy.Department, len(p.Departments))
		for name, d := range p.Departments {
			u := *d
			u.Reserve, u.Limit = scale(d.Reserve, 0), scale(d.Limit, 1)
			q.Departments[name] = &u
		}
	}
	return &q
}

// input is the reduced input of share s: its nodes, the work on them,
// its waiting jobs.
func (rd *reduction) input(in *Input, s int) Input {
	src := in.Snapshot
	snap := &engine.Snapshot{}
	kinds := map[string][]int{}
	for i := range src.Nodes {
		n := &src.Nodes[i]
		key := n.NodePool + "\x00" + n.Device + "\x00" + itoa(n.GPUs)
		kinds[key] = append(kinds[key], i)
	}
	kept := map[string]bool{}
	for _, key := range slices.Sorted(maps.Keys(kinds)) {
		g := kinds[key]
		if len(g) < rd.k {
			// Fewer than k of its kind: one stands for them all, so that
			// work that only they can run still can.
			kept[src.Nodes[g[s%len(g)]].ID] = true
			continue
		}
		for p, i := range g {
			if p%rd.k == s {
				kept[src.Nodes[i].ID] = true
			}
		}
	}
	for _, n := range src.Nodes {
		if kept[n.ID] {
			snap.Nodes = append(snap.Nodes, n)
		}
	}
	for _, a := range src.Allocs {
		if kept[a.NodeID] {
			snap.Allocs = append(snap.Allocs, a)
		}
	}
	for _, m := range src.Earmarks {
		if kept[m.NodeID] {
			snap.Earmarks = append(snap.Earmarks, m)
		}
	}
	for _, d := range src.Waiting {
		if i, ok := rd.index[d.Job.Ref]; ok && rd.jobs[i].share == s {
			snap.Waiting = append(snap.Waiting, d)
		}
	}
	// The tenants' decayed usage (fair share over time) orders the
	// share's waiting work and its fair-share reclaims as the whole
	// cluster's: left out, a share replayed as if fair share were off.
	// Scaled like the tenants' reserves and limits, so that what they
	// borrow in the share accrues on it at the same rate (fairshare.go).
	if len(src.Usage) > 0 {
		snap.Usage = make(map[string]float64, len(src.Usage))
		for t, u := range src.Usage {
			snap.Usage[t] = u / float64(rd.k)
		}
	}
	out := *in
	out.Engine, out.Snapshot = rd.engine, snap
	return out
}

// start is job i's start in a replay of share s, from the starts of that
// share's jobs (zero: not started).
func (rd *reduction) start(i, s int, starts map[engine.JobRef]time.Time) (time.Time, bool) {
	j := &rd.jobs[i]
	if j.share == s {
		t, ok := starts[j.ref]
		return t, ok
	}
	for l := range rd.groups {
		g := rd.groups[l][j.key[l]]
		lo, hi := -1, -1
		for p := j.at[l] - 1; p >= 0 && lo < 0; p-- {
			if rd.jobs[g[p]].share == s {
				lo = p
			}
		}
		for p := j.at[l] + 1; p < len(g) && hi < 0; p++ {
			if rd.jobs[g[p]].share == s {
				hi = p
			}
		}
		switch {
		case lo < 0 && hi < 0:
			continue // none of its group in the share: a wider group
		case lo < 0:
			return starts[rd.jobs[g[hi]].ref], true
		case hi < 0:
			return starts[rd.jobs[g[lo]].ref], true
		}
		tl, th := starts[rd.jobs[g[lo]].ref], starts[rd.jobs[g[hi]].ref]
		f := float64(j.at[l]-lo) / float64(hi-lo)
		switch {
		case tl.IsZero():
			return time.Time{}, true
		case th.IsZero():
			if f <= 0.5 {
				return tl, true
			}
			return time.Time{}, true
		}
		return tl.Add(time.Duration(f * float64(th.Sub(tl)))), true
	}
	return time.Time{}, false
}

func itoa(n int) string { return strconv.Itoa(n) }

// shareOf is the share replay i of n plays out of k: every share in turn,
// spread evenly when there are fewer replays than shares.
func shareOf(i, n, k int) int {
	if n < k {
		return i * k / n
	}
	return i % k
}
