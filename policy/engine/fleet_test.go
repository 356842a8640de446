package engine_test

import (
	"github.com/gpu-steward/steward/policy/engine"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Mixed fleets: nodes of different GPU models, and work that asks for one.
func TestFleetStories(t *testing.T) {
	stories := []struct {
		name string
		play func(t *testing.T)
	}{
		{"Fleets: an H100 waiter never preempts A100 work", h100WaiterSparesA100},
		{"Fleets: an H100 waiter preempts H100 work and the reason names the model", h100WaiterTakesH100},
		{"Fleets: an A100 8-GPU gang is never broken for a 1-GPU H100 waiter", a100GangNotBrokenForH100},
		{"Fleets: work that asks for any GPU may take either model", anyModelTakesEither},
		{"Fleets: a model no node has waits with a reason and preempts nothing", missingModelWaits},
		{"Pool quotas: per-pool reserve reclaim while the tenant is under its cluster-wide reserve elsewhere", poolReserveReclaim},
		{"Pool quotas: a pool reserve reclaims only in the pool, never the borrower's work elsewhere", poolReserveStaysInPool},
		{"Pool quotas: a pool limit sends work to other nodes, then holds it with the pool named", poolLimit},
		{"ClearML: a pool takes its larger pending job first (order largest-first), or the smaller, or the oldest", poolOrder},
		{"ClearML: only run in the cloud pool if the local H100 pool cannot take it; back when room frees (pool precedence)", poolPrecedence},
		{"MIG: instances count toward limits and reserves as the fraction of a GPU they are", migFractions},
		{"Pinned: a waiter pinned to one busy node preempts there, never on another node", pinnedWaiterPreemptsOnlyOnItsNode},
		{"Pinned: a waiter pinned to a node of another model preempts nothing", pinnedWaiterWrongModel},
		{"Pools: a pool without owners sharing a node pool leaves its owners' backfill rule alone", sharedNodePool},
	}
	for _, s := range stories {
		t.Run(s.name, s.play)
	}
}

func fleetPolicy() *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		p.Tenants["research"] = tenant("research", 2, policy.Unlimited)
		p.Tenants["product"] = tenant("product", 2, policy.Unlimited)
	})
}

// An A100 node full of research's training (lower tier, above its
// reserve) and an H100 node full of non-preemptible inference: product's
// interactive asks for an H100. Preempting the training would free A100s
// it cannot use, so nothing is preempted and it waits, saying why.
func h100WaiterSparesA100(t *testing.T) {
	h := newHarness(t, fleetPolicy())
	h.modelNode("a100-1", "default", "A100", 8)
	h.modelNode("h100-1", "default", "H100", 2)
	h.submit("research", "train", "training", 8, 1, asks("A100"))
	h.submit("product", "serve", "inference", 2, 1, asks("H100"))
	h.advance(time.Hour)
	h.submit("product", "notebook", "interactive", 1, 1, asks("H100"))
	plan := h.step()
	for _, a := range plan.Actions {
		if a.Kind == engine.Preempt || a.Kind == engine.IdleStop {
			t.Fatalf("preempted for an H100 waiter: %s (%s)", a, a.Reason)
		}
	}
	h.expect("running", h.running(), []string{"product/serve×1", "research/train×1"})
	if len(plan.Waiting) != 1 || plan.Waiting[0].Reason.Rule != engine.RuleCapacity {
		t.Fatalf("waiting: %+v, want product/notebook for capacity", plan.Waiting)
	}
	mustContain(t, plan.Waiting[0].Reason.Message, "needs 1 GPU on one node with nvidia/gpu/H100; none free")
}

// The same cluster with the H100s held by training: the notebook takes an
// H100 from it, and the reason says which GPUs and where.
func h100WaiterTakesH100(t *testing.T) {
	h := newHarness(t, fleetPolicy())
	h.modelNode("a100-1", "default", "A100", 8)
	h.modelNode("h100-1", "default", "H100", 2)
	h.submit("research", "train", "training", 8, 1, asks("A100"))
	h.submit("research", "h-train", "training", 2, 1, asks("H100"))
	h.advance(time.Hour)
	h.submit("product", "notebook", "interactive", 1, 1, asks("H100"))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt research/h-train", "hold product/notebook"})
	a := plan.Actions[0]
	mustContain(t, a.Reason.Message, "tenant research holds 10 GPUs, reserve 2: reclaiming 2 H100 GPUs on node h100-1 for product/notebook/main")
	h.playDrains()
	h.expect("running", h.running(), []string{"product/notebook×1", "research/train×1"})
}

