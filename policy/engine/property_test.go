package engine

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestProperties checks invariants over thousands of random clusters.
func TestProperties(t *testing.T) {
	runs := 300
	if testing.Short() {
		runs = 200
	}
	for seed := 0; seed < runs; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 42))
		p := genPolicy(2+r.IntN(4), r.IntN(12), []int{policy.Unlimited, 16, 24}[r.IntN(3)])
		s := genCluster(r, 2+r.IntN(8), []int{4, 8}[r.IntN(2)], 0, r.IntN(12), len(p.Tenants), t0)
		for i := range s.Allocs {
			s.Allocs[i].Draining = r.IntN(20) == 0
		}
		if r.IntN(2) == 0 {
			nameGroups(r, s)
		}
		// Half the policies keep build waiting beyond reserves; some
		// bound preemptions over a job's life, which some jobs reached.
		if r.IntN(2) == 0 {
			p.Tiers["build"].BeyondReserve = policy.BeyondReserveWait
		}
		p.Preemption.MaxPerJob = []int{0, 1, 3}[r.IntN(3)]
		for i := range s.Allocs {
			if r.IntN(8) == 0 {
				s.Allocs[i].Job.PreemptionsTotal = r.IntN(5)
			}
		}
		for i := range s.Waiting {
			if r.IntN(4) == 0 {
				s.Waiting[i].Job.PreemptionsTotal = r.IntN(5)
			}
		}
		if r.IntN(3) == 0 {
			// A node of MIG-like devices, each half a GPU: reserves and
			// limits count them so (units.go).
			n := &s.Nodes[r.IntN(len(s.Nodes))]
			n.Share, n.Device, n.Model = 0.5, "nvidia/gpu/A100 MIG 3g.40gb", "A100 MIG 3g.40gb"
		}
		genDepartment(seed, p)
		if seed%3 == 0 {
			// Fair-share reclaim, with usage that puts some tenants far
			// above their share (not drawn from r: the other seeds'
			// clusters stay as they were).
			p.Preemption.FairShareHalfLife, p.Preemption.FairShareReclaimAbove = 24*time.Hour, 1.5
			s.Usage = map[string]float64{}
			for i, name := range p.TenantNames() {
				s.Usage[name] = float64((seed*7+i*13)%50) * 3600
			}
		}
		e := New(p)
		plan := e.Plan(s, t0)
		name := fmt.Sprintf("seed %d", seed)
		checkNonPreemptibleVictimsBeyondReserve(t, name, e, s, plan)
		checkNonPreemptibleAdmittedWithinReserve(t, name, e, s, plan)
		checkRunBeyondReserve(t, name, e, s, plan)
		checkProtectedVictims(t, name, e, s, plan)
		checkVictimsExistOnce(t, name, s, plan)
		checkLimits(t, name, e, s, plan)
		checkDepartmentLimits(t, name, e, s, plan)
		checkPoolLimits(t, name, e, s, plan)
		checkBeneficiariesFit(t, name, s, plan)
		checkGroupTops(t, name, s, plan)
		if again := e.Plan(s, t0); !reflect.DeepEqual(plan, again) {
			t.Fatalf("%s: two plans of the same snapshot differ", name)
		}
		if t.Failed() {
			t.Fatalf("%s failed; plan:\n%v", name, plan.Actions)
		}
	}
}

// nameGroups makes groups of up to four allocations in a row of as many
// GPUs each (one job, on one node or two) and names them in a shuffled
// order, as Nomad would after replacements.
func nameGroups(r *rand.Rand, s *Snapshot) {
	for i := 0; i < len(s.Allocs); {
		n := 1
		for n < 1+r.IntN(4) && i+n < len(s.Allocs) && len(s.Allocs[i+n].GPUIDs) == len(s.Allocs[i].GPUIDs) {
			n++
		}
		idx := r.Perm(n + r.IntN(2)) // an index may be missing (stopped)
		for k := range n {
			a := &s.Allocs[i+k]
			a.Job = s.Allocs[i].Job
			a.Name = fmt.Sprintf("%s.%s[%d]", a.Job.Ref.ID, a.Group, idx[k])
		}
		i += n
	}
}

