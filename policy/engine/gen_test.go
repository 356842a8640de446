package engine

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// genPolicy is a policy for generated clusters: four tiers, eight tenants
// with reservations and limits, a serving pool and an idle rule.
func genPolicy(tenants, reserve, limit int) *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		for i := 0; i < tenants; i++ {
			name := fmt.Sprintf("team%d", i)
			p.Tenants[name] = &policy.Tenant{Name: name, Namespace: name, Reserve: reserve, Limit: limit, Weight: float64(1 + i%3)}
		}
		p.Pools["serving"] = &policy.Pool{Name: "serving", NodePool: "serving", Owners: []string{"inference"}}
		// The H100s (a quarter of the nodes): the first three teams have
		// a reserve and a limit there.
		p.Pools["h100"] = &policy.Pool{Name: "h100", Models: []string{"H100"}}
		for i := 0; i < min(3, tenants); i++ {
			p.Tenants[fmt.Sprintf("team%d", i)].Quotas = map[string]*policy.Quota{
				"h100": {Reserve: reserve / 4, Limit: max(reserve/4, limit/3)}}
		}
		p.Idle = []*policy.IdleRule{{Name: "notebooks", Tiers: []string{"interactive"}, Threshold: 10,
			After: 15 * time.Minute, Mode: policy.IdleModePressure, Action: policy.IdleActionRequeue}}
	})
}

// The device classes generated demands ask for, shared as the controller
// shares them among demands that ask alike.
var (
	genH100 = []string{"nvidia/gpu/H100"}
	genA100 = []string{"nvidia/gpu/A100"}
)

var genTiers = []string{"inference", "build", "interactive", "training", "training", "training"}

// genCluster builds a full cluster: nodes of gpusPerNode GPUs (one in ten
// in the serving pool; one in four H100s, the rest A100s) filled with allocations of 1, 2, 4 or 8 GPUs, padded
// with GPU-less allocations up to allocs, and demands waiting for GPUs
// (one in four asks for H100s, one in eight for A100s).
func genCluster(r *rand.Rand, nodes, gpusPerNode, allocs, demands, tenants int, now time.Time) *Snapshot {
	s := &Snapshot{Nodes: make([]Node, nodes)}
	sizes := []int{1, 1, 1, 1, 2, 2, 4, 8}
	jobN := 0
	for n := range s.Nodes {
		pool := "default"
		if n%10 == 9 {
			pool = "serving"
		}
		model := "A100"
		if n%4 == 1 {
			model = "H100"
		}
		s.Nodes[n] = Node{ID: fmt.Sprintf("node-%05d", n), NodePool: pool, GPUs: gpusPerNode, Device: "nvidia/gpu/" + model, Model: model}
		free := gpusPerNode - r.IntN(2)
		gpu := 0
		for free > 0 {
			g := min(sizes[r.IntN(len(sizes))], free)
			ids := make([]string, g)
			for i := range ids {
				ids[i] = fmt.Sprintf("%s-gpu%d", s.Nodes[n].ID, gpu)
				gpu++
			}
			free -= g
			s.Allocs = append(s.Allocs, genAlloc(r, &jobN, s.Nodes[n].ID, ids, tenants, now))
		}
	}
	for len(s.Allocs) < allocs {
		s.Allocs = append(s.Allocs, genAlloc(r, &jobN, s.Nodes[r.IntN(nodes)].ID, nil, tenants, now))
	}
	for i := 0; i < demands; i++ {
		tier := genTiers[r.IntN(len(genTiers))]
		d := Demand{
			Job:          Job{Ref: JobRef{fmt.Sprintf("team%d", r.IntN(tenants)), fmt.Sprintf("wait-%d", i)}, Tier: tier},
			Group:        "main",
			GPUsPerAlloc: sizes[r.IntN(len(sizes))],
			Count:        1 + r.IntN(2),
			Since:        now.Add(-time.Duration(r.IntN(7200)) * time.Second),
			Held:         r.IntN(3) == 0,
		}
		d.Job.Priority = genPriority(tier)
		d.Job.Gang = d.Count > 1 && r.IntN(2) == 0
		if tier == "inference" {
			d.NodePool = "serving"
		}
		switch r.IntN(8) {
		case 0, 1:
			d.Devices, d.Asks = genH100, "nvidia/gpu/H100"
		case 2:
			d.Devices, d.Asks = genA100, "nvidia/gpu/A100"
		}
		s.Waiting = append(s.Waiting, d)
	}
	return s
}

func genPriority(tier string) int {
	return map[string]int{"inference": 90, "build": 80, "interactive": 60, "training": 40}[tier]
}

func genAlloc(r *rand.Rand, jobN *int, node string, gpus []string, tenants int, now time.Time) Alloc {
	*jobN++
	tier := genTiers[r.IntN(len(genTiers))]
	started := now.Add(-time.Duration(r.IntN(14400)) * time.Second)
	a := Alloc{
		ID:        fmt.Sprintf("alloc-%06d", *jobN),
		Job:       Job{Ref: JobRef{fmt.Sprintf("team%d", r.IntN(tenants)), fmt.Sprintf("job-%d", *jobN)}, Tier: tier, Priority: genPriority(tier)},
		Group:     "main",
		NodeID:    node,
		GPUIDs:    gpus,
		StartedAt: started,
	}
	if r.IntN(50) == 0 {
		a.Job.Preemptions = []time.Time{now.Add(-30 * time.Minute), now.Add(-10 * time.Minute)}
	}
	if tier == "interactive" && r.IntN(4) == 0 {
		for m := 20; m > 0; m-- {
			a.Usage = append(a.Usage, Sample{At: now.Add(-time.Duration(m) * time.Minute), Util: float64(r.IntN(8))})
		}
	}
	return a
}