// An 8-GPU A100 gang (two allocations of 4) and a single H100 held by
// training: a 1-GPU H100 interactive waiter takes the H100, never the
// gang, even though the gang is the newer work and the cheaper victim by
// the usual order.
func a100GangNotBrokenForH100(t *testing.T) {
	h := newHarness(t, fleetPolicy())
	h.modelNode("h100-1", "default", "H100", 1)
	h.modelNode("a100-1", "default", "A100", 4)
	h.modelNode("a100-2", "default", "A100", 4)
	h.submit("research", "h-train", "training", 1, 1, asks("H100"))
	h.advance(time.Hour)
	h.submit("research", "gang", "training", 4, 2, gang(), asks("A100"))
	h.advance(30 * time.Minute)
	h.submit("product", "notebook", "interactive", 1, 1, asks("H100"))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt research/h-train", "hold product/notebook"})
	mustContain(t, plan.Actions[0].Reason.Message, "1 H100 GPU on node h100-1")
	h.playDrains()
	h.expect("running", h.running(), []string{"product/notebook×1", "research/gang×2"})

	// With the H100 held by inference, the waiter waits: the gang runs on.
	h = newHarness(t, fleetPolicy())
	h.modelNode("h100-1", "default", "H100", 1)
	h.modelNode("a100-1", "default", "A100", 4)
	h.modelNode("a100-2", "default", "A100", 4)
	h.submit("product", "serve", "inference", 1, 1, asks("H100"))
	h.submit("research", "gang", "training", 4, 2, gang(), asks("A100"))
	h.advance(time.Hour)
	h.submit("product", "notebook", "interactive", 1, 1, asks("H100"))
	plan = h.step()
	h.expect("actions", kinds(plan), []string{"hold product/notebook"})
	mustContain(t, plan.Actions[0].Reason.Message, "needs 1 GPU on one node with nvidia/gpu/H100; none free")
	h.expect("running", h.running(), []string{"product/serve×1", "research/gang×2"})
}

// A waiter with no device constraint may use either model: it takes the
// cheapest victim wherever it runs, and the reason names that model.
func anyModelTakesEither(t *testing.T) {
	h := newHarness(t, fleetPolicy())
	h.modelNode("h100-1", "default", "H100", 2)
	h.modelNode("a100-1", "default", "A100", 4)
	h.submit("product", "serve", "inference", 2, 1, asks("H100"))
	h.submit("research", "old", "training", 2, 1, asks("A100"))
	h.advance(time.Hour)
	h.submit("research", "train", "training", 2, 1, asks("A100"))
	h.advance(time.Hour)
	h.submit("product", "notebook", "interactive", 2, 1)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt research/train", "hold product/notebook"})
	mustContain(t, plan.Actions[0].Reason.Message, "tier training (priority 40) yields 2 A100 GPUs on node a100-1 to product/notebook/main")
}

// Work asking for a model no node has is held (as any work that finds no
// GPUs) with a reason that says so, and frees nothing.
func missingModelWaits(t *testing.T) {
	h := newHarness(t, fleetPolicy())
	h.modelNode("a100-1", "default", "A100", 2)
	h.modelNode("h100-1", "gpu", "H100", 2)
	h.submit("research", "train", "training", 2, 1, asks("A100"))
	h.advance(time.Hour)
	h.submit("product", "b200", "interactive", 1, 1, asks("B200"))
	h.submit("product", "wrong-pool", "interactive", 1, 1, asks("A100"), inPool("gpu"))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"hold product/b200", "hold product/wrong-pool"})
	got := map[string]string{}
	for _, a := range plan.Actions {
		got[a.Job.ID] = a.Reason.Message
	}
	mustContain(t, got["b200"], "no client node has nvidia/gpu/B200: nothing is preempted for it")
	mustContain(t, got["wrong-pool"], `no client node in node pool "gpu" has nvidia/gpu/A100`)
}