// checkGroupTops: the victims of a group are its allocations with the
// highest name indexes among those not draining: what Nomad stops when
// the group's count drops.
func checkGroupTops(t *testing.T, name string, s *Snapshot, plan *Plan) {
	t.Helper()
	victim := map[string]bool{}
	for _, a := range victimActions(plan) {
		for _, id := range a.Allocs {
			victim[id] = true
		}
	}
	type group struct {
		job   JobRef
		group string
	}
	lowest, highest := map[group]int{}, map[group]int{}
	for _, a := range s.Allocs {
		i := NameIndex(a.Name)
		if i < 0 || a.Draining || a.Job.Gang {
			continue
		}
		g := group{a.Job.Ref, a.Group}
		if victim[a.ID] {
			if l, ok := lowest[g]; !ok || i < l {
				lowest[g] = i
			}
		} else if h, ok := highest[g]; !ok || i > h {
			highest[g] = i
		}
	}
	for g, l := range lowest {
		if h, ok := highest[g]; ok && h > l {
			t.Errorf("%s: %s/%s loses index %d but keeps %d: Nomad would stop the highest", name, g.job, g.group, l, h)
		}
	}
}

func victimActions(plan *Plan) []Action {
	var out []Action
	for _, a := range plan.Actions {
		if a.Kind == Preempt || a.Kind == IdleStop {
			out = append(out, a)
		}
	}
	return out
}

func allocsByID(s *Snapshot) map[string]*Alloc {
	m := map[string]*Alloc{}
	for i := range s.Allocs {
		m[s.Allocs[i].ID] = &s.Allocs[i]
	}
	return m
}

// tierOf is the tier a job runs in, resolved in its tenant by the policy
// itself (not by the engine's table).
func tierOf(p *policy.Policy, job *Job) *policy.Tier {
	name, _ := p.TenantTier(p.TenantOf(job.Ref.Namespace), job.Tier)
	return p.Tiers[name]
}

// allocUnits is what an allocation's GPUs count for in its tenant's
// figures: a device of a node with Share s is s of a GPU (units.go).
func allocUnits(s *Snapshot, a *Alloc) int {
	for _, n := range s.Nodes {
		if n.ID == a.NodeID {
			return len(a.GPUIDs) * unitsOf(n.Share)
		}
	}
	return len(a.GPUIDs) * gpuUnit
}

// demandUnits is what one of a demand's GPUs counts for before its node is
// known: the most of any node it may use.
func demandUnits(s *Snapshot, d *Demand) int {
	most := 0
	for _, n := range s.Nodes {
		if (d.NodePool == "" || d.NodePool == "all" || d.NodePool == n.NodePool) && (d.Devices == nil || slices.Contains(d.Devices, n.Device)) {
			most = max(most, unitsOf(n.Share))
		}
	}
	if most == 0 {
		return gpuUnit
	}
	return most
}

// checkNonPreemptibleVictimsBeyondReserve: non-preemptible work within its
// tenant's reserve is never a victim. A non-preemptible allocation may be
// one only when it does not fit in the reserve even alongside just its
// tenant's non-preemptible work started no later than it. (Generated
// allocations are no gangs: each is its own unit.)
func checkNonPreemptibleVictimsBeyondReserve(t *testing.T, name string, e *Engine, s *Snapshot, plan *Plan) {
	byID := allocsByID(s)
	for _, a := range victimActions(plan) {
		for _, id := range a.Allocs {
			v := byID[id]
			tier := tierOf(e.p, &v.Job)
			if tier.Preemptible {
				continue
			}
			if a.Kind == IdleStop {
				t.Errorf("%s: idle rule stops %s of non-preemptible tier %s", name, id, tier.Name)
			}
			ten := e.p.TenantOf(v.Job.Ref.Namespace)
			older := 0
			for i := range s.Allocs {
				o := &s.Allocs[i]
				if o.ID != v.ID && !o.Draining && o.Job.Ref.Namespace == v.Job.Ref.Namespace &&
					!tierOf(e.p, &o.Job).Preemptible && !o.StartedAt.After(v.StartedAt) {
					older += allocUnits(s, o)
				}
			}
			if older+allocUnits(s, v) <= ten.Reserve*gpuUnit {
				t.Errorf("%s: %s stops %s of non-preemptible tier %s within tenant %s's reserve of %d (%d GPUs of its non-preemptible work started no later)",
					name, a.Kind, id, tier.Name, ten.Name, ten.Reserve, older)
			}
		}
	}
}

