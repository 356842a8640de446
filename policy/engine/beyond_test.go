package engine_test

import (
	"github.com/gpu-steward/steward/policy/engine"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestBeyondReserve: non-preemptible work beyond its tenant's reserve
// (beyond_reserve "run", the default) never waits for free GPUs, takes
// what its priority allows, and is taken back by reserve reclaims alone
// (issue 31).
func TestBeyondReserve(t *testing.T) {
	stories := []struct {
		name string
		play func(t *testing.T)
	}{
		{"free GPUs: queued serving beyond the reserve is left to Nomad, nothing held", func(t *testing.T) {
			h := newHarness(t, tenantsPolicy())
			h.node("n1", "default", 8)
			h.submit("product", "serve-a", "inference", 4, 1)
			h.advance(time.Hour)
			h.submit("product", "serve-b", "inference", 2, 1) // Nomad places it on free GPUs
			plan := h.step()
			if len(plan.Actions) != 0 || len(plan.Waiting) != 0 {
				t.Fatalf("want nothing to do; got %q, waiting %+v", kinds(plan), plan.Waiting)
			}
			h.expect("running", h.running(), []string{"product/serve-a×1", "product/serve-b×1"})
		}},
		{"no free GPUs: serving beyond the reserve preempts training of a tenant above its reserve by priority", func(t *testing.T) {
			h := newHarness(t, testPolicy(func(p *policy.Policy) {
				p.Tenants["product"] = tenant("product", 2, 8)
				p.Tenants["research"] = tenant("research", 2, 8)
			}))
			h.node("n1", "default", 8)
			h.submit("research", "train1", "training", 4, 1)
			h.advance(30 * time.Minute)
			h.submit("research", "train2", "training", 2, 1) // the least progress at risk
			h.submit("product", "serve-a", "inference", 2, 1)
			h.advance(time.Hour)
			h.submit("product", "serve-b", "inference", 2, 1)
			plan := h.step()
			a := actionOf(t, plan, engine.Preempt, "research/train2")
			if a.Reason.Rule != engine.RulePriority || a.GPUs != 2 {
				t.Fatalf("preemption %s: want train2's 2 GPUs by priority", a)
			}
			mustContain(t, a.Reason.Message, "tier training (priority 40) yields 2 GPUs to product/serve-b/main, tier inference (priority 90)",
				"tenant research holds 6 GPUs, above its reserve of 2")
		}},
		{"serving beyond the reserve is not taken by a higher tier's priority, only by a reclaim", func(t *testing.T) {
			h := newHarness(t, testPolicy(func(p *policy.Policy) {
				p.Tenants["product"] = tenant("product", 2, 8)
				p.Tenants["research"] = tenant("research", 2, 8)
			}))
			h.node("n1", "default", 4)
			h.submit("product", "build-a", "build", 2, 1)
			h.advance(10 * time.Minute)
			h.submit("product", "build-b", "build", 2, 1) // beyond product's reserve of 2
			h.advance(time.Hour)
			// Research's inference beyond its own reserve of 2 may not
			// take product's build beyond its reserve by priority.
			h.submit("research", "serve", "inference", 4, 1)
			plan := h.step()
			if len(engine.VictimActions(plan)) != 0 {
				t.Fatalf("want no victims; got %q", kinds(plan))
			}
			// Research's inference within its reserve reclaims it.
			h.finish("research", "serve")
			h.submit("research", "serve2", "inference", 2, 1)
			plan = h.step()
			a := actionOf(t, plan, engine.Preempt, "product/build-b")
			if a.Reason.Rule != engine.RuleReclaim {
				t.Fatalf("preemption %s: want a reclaim", a)
			}
			mustContain(t, a.Reason.Message, "tenant product holds 4 GPUs, reserve 2: reclaiming 2 for research/serve2/main",
				"tier build is safe from preemption only within tenant product's reserve of 2, and its non-preemptible work holds 4 GPUs")
		}},
		{"work within its reserve still reclaims", func(t *testing.T) {
			h := newHarness(t, testPolicy(func(p *policy.Policy) {
				p.Tenants["research"] = tenant("research", 2, policy.Unlimited)
				p.Tenants["platform"] = tenant("platform", 2, policy.Unlimited)
			}))
			h.node("n1", "default", 3)
			h.submit("research", "nb1", "interactive", 2, 1)
			h.submit("research", "nb2", "interactive", 1, 1)
			h.advance(time.Hour)
			h.submit("platform", "nb", "interactive", 2, 1)
			plan := h.step()
			a := actionOf(t, plan, engine.Preempt, "research/nb1")
			if a.Reason.Rule != engine.RuleReclaim {
				t.Fatalf("preemption %s: want a reclaim", a)
			}
		}},
		{"a tenant with reserve 0 runs serving on free GPUs", func(t *testing.T) {
			h := newHarness(t, testPolicy(func(p *policy.Policy) {
				p.Tenants["platform"] = tenant("platform", 0, policy.Unlimited)
			}))
			h.node("n1", "default", 4)
			h.submit("platform", "serve", "inference", 2, 1)
			plan := h.step()
			if len(plan.Waiting) != 0 {
				t.Fatalf("want serving running; waiting %+v", plan.Waiting)
			}
			h.expect("running", h.running(), []string{"platform/serve×1"})
		}},
	}
	for _, s := range stories {
		t.Run(s.name, s.play)
	}
}