// quotaPolicy: an h100 pool of H100 nodes; research reserves 2 of them
// (and 4 GPUs cluster-wide), product borrows.
func quotaPolicy(mod func(p *policy.Policy)) *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		p.Pools["h100"] = &policy.Pool{Name: "h100", Models: []string{"H100"}}
		r := tenant("research", 4, policy.Unlimited)
		r.Quotas = map[string]*policy.Quota{"h100": {Reserve: 2, Limit: policy.Unlimited}}
		p.Tenants["research"] = r
		p.Tenants["product"] = tenant("product", 4, policy.Unlimited)
		if mod != nil {
			mod(p)
		}
	})
}

// Research holds 4 A100s, its whole cluster-wide reserve, and product holds
// both H100s (within product's own reserve of 4). Research's H100 job
// reclaims one H100 by its pool reserve: tenant-wide it is entitled to
// nothing more, and product is within its reserve.
func poolReserveReclaim(t *testing.T) {
	h := newHarness(t, quotaPolicy(nil))
	h.modelNode("h100-1", "default", "H100", 2)
	h.modelNode("a100-1", "default", "A100", 4)
	h.submit("research", "a-train", "training", 4, 1, asks("A100"))
	h.submit("product", "h-train", "training", 1, 2, asks("H100"))
	h.advance(time.Hour)
	h.submit("research", "h-nb", "training", 1, 1, asks("H100"))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt product/h-train", "hold research/h-nb"})
	mustContain(t, plan.Actions[0].Reason.Message, "tenant product holds 2 GPUs in pool h100, reserve 0 there: "+
		"reclaiming 1 H100 GPU on node h100-1 for research/h-nb/main (tenant research holds 0 in pool h100, reserve 2 there)")
	h.playDrains()
	h.expect("running", h.running(), []string{"product/h-train×1", "research/a-train×1", "research/h-nb×1"})

	// Under its tenant-wide reserve too (reserve 6, holding 5), research
	// still reclaims within the pool first: the reason names the pool.
	h2 := newHarness(t, quotaPolicy(func(p *policy.Policy) { p.Tenants["research"].Reserve = 6 }))
	h2.modelNode("h100-1", "default", "H100", 2)
	h2.modelNode("a100-1", "default", "A100", 4)
	h2.submit("research", "a-train", "training", 4, 1, asks("A100"))
	h2.submit("product", "h-train", "training", 1, 2, asks("H100"))
	h2.advance(time.Hour)
	h2.submit("research", "h-nb", "training", 1, 1, asks("H100"))
	plan2 := h2.step()
	h2.expect("actions", kinds(plan2), []string{"preempt product/h-train", "hold research/h-nb"})
	mustContain(t, plan2.Actions[0].Reason.Message, "in pool h100, reserve 0 there: reclaiming 1 H100 GPU on node h100-1")

	// Its second H100 job reclaims the second H100; product's held
	// job, though product is under its own reserve of 4, takes nothing
	// back: research holds the H100s within its pool reserve.
	h.submit("research", "h-nb2", "training", 1, 1, asks("H100"))
	plan = h.step()
	h.expect("actions", kinds(plan), []string{"preempt product/h-train", "hold research/h-nb2"})
	h.expect("once the victim stopped", kinds(h.playDrains()), []string{"resume research/h-nb2"})
	plan = h.step()
	h.expect("actions", kinds(plan), nil)
	h.expect("running", h.running(), []string{"research/a-train×1", "research/h-nb2×1", "research/h-nb×1"})

	// At its pool reserve (2 H100s), it reclaims no more there.
	h.submit("research", "h-nb3", "training", 1, 1, asks("H100"))
	plan = h.step()
	for _, a := range plan.Actions {
		if a.Kind == engine.Preempt {
			t.Fatalf("preempted beyond research's pool reserve: %s (%s)", a, a.Reason)
		}
	}
}