// checkNonPreemptibleAdmittedWithinReserve: no demand of a non-preemptible
// tier that waits beyond reserves (beyond_reserve "wait") is admitted
// beyond its tenant's reserve. Once the plan's victims are gone and the
// work it admits runs, a tenant that was admitted such work holds at most
// its reserve in non-preemptible work.
func checkNonPreemptibleAdmittedWithinReserve(t *testing.T, name string, e *Engine, s *Snapshot, plan *Plan) {
	gone := map[string]bool{}
	for _, a := range victimActions(plan) {
		for _, id := range a.Allocs {
			gone[id] = true
		}
	}
	fixed, admitted := map[string]int{}, map[string]int{}
	for _, a := range s.Allocs {
		if !a.Draining && !gone[a.ID] && !tierOf(e.p, &a.Job).Preemptible {
			fixed[a.Job.Ref.Namespace] += allocUnits(s, &a)
		}
	}
	type group struct {
		job   JobRef
		group string
	}
	moved := map[group]int{} // allocations resumed (held) or held (queued)
	for _, a := range plan.Actions {
		if a.Kind == Resume || a.Kind == Hold {
			moved[group{a.Job, a.Group}] += a.Count
		}
	}
	for _, d := range s.Waiting {
		if !tierOf(e.p, &d.Job).WaitsBeyondReserve() || d.GPUsPerAlloc <= 0 || d.Count <= 0 {
			continue
		}
		n := moved[group{d.Job.Ref, d.Group}] // held: resumed
		if !d.Held {
			n = d.Count - n // queued: not held
		}
		admitted[d.Job.Ref.Namespace] += n * d.GPUsPerAlloc * demandUnits(s, &d)
	}
	for ns, gpus := range admitted {
		if ten := e.p.TenantOf(ns); gpus > 0 && fixed[ns]+gpus > ten.Reserve*gpuUnit {
			t.Errorf("%s: tenant %s is admitted %d GPUs of non-preemptible work and then holds %d of it, reserve %d",
				name, ns, gpus, fixed[ns]+gpus, ten.Reserve)
		}
	}
}

// checkRunBeyondReserve: work of a non-preemptible tier that runs beyond
// reserves (beyond_reserve "run", the default) never waits for its
// reserve, and is a victim only of reserve reclaims and limits: no
// priority, idle rule or backfill takes it.
func checkRunBeyondReserve(t *testing.T, name string, e *Engine, s *Snapshot, plan *Plan) {
	run := func(job *Job) bool { tier := tierOf(e.p, job); return !tier.Preemptible && !tier.WaitsBeyondReserve() }
	for _, w := range plan.Waiting {
		if w.Reason.Rule == RuleReserve {
			for _, d := range s.Waiting {
				if d.Job.Ref == w.Job && run(&d.Job) {
					t.Errorf("%s: %s of a tier that runs beyond reserves waits for its reserve: %s", name, w.Job, w.Reason)
				}
			}
		}
	}
	byID := allocsByID(s)
	for _, a := range victimActions(plan) {
		if a.Reason.Rule == RuleReclaim || a.Reason.Rule == RuleLimit {
			continue
		}
		for _, id := range a.Allocs {
			if v := byID[id]; run(&v.Job) {
				t.Errorf("%s: %s takes %s of non-preemptible tier %s by rule %s", name, a.Kind, id, v.Job.Tier, a.Reason.Rule)
			}
		}
	}
}

