package engine

import (
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestLifetimeBound: a job preempted preemption.max_per_job times over its
// life is protected until it ends, yielding only to its tenant's limit and
// to a reserve reclaim nothing else frees (issue 31: every job completes).
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
			a := actionOf(t, plan, Preempt, "research/train")
			mustContain(t, a.Reason.Message,
				"; job research/train was preempted 3 times, the most over its life (preemption.max_per_job): protected until it ends")
		}},
		{"a higher tier takes other work first, a protected job only when nothing else frees enough", func(t *testing.T) {
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
			a := actionOf(t, plan, Preempt, "research/old")
			mustContain(t, a.Reason.Message, "tier training (priority 40) yields 2 GPUs to research/nb2/main, tier interactive (priority 60)",
				"; job research/old was preempted 3 times, the most over its life (preemption.max_per_job), but nothing else frees enough for work of a higher tier")
		}},
		{"its own tier, promoted, does not take a protected job", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			h.submit("research", "old", "training", 4, 1, preempted(times(3)...))
			h.advance(time.Hour)
			j := h.submit("research", "promo", "training", 4, 1)
			j.job.Priority, j.job.Promoted = 50, true
			plan := h.step()
			if len(victimActions(plan)) != 0 {
				t.Fatalf("want the protected job kept; got %q", kinds(plan))
			}
			h.expect("running", h.running(), []string{"research/old×1"})
		}},
		{"a reserve reclaim takes a protected job when nothing else frees the reserve", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			h.submit("research", "train", "training", 4, 1, preempted(times(3)...))
			h.advance(time.Hour)
			h.submit("product", "train", "training", 4, 1)
			plan := h.step()
			a := actionOf(t, plan, Preempt, "research/train")
			if a.Reason.Rule != RuleReclaim {
				t.Fatalf("preemption %s: want a reclaim", a)
			}
			mustContain(t, a.Reason.Message, "tenant research holds 4 GPUs, reserve 0: reclaiming 4 for product/train/main",
				"; job research/train was preempted 3 times, the most over its life (preemption.max_per_job), but nothing else frees the reserve it borrows")
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
		{"a limit is kept whatever the protection", func(t *testing.T) {
			h := newHarness(t, bounded(func(p *policy.Policy) {
				p.Tenants["research"] = tenant("research", 0, 2)
			}))
			h.node("n1", "default", 4)
			h.submit("research", "train", "training", 2, 1, preempted(times(3)...))
			h.submit("research", "train2", "training", 2, 1, preempted(times(3)...))
			h.advance(time.Hour)
			plan := h.step()
			if len(victimActions(plan)) != 1 || plan.Actions[0].Reason.Rule != RuleLimit {
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
			a := actionOf(t, plan, Preempt, "research/train")
			if a.Reason.Rule != RuleReclaim {
				t.Fatalf("preemption %s: want a reclaim", a)
			}
		}},
		{"the lifetime count the controller keeps counts beyond the recent times", func(t *testing.T) {
			h := newHarness(t, bounded(nil))
			h.node("n1", "default", 4)
			j := h.submit("research", "old", "training", 4, 1)
			j.job.PreemptionsTotal = 3
			h.allocs[0].Job = j.job
			h.advance(time.Hour)
			promo := h.submit("research", "promo", "training", 4, 1)
			promo.job.Priority, promo.job.Promoted = 50, true
			plan := h.step()
			if len(victimActions(plan)) != 0 {
				t.Fatalf("want the protected job kept; got %q", kinds(plan))
			}
		}},
	}
	for _, s := range stories {
		t.Run(s.name, s.play)
	}
}