// A job that can run anywhere reclaims its pool reserve only on the pool's
// nodes: product's A100 work is not touched, though it is the newer.
func poolReserveStaysInPool(t *testing.T) {
	h := newHarness(t, quotaPolicy(func(p *policy.Policy) {
		p.Tenants["research"].Reserve = 0
		p.Tenants["product"].Reserve = 0
	}))
	h.modelNode("h100-1", "default", "H100", 1)
	h.modelNode("a100-1", "default", "A100", 1)
	h.submit("product", "h-train", "training", 1, 1, asks("H100"))
	h.advance(time.Hour)
	h.submit("product", "a-train", "training", 1, 1, asks("A100"))
	h.advance(time.Hour)
	h.submit("research", "any", "training", 1, 1)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt product/h-train", "hold research/any"})
	mustContain(t, plan.Actions[0].Reason.Message, "in pool h100")
	h.playDrains()
	h.expect("running", h.running(), []string{"product/a-train×1", "research/any×1"})
}

// Research may hold at most 1 H100. Nomad, which knows no pool limits,
// places its second H100 job: the engine gives the newer back, and holds it
// for the pool limit while research is at it. Work that can run anywhere
// is not held: it may go to the A100s.
func poolLimit(t *testing.T) {
	h := newHarness(t, quotaPolicy(func(p *policy.Policy) {
		p.Tenants["research"].Quotas["h100"] = &policy.Quota{Reserve: 0, Limit: 1}
	}))
	h.modelNode("h100-1", "default", "H100", 4)
	h.modelNode("a100-1", "default", "A100", 4)
	h.submit("research", "h1", "training", 1, 1, asks("H100"))
	h.advance(time.Minute)
	h.submit("research", "h2", "training", 1, 1, asks("H100"))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt research/h2"})
	mustContain(t, plan.Actions[0].Reason.Message, "tenant research holds 2 GPUs in pool h100, limit 1: giving back 1")
	h.playDrains()
	h.expect("held", h.heldJobs(), []string{"research/h2×1"})

	plan = h.step()
	h.expect("actions", kinds(plan), nil)
	if len(plan.Waiting) != 1 || plan.Waiting[0].Reason.Rule != engine.RuleLimit {
		t.Fatalf("waiting %+v, want h2 for the limit", plan.Waiting)
	}
	mustContain(t, plan.Waiting[0].Reason.Message, "tenant research holds 1 GPUs in pool h100, limit 1 there: 1 more would exceed it")

	// Work that can run anywhere is not held for the limit: the A100s
	// are free. (Nomad, which knows no pool limits, may still place it on
	// an H100; the limit then gives it back, as above.)
	s := h.snapshot()
	s.Waiting = append(s.Waiting, engine.Demand{Job: engine.Job{Ref: engine.JobRef{"research", "any"}, Tier: "training", Priority: 40},
		Group: "main", GPUsPerAlloc: 1, Count: 1, Since: h.now, Held: true})
	plan = h.e.Plan(s, h.now)
	h.expect("actions", kinds(plan), []string{"resume research/any"})
}

// ClearML's priority between profiles within a pool: "if a 4-GPU and an
// 8-GPU job are pending, take the larger first, or vice versa". Eight
// H100s come free; a 4-GPU job has waited longer than an 8-GPU one, both
// held, of one tenant and tier. The pool's order decides which resumes;
// work that may run outside the pool keeps the default order.
func poolOrder(t *testing.T) {
	for _, tc := range []struct {
		order policy.PoolOrder
		want  string
	}{
		{policy.PoolOrderLargestFirst, "resume research/eight"},
		{policy.PoolOrderSmallestFirst, "resume research/four"},
		{policy.PoolOrderFIFO, "resume research/four"},
		{policy.PoolOrderDefault, "resume research/four"},
	} {
		t.Run(string(tc.order), func(t *testing.T) {
			h := newHarness(t, quotaPolicy(func(p *policy.Policy) {
				p.Pools["h100"].Order = tc.order
				p.Tenants["research"].Reserve = 8 // both within it: the reservation ranks them equal
			}))
			h.modelNode("h100-1", "default", "H100", 8)
			s := h.snapshot()
			for _, w := range []struct {
				id   string
				gpus int
				ago  time.Duration
			}{{"four", 4, 10 * time.Minute}, {"eight", 8, 5 * time.Minute}} {
				s.Waiting = append(s.Waiting, engine.Demand{Job: engine.Job{Ref: engine.JobRef{"research", w.id}, Tier: "training", Priority: 40},
					Group: "main", GPUsPerAlloc: w.gpus, Count: 1, Since: h.now.Add(-w.ago), Held: true,
					Devices: []string{"H100"}, Asks: "nvidia/gpu/H100"})
			}
			plan := h.e.Plan(s, h.now)
			h.expect("actions", kinds(plan), []string{tc.want})
		})
	}
}