// checkProtectedVictims: a job preempted max_per_job times over its life
// is a victim only of its tenant's limit (the lifetime bound holds), and
// takes no one's GPUs to resume: it resumes on free GPUs alone.
func checkProtectedVictims(t *testing.T, name string, e *Engine, s *Snapshot, plan *Plan) {
	most := e.p.Preemption.MaxPerJob
	if most <= 0 {
		return
	}
	byID := allocsByID(s)
	protected := map[JobRef]bool{}
	for i := range s.Waiting {
		if lifetimePreemptions(&s.Waiting[i].Job) >= most {
			protected[s.Waiting[i].Job.Ref] = true
		}
	}
	for _, a := range victimActions(plan) {
		if a.For != nil && protected[*a.For] {
			t.Errorf("%s: %s takes %v for %s, a protected job (max_per_job %d)", name, a.Kind, a.Allocs, a.For, most)
		}
		if a.Reason.Rule == RuleLimit {
			continue
		}
		for _, id := range a.Allocs {
			if v := byID[id]; lifetimePreemptions(&v.Job) >= most {
				t.Errorf("%s: %s takes %s, preempted %d times (max_per_job %d), by rule %s", name, a.Kind, id,
					lifetimePreemptions(&v.Job), most, a.Reason.Rule)
			}
		}
	}
}

func checkVictimsExistOnce(t *testing.T, name string, s *Snapshot, plan *Plan) {
	byID := allocsByID(s)
	seen := map[string]bool{}
	for _, a := range victimActions(plan) {
		for _, id := range a.Allocs {
			al, ok := byID[id]
			switch {
			case !ok:
				t.Errorf("%s: %s names unknown allocation %s", name, a.Kind, id)
			case al.Draining:
				t.Errorf("%s: %s names %s, already being preempted", name, a.Kind, id)
			case seen[id]:
				t.Errorf("%s: allocation %s is a victim twice", name, id)
			}
			seen[id] = true
		}
	}
}

// checkLimits: once the plan's victims are gone and the work it admits
// runs, no tenant holds more than its limit, unless its non-preemptible
// work alone does (nothing may be preempted to fix that).
func checkLimits(t *testing.T, name string, e *Engine, s *Snapshot, plan *Plan) {
	fixed := map[string]int{}
	for _, a := range s.Allocs {
		if !a.Draining && !tierOf(e.p, &a.Job).Preemptible {
			fixed[a.Job.Ref.Namespace] += allocUnits(s, &a)
		}
	}
	for _, tu := range plan.Tenants {
		if tu.Limit >= 0 && tu.InUse > tu.Limit && fixed[tu.Tenant] <= tu.Limit*gpuUnit {
			t.Errorf("%s: tenant %s ends with %d GPUs, limit %d", name, tu.Tenant, tu.InUse, tu.Limit)
		}
	}
}

// genDepartment puts half the policies' tenants, some of them, in a
// department with a reserve of at least theirs and, mostly, a limit. It
// draws from a generator of its own, so that the other inputs of a seed
// stay what they were.
func genDepartment(seed int, p *policy.Policy) {
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	if r.IntN(2) == 0 {
		return
	}
	d := &policy.Department{Name: "dept", Weight: float64(1 + r.IntN(3)), Limit: []int{policy.Unlimited, 2, 4, 8}[r.IntN(4)]}
	for _, name := range p.TenantNames() {
		if r.IntN(2) == 0 {
			d.Tenants = append(d.Tenants, name)
			d.Reserve += p.Tenants[name].Reserve
		}
	}
	if len(d.Tenants) == 0 {
		return
	}
	d.Reserve += r.IntN(4)
	if d.Limit != policy.Unlimited && d.Limit < d.Reserve {
		d.Limit = d.Reserve
	}
	p.Departments = map[string]*policy.Department{d.Name: d}
}

// checkDepartmentLimits: after the plan, no department's tenants hold more
// than its limit together, unless their non-preemptible work alone does.
func checkDepartmentLimits(t *testing.T, name string, e *Engine, s *Snapshot, plan *Plan) {
	for _, du := range plan.Departments {
		fixed := 0
		for _, a := range s.Allocs {
			if !a.Draining && !tierOf(e.p, &a.Job).Preemptible && slices.Contains(du.Tenants, a.Job.Ref.Namespace) {
				fixed += allocUnits(s, &a)
			}
		}
		if du.Limit >= 0 && du.InUse > du.Limit && fixed <= du.Limit*gpuUnit {
			t.Errorf("%s: department %s (%v) ends with %d GPUs, limit %d", name, du.Department, du.Tenants, du.InUse, du.Limit)
		}
	}
}

