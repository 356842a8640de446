package engine_test

import (
	"github.com/gpu-steward/steward/policy/engine"
	"strconv"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestLifetimeBound: a job preempted preemption.max_per_job times over its
// life is protected until it ends: only its tenant's limit preempts it
// again, and it resumes only where it keeps no one from what they are
// owed (issue 31: every job completes, within the bound).
func TestLifetimeBound(t *testing.T) {
	// times returns n preemption times, hours apart, well before now.
	times := func(n int) []time.Time {
		var out []time.Time
		for i := range n {
			out = append(out, t0.Add(-time.Duration(48-i)*time.Hour))
		}
		return out
	}
	bounded := func(mod func(p *policy.Policy)) *policy.Policy {
		return testPolicy(func(p *policy.Policy) {
			p.Preemption.MaxPerJob = 3
			p.Tenants["product"] = tenant("product", 4, policy.Unlimited)
			p.Tenants["research"] = tenant("research", 0, policy.Unlimited)
			if mod != nil {
				mod(p)
			}
		})
	}
	stories := []struct {
		name string
		play func(t *testing.T)
	}{
		{"the preemption that reaches the bound says so", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			h.submit("research", "train", "training", 4, 1, preempted(times(2)...))
			h.advance(time.Hour)
			h.submit("product", "nb", "interactive", 4, 1)
			plan := h.step()
			a := actionOf(t, plan, engine.Preempt, "research/train")
			mustContain(t, a.Reason.Message,
				"; job research/train was preempted 3 times, the most over its life (preemption.max_per_job): protected until it ends")
		}},
		{"a higher tier takes other work first and never a protected job", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			h.submit("research", "old", "training", 2, 1, preempted(times(3)...))
			h.submit("research", "new", "training", 2, 1, preempted(times(1)...))
			h.advance(time.Hour)
			h.submit("research", "nb", "interactive", 2, 1)
			plan := h.step()
			h.expect("victims", kinds(plan)[:1], []string{"preempt research/new"})
			h.submit("research", "nb2", "interactive", 2, 1)
			plan = h.step()
			if len(engine.VictimActions(plan)) != 0 {
				t.Fatalf("want the protected job kept; got %q", kinds(plan))
			}
			h.playDrains()
			h.expect("running", h.running(), []string{"research/nb×1", "research/old×1"})
			mustWait(t, plan, "research/nb2", engine.RuleCapacity, "nothing may be preempted")
		}},
		{"its own tier promoted does not take a protected job", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			h.submit("research", "old", "training", 4, 1, preempted(times(3)...))
			h.advance(time.Hour)
			j := h.submit("research", "promo", "training", 4, 1)
			j.Job.Priority, j.Job.Promoted = 50, true
			plan := h.step()
			if len(engine.VictimActions(plan)) != 0 {
				t.Fatalf("want the protected job kept; got %q", kinds(plan))
			}
			h.expect("running", h.running(), []string{"research/old×1"})
		}},
		{"a reserve reclaim does not take a protected job", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			h.submit("research", "train", "training", 4, 1, preempted(times(3)...))
			h.advance(time.Hour)
			h.submit("product", "train", "training", 4, 1)
			plan := h.step()
			if len(engine.VictimActions(plan)) != 0 {
				t.Fatalf("want the protected job kept; got %q", kinds(plan))
			}
			mustWait(t, plan, "product/train", engine.RuleCapacity, "")
		}},
		{"a reserve reclaim takes other work first", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 2)
			h.node("n2", "default", 2)
			h.submit("research", "old", "training", 2, 1, preempted(times(3)...))
			h.submit("research", "new", "training", 2, 1)
			h.advance(time.Hour)
			h.submit("product", "train", "training", 2, 1)
			plan := h.step()
			h.expect("victims", kinds(plan)[:1], []string{"preempt research/new"})
		}},
		{"beyond its reserve a protected job waits while another tenant waits for its reserve", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			h.node("n2", "default", 4)
			h.submit("product", "nb", "interactive", 2, 1)
			h.submit("product", "more", "training", 4, 1, inPool("none"))
			heldProtected(h, "research", "train", 4)
			h.advance(time.Hour)
			plan := h.step()
			mustWait(t, plan, "research/train", engine.RuleProtected,
				"job research/train was preempted 3 times, the most over its life (preemption.max_per_job): once it runs only its tenant's limit preempts it,"+
					" so it resumes only within tenant research's reserve of 0 (it holds 0 GPUs, 4 more would exceed it) while another tenant waits for its reserve:"+
					" tenant product holds 2 GPUs of its reserve of 4 and waits for 4 GPUs")
		}},
		{"a protected job waits while work of a higher tier waits for GPUs", func(t *testing.T) {
			h := newHarness(t, bounded(func(p *policy.Policy) {
				p.Tenants["research"] = tenant("research", 8, policy.Unlimited)
			}))
			h.node("n1", "default", 4)
			h.node("n2", "default", 4)
			h.submit("product", "serve", "inference", 2, 1)
			h.submit("product", "nb", "interactive", 2, 1)
			h.submit("product", "wide", "interactive", 8, 1)
			heldProtected(h, "research", "train", 2)
			h.advance(time.Hour)
			plan := h.step()
			mustWait(t, plan, "research/train", engine.RuleProtected,
				"so it resumes only when no work of a higher tier waits for GPUs: product/wide, tier interactive (priority 60), waits for 8 GPUs")
		}},
		{"a protected job resumes on free GPUs alone", func(t *testing.T) {
			h := newHarness(t, bounded(func(p *policy.Policy) {
				p.Tenants["research"] = tenant("research", 8, policy.Unlimited)
			}))
			h.node("n1", "default", 4)
			h.node("n2", "default", 4)
			h.submit("product", "serve", "inference", 2, 1)
			h.submit("product", "train", "training", 2, 1)
			h.submit("product", "train2", "training", 4, 1)
			heldProtected(h, "research", "train", 2)
			h.advance(time.Hour)
			plan := h.step()
			if len(engine.VictimActions(plan)) != 0 {
				t.Fatalf("want nothing taken for the protected job; got %q", kinds(plan))
			}
			mustWait(t, plan, "research/train", engine.RuleProtected,
				"so it resumes only on free GPUs: none are free for 2 GPUs on one node, and it does not take other work's")
		}},
		{"a protected job resumes beside work no higher tier may take", func(t *testing.T) {
			h := newHarness(t, bounded(func(p *policy.Policy) {
				p.Tenants["research"] = tenant("research", 8, policy.Unlimited)
			}))
			h.node("n1", "default", 4)
			h.node("n2", "default", 4)
			h.submit("product", "serve", "inference", 2, 1)
			h.submit("product", "train", "training", 4, 1)
			heldProtected(h, "research", "train", 2)
			h.advance(time.Hour)
			actionOf(t, h.step(), engine.Resume, "research/train")
		}},
		{"beside protected work already running a protected job keeps off a node with nothing that stays while few GPUs stay free", func(t *testing.T) {
			h := newHarness(t, bounded(func(p *policy.Policy) {
				p.Tenants["research"] = tenant("research", 8, policy.Unlimited)
			}))
			for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"} {
				h.node(n, "default", 4)
			}
			h.submit("research", "old", "training", 1, 1, preempted(times(3)...), pinnedTo("n8"))
			for i, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
				h.submit("product", "t"+strconv.Itoa(i), "training", 4, 1, pinnedTo(n))
			}
			h.submit("product", "t7", "training", 2, 1, pinnedTo("n7"))
			heldProtected(h, "research", "train", 2)
			h.advance(time.Hour)
			plan := h.step()
			mustWait(t, plan, "research/train", engine.RuleProtected,
				"so it resumes only beside work no higher tier may take, or while 8 GPUs stay free: n7, where it would go, holds none, and 3 GPUs would stay free")
		}},
		{"a protected job resumes on a small idle cluster: no protected work runs", func(t *testing.T) {
			// One node: its GPUs free are never two nodes' worth. Held
			// back for room, it waited for ever on idle GPUs.
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			heldProtected(h, "research", "train", 4)
			h.advance(time.Hour)
			actionOf(t, h.step(), engine.Resume, "research/train")
		}},
		{"protected work goes onto a node that holds none only while it is on at most a quarter of the nodes", func(t *testing.T) {
			// Nomad's best fit spreads one- and two-GPU protected jobs
			// over most nodes, and whole-node demands of higher tiers,
			// which may not take them, then find no node.
			h := newHarness(t, bounded(nil))
			for _, n := range []string{"n1", "n2", "n3", "n4"} {
				h.node(n, "default", 4)
			}
			h.submit("research", "old", "training", 2, 1, preempted(times(3)...))
			h.submit("product", "serve", "inference", 1, 1)
			heldProtected(h, "research", "train", 4)
			h.advance(time.Hour)
			plan := h.step()
			mustWait(t, plan, "research/train", engine.RuleProtected,
				"so it resumes only onto nodes that hold protected work already, or while protected work is on at most 1/4 of the nodes it may use: it is on 1 of 4, and n2, where it would go, holds none")
		}},
		{"protected work of one GPU a node counts by the nodes it is on not its GPUs", func(t *testing.T) {
			// 2 GPUs of 32 are protected, on 2 nodes of 8: a third node
			// would leave 5 for whole-node work.
			h := newHarness(t, bounded(nil))
			for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"} {
				h.node(n, "default", 4)
			}
			h.submit("research", "old1", "training", 1, 1, preempted(times(3)...), pinnedTo("n1"))
			h.submit("research", "old2", "training", 1, 1, preempted(times(3)...), pinnedTo("n2"))
			for i, n := range []string{"n1", "n2", "n3"} {
				h.submit("product", "t"+strconv.Itoa(i), "training", 3, 1, pinnedTo(n))
			}
			heldProtected(h, "research", "train", 1)
			h.advance(time.Hour)
			plan := h.step()
			mustWait(t, plan, "research/train", engine.RuleProtected,
				"so it resumes only onto nodes that hold protected work already, or while protected work is on at most 1/4 of the nodes it may use: it is on 2 of 8, and n3, where it would go, holds none")
		}},
		{"a protected job resumes beside protected work whatever the share", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			for _, n := range []string{"n1", "n2", "n3", "n4"} {
				h.node(n, "default", 4)
			}
			h.submit("research", "old", "training", 2, 1, preempted(times(3)...))
			for _, id := range []string{"t2", "t3", "t4"} {
				h.submit("product", id, "training", 4, 1)
			}
			heldProtected(h, "research", "train", 2)
			h.advance(time.Hour)
			actionOf(t, h.step(), engine.Resume, "research/train")
		}},
		{"a protected job resumes when GPUs are plenty", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			for _, n := range []string{"n1", "n2", "n3"} {
				h.node(n, "default", 4)
			}
			heldProtected(h, "research", "train", 2)
			h.advance(time.Hour)
			actionOf(t, h.step(), engine.Resume, "research/train")
		}},
		{"a limit is kept whatever the protection", func(t *testing.T) {
			h := newHarness(t, bounded(func(p *policy.Policy) {
				p.Tenants["research"] = tenant("research", 0, 2)
			}))
			h.node("n1", "default", 4)
			h.submit("research", "train", "training", 2, 1, preempted(times(3)...))
			h.submit("research", "train2", "training", 2, 1, preempted(times(3)...))
			h.advance(time.Hour)
			plan := h.step()
			if len(engine.VictimActions(plan)) != 1 || plan.Actions[0].Reason.Rule != engine.RuleLimit {
				t.Fatalf("want one give-back for the limit; got %q", kinds(plan))
			}
			mustContain(t, plan.Actions[0].Reason.Message, "tenant research holds 4 GPUs, limit 2: giving back 2",
				"was preempted 3 times, the most over its life (preemption.max_per_job), but a limit is kept whatever the protection")
		}},
		{"max_per_job 0: no bound", func(t *testing.T) {
			h := newHarness(t, bounded(func(p *policy.Policy) { p.Preemption.MaxPerJob = 0 }))
			h.node("n1", "default", 4)
			h.submit("research", "train", "training", 4, 1, preempted(times(30)...))
			h.advance(time.Hour)
			h.submit("product", "nb", "interactive", 4, 1)
			plan := h.step()
			a := actionOf(t, plan, engine.Preempt, "research/train")
			if a.Reason.Rule != engine.RuleReclaim {
				t.Fatalf("preemption %s: want a reclaim", a)
			}
		}},
		{"the lifetime count the controller keeps counts beyond the recent times", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			j := h.submit("research", "old", "training", 4, 1)
			j.Job.PreemptionsTotal = 3
			h.advance(time.Hour)
			promo := h.submit("research", "promo", "training", 4, 1)
			promo.Job.Priority, promo.Job.Promoted = 50, true
			plan := h.step()
			if len(engine.VictimActions(plan)) != 0 {
				t.Fatalf("want the protected job kept; got %q", kinds(plan))
			}
		}},
	}
	for _, s := range stories {
		t.Run(s.name, s.play)
	}
}

// heldProtected submits a job preempted max_per_job (3) times that waits,
// held, for gpus GPUs.
func heldProtected(h *harness, ns, id string, gpus int) *hjob {
	var at []time.Time
	for i := range 3 {
		at = append(at, h.now.Add(-time.Duration(48-i)*time.Hour))
	}
	j := h.submit(ns, id, "training", gpus, 1, preempted(at...), inPool("none"))
	j.NodePool = ""
	j.Count, j.Held, j.Preempted = 0, 1, true
	return j
}

// mustWait fails unless plan has job waiting under rule, its reason
// holding part.
func mustWait(t *testing.T, plan *engine.Plan, job string, rule engine.Rule, part string) {
	t.Helper()
	for _, w := range plan.Waiting {
		if w.Job.String() == job {
			if w.Reason.Rule != rule {
				t.Fatalf("%s waits under %s (%s); want %s", job, w.Reason.Rule, w.Reason.Message, rule)
			}
			mustContain(t, w.Reason.Message, part)
			return
		}
	}
	t.Fatalf("%s does not wait; plan %q", job, kinds(plan))
}