// ClearML's precedence of pools: "only run on the cloud autoscaler if the
// local H100 pool cannot satisfy the profile". Training lists the onprem
// pool, then the cloud. With onprem full, a held training job moves to the
// cloud; a later one, with room back in onprem, goes back there.
func poolPrecedence(t *testing.T) {
	h := newHarness(t, testPolicy(func(p *policy.Policy) {
		p.Pools["onprem"] = &policy.Pool{Name: "onprem", NodePool: "onprem"}
		p.Pools["cloud"] = &policy.Pool{Name: "cloud", NodePool: "cloud"}
		p.Tiers["training"].Pools = []string{"onprem", "cloud"}
		p.Tenants["research"] = tenant("research", 0, policy.Unlimited)
	}))
	h.modelNode("onprem-1", "onprem", "H100", 4)
	h.modelNode("cloud-1", "cloud", "H100", 8)
	h.submit("research", "big", "training", 4, 1, inPool("onprem"))
	h.advance(time.Minute)
	h.submit("research", "next", "training", 2, 1, inPool("onprem"))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"move research/next"})
	a := plan.Actions[0]
	if a.NodePool != "cloud" || a.Reason.Rule != engine.RulePrecedence {
		t.Fatalf("%s (%s): want a move to cloud for precedence", a, a.Reason)
	}
	mustContain(t, a.Reason.Message, "no room in node pool onprem for 2 GPUs on one node; node pool cloud, next in its pool precedence (onprem, cloud), has room: moving there")
	h.expect("running", h.running(), []string{"research/big×1", "research/next×1"})

	// Held work in the cloud pool goes back to onprem once room frees.
	h.finish("research", "big")
	s := h.snapshot()
	s.Waiting = append(s.Waiting, engine.Demand{Job: engine.Job{Ref: engine.JobRef{"research", "later"}, Tier: "training", Priority: 40},
		Group: "main", GPUsPerAlloc: 2, Count: 1, Since: h.now, NodePool: "cloud", Held: true})
	plan = h.e.Plan(s, h.now)
	h.expect("actions", kinds(plan), []string{"move research/later", "resume research/later"})
	mustContain(t, plan.Actions[0].Reason.Message, "room again in node pool onprem, before cloud in its pool precedence (onprem, cloud): moving back there for 2 GPUs")

	// Work outside its precedence's node pools stays where it is.
	s.Waiting[len(s.Waiting)-1].NodePool = "default"
	plan = h.e.Plan(s, h.now)
	for _, a := range plan.Actions {
		if a.Kind == engine.Move {
			t.Fatalf("moved work outside its precedence: %s", a)
		}
	}
}