// checkPoolLimits: once the plan's victims are gone, no tenant holds more
// than its limit in a pool while it still runs work there that could have
// been given back (preemptible, below the eviction cap).
func checkPoolLimits(t *testing.T, name string, e *Engine, s *Snapshot, plan *Plan) {
	gone := map[string]bool{}
	for _, a := range victimActions(plan) {
		for _, id := range a.Allocs {
			gone[id] = true
		}
	}
	nodes := map[string]Node{}
	for _, n := range s.Nodes {
		nodes[n.ID] = n
	}
	for _, ten := range e.p.Tenants {
		for pool, q := range ten.Quotas {
			p := e.p.Pools[pool]
			use, movable := 0, false
			for _, a := range s.Allocs {
				n := nodes[a.NodeID]
				if a.Draining || gone[a.ID] || a.Job.Ref.Namespace != ten.Namespace || !p.Holds(n.NodePool, n.Model) {
					continue
				}
				use += allocUnits(s, &a)
				movable = movable || tierOf(e.p, &a.Job).Preemptible && len(a.Job.Preemptions) < e.p.Preemption.MaxPerJobPerHour
			}
			if q.Limit != policy.Unlimited && use > q.Limit*gpuUnit && movable {
				t.Errorf("%s: tenant %s ends with %s GPUs in pool %s, limit %d", name, ten.Name, unitsString(use), pool, q.Limit)
			}
		}
	}
}

// checkBeneficiariesFit: no pointless evictions. With every victim of the
// plan gone, each beneficiary has a node in its pool with room for one of
// its allocations.
func checkBeneficiariesFit(t *testing.T, name string, s *Snapshot, plan *Plan) {
	byID := allocsByID(s)
	free := map[string]int{}
	nodes := map[string]Node{}
	for _, n := range s.Nodes {
		free[n.ID] = n.GPUs
		nodes[n.ID] = n
	}
	usable := func(d *Demand, id string) bool {
		n := nodes[id]
		return (d.NodePool == "" || d.NodePool == n.NodePool) && (d.Devices == nil || slices.Contains(d.Devices, n.Device))
	}
	for _, a := range s.Allocs {
		if !a.Draining {
			free[a.NodeID] -= len(a.GPUIDs)
		}
	}
	for _, a := range victimActions(plan) {
		for _, id := range a.Allocs {
			free[byID[id].NodeID] += len(byID[id].GPUIDs)
		}
	}
	for _, a := range victimActions(plan) {
		if a.For == nil {
			continue
		}
		var d *Demand
		for i := range s.Waiting {
			if s.Waiting[i].Job.Ref == *a.For && s.Waiting[i].Group == a.ForGroup {
				d = &s.Waiting[i]
			}
		}
		if d == nil {
			t.Errorf("%s: %s is for %s, which does not wait", name, a, a.For)
			continue
		}
		fits := false
		for id, f := range free {
			if f >= d.GPUsPerAlloc && usable(d, id) {
				fits = true
			}
		}
		// A victim frees GPUs its beneficiary can use, unless it is the
		// beneficiary's tenant's own work making room under its limit
		// (swapElsewhere), which may run anywhere.
		if a.Job.Namespace != a.For.Namespace {
			for _, id := range a.Allocs {
				if node := byID[id].NodeID; !usable(d, node) {
					t.Errorf("%s: %s frees GPUs on node %s (%s, %q), which %s cannot use", name, a, node,
						nodes[node].NodePool, nodes[node].Device, d)
				}
			}
		}
		if !fits {
			t.Errorf("%s: %s frees GPUs for %s, which still fits on no node", name, a, d)
		}
	}
}