// MIG: a node's A100 is split into seven 1g.10gb instances (each 1/7 of a
// GPU), another node has two whole A100s. Research (reserve 1, limit 2)
// holds the seven slices and one whole GPU: 2 GPUs, its limit, not 8. One
// more slice would take it to 2 1/7: it waits, and the reason says so.
// Product (reserve 1) asks for 3 slices: research is over its reserve,
// so product reclaims, on the MIG node, the slices' job, which the reason
// counts as the 1 GPU it is.
func migFractions(t *testing.T) {
	h := newHarness(t, testPolicy(func(p *policy.Policy) {
		p.Tenants["research"] = tenant("research", 1, 2)
		p.Tenants["product"] = tenant("product", 1, policy.Unlimited)
	}))
	const mig = "A100 MIG 1g.10gb"
	h.addNode(engine.Node{ID: "mig-1", NodePool: "default", GPUs: 7, Device: mig, Model: mig, Share: 1.0 / 7})
	h.modelNode("a100-1", "default", "A100", 2)
	h.submit("research", "slices", "training", 7, 1, asks(mig))
	h.advance(time.Minute)
	h.submit("research", "whole", "training", 1, 1, asks("A100"))
	h.advance(time.Hour)
	h.expect("running", h.running(), []string{"research/slices×1", "research/whole×1"})

	h.submit("research", "one-more", "training", 1, 1, asks(mig))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"hold research/one-more"})
	mustContain(t, plan.Actions[0].Reason.Message, "tenant research holds 2 GPUs, limit 2: 1/7 more would exceed it")
	for _, tu := range plan.Tenants {
		if tu.Tenant == "research" && tu.InUse != 2 {
			t.Errorf("research in use %d, want 2", tu.InUse)
		}
	}

	h.submit("product", "nb", "training", 3, 1, asks(mig))
	plan = h.step()
	// The slice research was waiting for fits again: 1 1/7 GPUs with it.
	h.expect("actions", kinds(plan), []string{"preempt research/slices", "hold product/nb", "resume research/one-more"})
	mustContain(t, plan.Actions[0].Reason.Message,
		"tenant research holds 2 GPUs, reserve 1: reclaiming 7 A100 MIG 1g.10gb instances (1 GPU) on node mig-1 for product/nb/main (tenant product holds 0, reserve 1)")
	mustContain(t, plan.Actions[2].Reason.Message, "tenant research stays within its limit of 2 (1 1/7 GPUs with these 1/7)")
}

// A pool with owners (serving, for inference) and one without (zz-serving,
// for a pool precedence) name the same node pool: the second does not hide
// the first's owners, and backfill is still taken back at once.
func sharedNodePool(t *testing.T) {
	h := newHarness(t, qosPolicy())
	h.e = engine.New(func() *policy.Policy {
		p := qosPolicy()
		p.Pools["zz-serving"] = &policy.Pool{Name: "zz-serving", NodePool: "serving"}
		return p
	}())
	h.node("s1", "serving", 8)
	h.submit("ml", "best-effort", "training", 2, 4)
	h.advance(time.Minute)
	h.submit("prod", "serve", "inference", 4, 1, inPool("serving"))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt ml/best-effort"})
	if plan.Actions[0].Reason.Rule != engine.RuleBackfill {
		t.Fatalf("%s: want backfill taken back", plan.Actions[0].Reason)
	}
}

// Two nodes full of research's training, the newer (the cheaper victim by
// the usual order) on n1; product's notebook is pinned to n2 by its
// constraint. Preempting on n1 would free GPUs it cannot use (issue 29):
// the older training on n2 goes.
func pinnedWaiterPreemptsOnlyOnItsNode(t *testing.T) {
	h := newHarness(t, fleetPolicy())
	h.node("n2", "default", 2)
	h.node("n1", "default", 2)
	h.submit("research", "old", "training", 2, 1)
	h.advance(time.Hour)
	h.submit("research", "new", "training", 2, 1)
	h.advance(time.Hour)
	h.expect("placed", h.running(), []string{"research/new×1", "research/old×1"})
	h.submit("product", "notebook", "interactive", 2, 1, pinnedTo("n2"))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt research/old", "hold product/notebook"})
	h.playDrains()
	h.expect("running", h.running(), []string{"product/notebook×1", "research/new×1"})
}

// A notebook asking for an H100 but pinned to the A100 node can never run:
// nothing is preempted anywhere for it.
func pinnedWaiterWrongModel(t *testing.T) {
	h := newHarness(t, fleetPolicy())
	h.modelNode("a100-1", "default", "A100", 2)
	h.modelNode("h100-1", "default", "H100", 2)
	h.submit("research", "a", "training", 2, 1, asks("A100"))
	h.submit("research", "h", "training", 2, 1, asks("H100"))
	h.advance(time.Hour)
	h.submit("product", "notebook", "interactive", 1, 1, asks("H100"), pinnedTo("a100-1"))
	plan := h.step()
	for _, a := range plan.Actions {
		if a.Kind == engine.Preempt || a.Kind == engine.IdleStop {
			t.Fatalf("preempted for a waiter no node can take: %s (%s)", a, a.Reason)
		}
	}
}