// TestBadInput: inconsistent snapshots are skipped item by item, with a
// reason, and never panic.
func TestBadInput(t *testing.T) {
	now := t0
	job := Job{Ref: JobRef{"ml", "j"}, Tier: "training", Priority: 40}
	cases := []struct {
		name string
		snap Snapshot
		want string // in the Skipped reason
	}{
		{"allocation on an unknown node", Snapshot{
			Nodes:  []Node{{ID: "n1", GPUs: 2}},
			Allocs: []Alloc{{ID: "a1", Job: job, NodeID: "ghost", GPUIDs: []string{"g0"}}},
		}, `on unknown node "ghost"`},
		{"negative GPUs on a node", Snapshot{
			Nodes: []Node{{ID: "n1", GPUs: -4}},
		}, "negative GPU count -4"},
		{"duplicate node", Snapshot{
			Nodes: []Node{{ID: "n1", GPUs: 2}, {ID: "n1", GPUs: 8}},
		}, "duplicate node ID"},
		{"the same GPU held twice", Snapshot{
			Nodes: []Node{{ID: "n1", GPUs: 2}},
			Allocs: []Alloc{
				{ID: "a1", Job: job, NodeID: "n1", GPUIDs: []string{"g0"}},
				{ID: "a2", Job: job, NodeID: "n1", GPUIDs: []string{"g0"}},
			},
		}, `GPU "g0" is empty or already held`},
		{"a GPU listed twice in one allocation", Snapshot{
			Nodes:  []Node{{ID: "n1", GPUs: 2}},
			Allocs: []Alloc{{ID: "a1", Job: job, NodeID: "n1", GPUIDs: []string{"g0", "g0"}}},
		}, `GPU "g0" is empty or already held`},
		{"more GPUs than the node has", Snapshot{
			Nodes:  []Node{{ID: "n1", GPUs: 1}},
			Allocs: []Alloc{{ID: "a1", Job: job, NodeID: "n1", GPUIDs: []string{"g0", "g1"}}},
		}, "holds 2 GPUs but node n1 has 1 unclaimed"},
		{"the GPUs of a skipped allocation stay unclaimed", Snapshot{
			Nodes: []Node{{ID: "n1", GPUs: 1}},
			Allocs: []Alloc{
				{ID: "a1", Job: job, NodeID: "n1", GPUIDs: []string{"g0", "g1"}},
				{ID: "a2", Job: job, NodeID: "n1", GPUIDs: []string{"g0"}},
			},
		}, "holds 2 GPUs but node n1 has 1 unclaimed"},
		{"a demand for negative GPUs", Snapshot{
			Nodes:   []Node{{ID: "n1", GPUs: 1}},
			Waiting: []Demand{{Job: job, Group: "g", GPUsPerAlloc: -1, Count: 1}},
		}, "needs a positive GPU count"},
	}
	e := New(testPolicy(nil))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := e.Plan(&c.snap, now)
			if len(plan.Skipped) != 1 {
				t.Fatalf("want one skipped item, got %+v", plan.Skipped)
			}
			mustContain(t, plan.Skipped[0].Reason, c.want)
		})
	}
}

// TestGarbageNeverPanics throws random inconsistent snapshots at the engine.
func TestGarbageNeverPanics(t *testing.T) {
	e := New(genPolicy(3, 2, 8))
	for seed := 0; seed < 500; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		s := genCluster(r, 1+r.IntN(4), 4, 0, r.IntN(6), 3, t0)
		for i := range s.Allocs {
			switch r.IntN(6) {
			case 0:
				s.Allocs[i].NodeID = "nowhere"
			case 1:
				s.Allocs[i].GPUIDs = append(s.Allocs[i].GPUIDs, s.Allocs[i].GPUIDs...)
			case 2:
				s.Allocs[i].StartedAt = time.Time{}
			case 3:
				s.Allocs[i].Job.Tier = "no-such-tier"
			}
		}
		for i := range s.Waiting {
			if r.IntN(3) == 0 {
				s.Waiting[i].GPUsPerAlloc = r.IntN(20) - 5
			}
			if r.IntN(4) == 0 {
				s.Waiting[i].NodePool = "no-such-pool"
			}
		}
		if r.IntN(3) == 0 {
			s.Nodes = append(s.Nodes, Node{ID: s.Nodes[0].ID, GPUs: -1})
		}
		e.Plan(s, t0)
	}
}
