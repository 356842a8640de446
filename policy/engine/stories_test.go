package engine_test

import (
	"fmt"
	"github.com/gpu-steward/steward/policy/engine"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// The seed stories, each one a named case: the behaviour of the systems
// Steward learns from (ClearML, Run:ai, Determined, AMD's idle reclaim,
// QoS thrashing guards), played step by step against the engine.
func TestStories(t *testing.T) {
	stories := []struct {
		name string
		play func(t *testing.T)
	}{
		{"ClearML worked example; then preempted work resumes first (resume_order preempted-first)",
			clearMLWorkedExample(policy.ResumeOrderPreemptedFirst)},
		{"ClearML worked example; then the longest waiting resumes first (resume_order longest-waiting)",
			clearMLWorkedExample(policy.ResumeOrderLongestWaiting)},
		{"Run:ai over-quota reclaim and auto-resume", runAIOverQuota},
		{"Determined partial preemption and resume", determinedPartialPreemption},
		{"AMD idle, pressure mode: only when others wait", amdIdlePressure},
		{"AMD idle, always mode: regardless of demand", amdIdleAlways},
		{"AMD idle, always mode with requeue: stopped once, then waits for its owner (no loop)", amdIdleAlwaysRequeueNoLoop},
		{"AMD idle: not before 15 minutes", amdIdleNotBefore},
		{"AMD idle: a busy sample restarts the timer", amdIdleTimerRestart},
		{"Snooze: a snoozed notebook is not reclaimed until the snooze ends", snoozedNotebookKept},
		{"Snooze: a snooze beyond max_snooze is cut to it", snoozeCutToMax},
		{"QoS: serving spike takes back backfill at once", qosServingSpike},
		{"QoS: min_runtime spares young jobs unless nothing else frees enough", qosMinRuntime},
		{"QoS: eviction cap per job per hour", qosEvictionCap},
		{"QoS: a tenant over its limit is brought back under it whatever the eviction cap (issue 29)", limitWhateverTheCap},
		{"QoS: promotion after N preemptions", qosPromoteAfterPreemptions},
		{"QoS: promotion after waiting longer than D", qosPromoteAfterWait},
		{"QoS: two promoted jobs never preempt each other in turn (issue 28)", qosPromotedNeverPreemptEachOther},
		{"QoS: gangs are preempted whole and not broken by choice", qosGangs},
		{"Tenants: tier spoofing runs as the tenant's default tier, preemptible, at its priority", tierSpoofing},
		{"Tenants: non-preemptible work beyond its tenant's reserve waits (beyond_reserve wait)", nonPreemptibleBeyondReserveWaits},
		{"Tenants: non-preemptible work placed beyond its reserve is preemptible by reclaim, the newest first; it runs again on free GPUs", nonPreemptiblePlacedBeyondReserve},
		{"Urgent tiers: inference preempts at once with preempt_grace 0s", urgentInferencePreemptsAtOnce},
		{"Urgent tiers: preempt_grace shortens a pool's grace, never lengthens one", urgentShortensPoolGrace},
		{"Urgent tiers: limits keep preemption.grace; a job that opts out gets none", urgentLimitsAndOptOut},
		{"Tiers over reserves: interactive takes another team's reserved training only with preempts_reserved", tiersOverReserves},
		{"Tiers over reserves: the owner's training does not reclaim it, the owner's interactive does", tiersOverReservesNoLoop},
		{"Tiers over reserves: a tenant that may not use the tier cannot cross by naming it", tiersOverReservesSpoofed},
		{"Checkpoints: victim with the freshest checkpoint is taken first", freshestCheckpointFirst},
		{"Checkpoints: a checkpoint from before the start counts for nothing", staleCheckpointIgnored},
	}
	for _, s := range stories {
		t.Run(s.name, s.play)
	}
}

// ClearML: 10 GPUs; R&D and DevOps each reserve 5, limit 9. Once DevOps's
// jobs end, R&D holds 3 of its limit of 9 and has four 3-GPU jobs held:
// two preempted mid-run for DevOps, two held by its limit before they
// ever ran. Two fit; resume_order decides which.
func clearMLWorkedExample(order policy.ResumeOrder) func(t *testing.T) {
	return func(t *testing.T) {
		h := clearMLStory(t, order)
		h.advance(30 * time.Minute)
		h.finish("devops", "d1")
		h.finish("devops", "d2")
		plan := h.step()
		first, second := []string{"resume rnd/r3", "resume rnd/r2"}, []string{"rnd/r4×1", "rnd/r5×1"}
		if order == policy.ResumeOrderLongestWaiting {
			first, second = []string{"resume rnd/r4", "resume rnd/r5"}, []string{"rnd/r2×1", "rnd/r3×1"}
		}
		h.expect("resumed", kinds(plan), first)
		mustContain(t, plan.Actions[0].Reason.Message, "GPUs are free and tenant rnd stays within its limit of 9 (6 GPUs with these 3): resuming 1 allocation")
		mustContain(t, plan.Actions[1].Reason.Message, "tenant rnd stays within its limit of 9 (9 GPUs with these 3)")
		h.expect("still held", h.heldJobs(), second)
		for _, w := range plan.Waiting {
			if w.Reason.Rule != engine.RuleLimit {
				t.Errorf("%s waits for %s, want the limit", w.Job, w.Reason)
			}
			mustContain(t, w.Reason.Message, "tenant rnd holds 9 GPUs, limit 9: 3 more would exceed it")
		}
	}
}

// clearMLStory plays ClearML's worked example up to the point where
// DevOps runs two jobs and R&D one, with four held.
func clearMLStory(t *testing.T, order policy.ResumeOrder) *harness {
	h := newHarness(t, testPolicy(func(p *policy.Policy) {
		p.Tenants["rnd"] = tenant("rnd", 5, 9)
		p.Tenants["devops"] = tenant("devops", 5, 9)
		p.Preemption.ResumeOrder = order
	}))
	h.node("n1", "default", 10)

	// R&D submits five 3-GPU jobs: three run (9, its limit), two wait.
	for _, id := range []string{"r1", "r2", "r3", "r4", "r5"} {
		h.submit("rnd", id, "training", 3, 1)
		h.advance(time.Minute)
	}
	plan := h.step()
	h.expect("running", h.running(), []string{"rnd/r1×1", "rnd/r2×1", "rnd/r3×1"})
	h.expect("held", h.heldJobs(), []string{"rnd/r4×1", "rnd/r5×1"})
	hold := actionOf(t, plan, engine.Hold, "rnd/r4")
	if hold.Reason.Rule != engine.RuleLimit {
		t.Fatalf("r4 held for %s, want the limit", hold.Reason)
	}
	mustContain(t, hold.Reason.Message, "tenant rnd holds 9 GPUs, limit 9")

	// DevOps submits a 3-GPU job: the R&D job started last is preempted.
	h.advance(20 * time.Minute)
	h.submit("devops", "d1", "training", 3, 1)
	plan = h.step()
	h.expect("actions", kinds(plan), []string{"preempt rnd/r3", "hold devops/d1"})
	a := plan.Actions[0]
	if a.Reason.Rule != engine.RuleReclaim || a.For == nil || a.For.String() != "devops/d1" {
		t.Fatalf("preemption %s: want a reclaim for devops/d1", a)
	}
	mustContain(t, a.Reason.Message, "tenant rnd holds 9 GPUs, reserve 5: reclaiming 3 for devops/d1/main (tenant devops holds 0, reserve 5)")
	if a.Signal != "SIGUSR1" || a.Grace != 2*time.Minute || !a.Requeue {
		t.Errorf("preemption %s: want SIGUSR1, 2m grace, requeued", a)
	}
	h.playDrains()
	h.expect("running", h.running(), []string{"devops/d1×1", "rnd/r1×1", "rnd/r2×1"})

	// Nothing more happens while nothing changes.
	if plan := h.step(); len(plan.Actions) != 0 {
		t.Fatalf("a stable cluster should need no actions, got %q", kinds(plan))
	}

	// DevOps submits a 2-GPU job: one more R&D job is preempted.
	h.advance(time.Minute)
	h.submit("devops", "d2", "training", 2, 1)
	plan = h.step()
	h.expect("actions", kinds(plan), []string{"preempt rnd/r2", "hold devops/d2"})
	mustContain(t, plan.Actions[0].Reason.Message, "tenant rnd holds 6 GPUs, reserve 5: reclaiming 3 for devops/d2/main (tenant devops holds 3, reserve 5)")
	h.playDrains()
	h.expect("running", h.running(), []string{"devops/d1×1", "devops/d2×1", "rnd/r1×1"})
	h.expect("held", h.heldJobs(), []string{"rnd/r2×1", "rnd/r3×1", "rnd/r4×1", "rnd/r5×1"})
	if plan := h.step(); len(plan.Actions) != 0 {
		t.Fatalf("no thrashing: want no actions, got %q", kinds(plan))
	}
	return h
}

// Run:ai: 8 GPUs; project-a and project-b reserve 4 each.
func runAIOverQuota(t *testing.T) {
	h := newHarness(t, testPolicy(func(p *policy.Policy) {
		p.Tenants["project-a"] = tenant("project-a", 4, policy.Unlimited)
		p.Tenants["project-b"] = tenant("project-b", 4, policy.Unlimited)
	}))
	h.node("n1", "default", 8)

	h.submit("project-a", "train", "training", 8, 1) // over quota: 8 of a reserve of 4
	h.step()
	h.expect("running", h.running(), []string{"project-a/train×1"})

	h.advance(time.Hour)
	h.submit("project-b", "notebook", "interactive", 4, 1)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt project-a/train", "hold project-b/notebook"})
	mustContain(t, plan.Actions[0].Reason.Message, "tenant project-a holds 8 GPUs, reserve 4: reclaiming 8 for project-b/notebook/main")
	h.playDrains()
	h.expect("running", h.running(), []string{"project-b/notebook×1"})
	h.expect("held", h.heldJobs(), []string{"project-a/train×1"})

	// A waits: 4 free GPUs are not 8, and B is within its reservation.
	plan = h.step()
	if len(plan.Actions) != 0 || len(plan.Waiting) != 1 || plan.Waiting[0].Reason.Rule != engine.RuleCapacity {
		t.Fatalf("want A waiting for capacity and no actions; got %q, waiting %+v", kinds(plan), plan.Waiting)
	}

	// B stops: A resumes by itself with all 8 GPUs.
	h.finish("project-b", "notebook")
	plan = h.step()
	h.expect("actions", kinds(plan), []string{"resume project-a/train"})
	if r := plan.Actions[0]; r.Count != 1 || r.GPUs != 8 {
		t.Fatalf("resume %s: want 1 allocation of 8 GPUs", r)
	}
	h.expect("running", h.running(), []string{"project-a/train×1"})
}

// Determined: 8 one-GPU trials fill the cluster; a 4-GPU high-priority job
// preempts exactly 4 of them, which resume when it ends.
func determinedPartialPreemption(t *testing.T) {
	h := newHarness(t, testPolicy(nil))
	h.node("n1", "default", 8)
	h.submit("ml", "experiment", "training", 1, 8)
	h.advance(time.Hour)
	h.submit("ml", "urgent", "interactive", 4, 1)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt ml/experiment", "hold ml/urgent"})
	if a := plan.Actions[0]; len(a.Allocs) != 4 || a.GPUs != 4 || a.Reason.Rule != engine.RulePriority {
		t.Fatalf("preemption %s: want exactly 4 one-GPU trials, by priority", a)
	}
	mustContain(t, plan.Actions[0].Reason.Message, "tier training (priority 40) yields 4 GPUs to ml/urgent/main, tier interactive (priority 60)")
	h.playDrains()
	h.expect("running", h.running(), []string{"ml/experiment×4", "ml/urgent×1"})

	h.advance(30 * time.Minute)
	h.finish("ml", "urgent")
	plan = h.step()
	h.expect("actions", kinds(plan), []string{"resume ml/experiment"})
	h.expect("running", h.running(), []string{"ml/experiment×8"})
}

func idlePolicy(mode policy.IdleMode) *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		p.Idle = []*policy.IdleRule{{Name: "notebooks", Tiers: []string{"interactive"},
			Threshold: 10, After: 15 * time.Minute, Mode: mode, Action: policy.IdleActionRequeue}}
	})
}

// minutesAt returns one sample a minute for n minutes at util.
func minutesAt(from, n int, util float64) []engine.Sample {
	var out []engine.Sample
	for m := from; m < from+n; m++ {
		out = append(out, at(time.Duration(m)*time.Minute, util))
	}
	return out
}

func amdIdlePressure(t *testing.T) {
	h := newHarness(t, idlePolicy(policy.IdleModePressure))
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 1, usage(minutesAt(0, 21, 2)...))
	h.advance(20 * time.Minute)
	if plan := h.step(); len(plan.Actions) != 0 {
		t.Fatalf("idle but nobody waits: want no action, got %q", kinds(plan))
	}
	h.submit("research", "train", "training", 4, 1)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"idle-stop product/notebook"})
	a := plan.Actions[0]
	if a.Reason.Rule != engine.RuleIdle || a.For == nil || a.For.String() != "research/train" || !a.Requeue || a.Grace != 0 {
		t.Fatalf("idle stop %s: want an idle requeue for research/train without grace", a)
	}
	mustContain(t, a.Reason.Message, "GPU utilisation 2% (under 10%) for 20m (idle rule notebooks: after 15m, mode pressure)", "4 GPUs go to research/train/main")
	h.expect("running", h.running(), []string{"research/train×1"})
}

func amdIdleAlways(t *testing.T) {
	h := newHarness(t, idlePolicy(policy.IdleModeAlways))
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 1, usage(minutesAt(0, 17, 3)...))
	h.advance(16 * time.Minute)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"idle-stop product/notebook"})
	if a := plan.Actions[0]; a.For != nil || a.Reason.Rule != engine.RuleIdle {
		t.Fatalf("idle stop %s: want one for nobody in particular", a)
	}
	mustContain(t, plan.Actions[0].Reason.Message, "for 16m (idle rule notebooks: after 15m, mode always)")
}

// amdIdleAlwaysRequeueNoLoop: an idle notebook under a rule in mode
// always with action requeue, and nothing else waiting. Resumed on the
// free GPUs it gave back, it would idle, be stopped again 15 minutes
// later, and loop until the eviction cap. It is stopped once and waits
// held for two hours; its owner resumes it, it runs, idles again, and is
// stopped once more: one stop per owner's resume, never a loop.
func amdIdleAlwaysRequeueNoLoop(t *testing.T) {
	h := newHarness(t, idlePolicy(policy.IdleModeAlways))
	h.node("n1", "default", 4)
	nb := h.submit("product", "notebook", "interactive", 4, 1, usage(minutesAt(0, 300, 2)...))
	stops := func() int {
		n := 0
		for _, a := range h.history {
			if a.Kind == engine.IdleStop && a.Job == nb.Job.Ref {
				n++
			}
		}
		return n
	}
	for range 120 {
		h.advance(time.Minute)
		h.step()
	}
	if n := stops(); n != 1 {
		t.Fatalf("in two hours the notebook was stopped %d times, want once", n)
	}
	for _, a := range h.history {
		if a.Kind == engine.IdleStop {
			mustContain(t, a.Reason.Message, "(idle rule notebooks: after 15m, mode always); job requeued: it waits held for its owner to resume it (steward resume)")
		}
	}
	h.expect("running", h.running(), nil)
	h.expect("held", h.heldJobs(), []string{"product/notebook×1"})
	plan := h.step()
	if len(plan.Waiting) != 1 || !strings.Contains(plan.Waiting[0].Reason.Message, "waits held for its owner to resume it (steward resume)") {
		t.Fatalf("waiting %+v", plan.Waiting)
	}

	// Its owner resumes it (steward resume): it runs on the free GPUs,
	// idles, and is stopped once more; then it waits again.
	nb.OwnerResumed = true
	plan = h.step()
	h.expect("actions", kinds(plan), []string{"resume product/notebook"})
	h.expect("running", h.running(), []string{"product/notebook×1"})
	for range 60 {
		h.advance(time.Minute)
		h.step()
	}
	if n := stops(); n != 2 {
		t.Fatalf("stopped %d times in all, want twice: once more after its owner resumed it", n)
	}
	h.expect("held", h.heldJobs(), []string{"product/notebook×1"})
}

func amdIdleNotBefore(t *testing.T) {
	h := newHarness(t, idlePolicy(policy.IdleModeAlways))
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 1, usage(minutesAt(0, 15, 1)...))
	h.advance(14 * time.Minute)
	if plan := h.step(); len(plan.Actions) != 0 {
		t.Fatalf("idle for 14m of 15m: want no action, got %q", kinds(plan))
	}
	h.advance(time.Minute)
	if plan := h.step(); len(plan.Actions) != 1 {
		t.Fatalf("idle for 15m: want the idle stop, got %q", kinds(plan))
	}
}

func amdIdleTimerRestart(t *testing.T) {
	samples := append(minutesAt(0, 10, 1), at(10*time.Minute, 55)) // one busy minute
	samples = append(samples, minutesAt(11, 20, 1)...)
	h := newHarness(t, idlePolicy(policy.IdleModeAlways))
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 1, usage(samples...))
	h.advance(20 * time.Minute) // idle 0-10m, busy at 10m, idle since 11m: 9m
	if plan := h.step(); len(plan.Actions) != 0 {
		t.Fatalf("the busy sample at 10m restarts the timer: want no action at 20m, got %q", kinds(plan))
	}
	h.advance(6 * time.Minute) // idle since 11m: 15m
	if plan := h.step(); len(plan.Actions) != 1 {
		t.Fatalf("idle for 15m since the busy sample: want the idle stop at 26m, got %q", kinds(plan))
	}
}

// snoozePolicy is the notebooks rule in mode, with max_snooze 4h.
func snoozePolicy(mode policy.IdleMode) *policy.Policy {
	p := idlePolicy(mode)
	p.Idle[0].MaxSnooze = 4 * time.Hour
	return p
}

// A notebook idle for 20 minutes while training waits for its GPUs: its
// owner snoozed the idle rule for 2 hours at minute 10, so it keeps them
// until minute 130, and gives them up at the first plan after.
func snoozedNotebookKept(t *testing.T) {
	for _, mode := range []policy.IdleMode{policy.IdleModePressure, policy.IdleModeAlways} {
		t.Run(string(mode), func(t *testing.T) {
			h := newHarness(t, snoozePolicy(mode))
			h.node("n1", "default", 4)
			h.submit("product", "notebook", "interactive", 4, 1, usage(minutesAt(0, 200, 2)...))
			h.snooze("product", "notebook", t0.Add(10*time.Minute), 2*time.Hour)
			h.submit("research", "train", "training", 4, 1)
			for _, m := range []time.Duration{20 * time.Minute, 90 * time.Minute, 129 * time.Minute} {
				h.now = t0.Add(m)
				if plan := h.step(); slices.Contains(kinds(plan), "idle-stop product/notebook") {
					t.Fatalf("snoozed until 2h10m, at %v: want no idle stop, got %q", m, kinds(plan))
				}
			}
			h.expect("running while snoozed", h.running(), []string{"product/notebook×1"})
			h.now = t0.Add(130 * time.Minute)
			plan := h.step()
			h.expect("actions once the snooze ended", kinds(plan), []string{"idle-stop product/notebook", "resume research/train"})
			mustContain(t, plan.Actions[0].Reason.Message, "GPU utilisation 2% (under 10%) for 2h10m (idle rule notebooks")
		})
	}
}

// Asked for 10 hours under a rule that allows 4: the snooze ends 4 hours
// after it was asked for.
func snoozeCutToMax(t *testing.T) {
	h := newHarness(t, snoozePolicy(policy.IdleModeAlways))
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 1, usage(minutesAt(0, 600, 2)...))
	h.snooze("product", "notebook", t0, 10*time.Hour)
	if end := engine.SnoozeEnd(h.find("product", "notebook").Job.Snooze, h.p.Idle[0]); !end.Equal(t0.Add(4 * time.Hour)) {
		t.Fatalf("snooze end %v, want %v (max_snooze 4h)", end, t0.Add(4*time.Hour))
	}
	h.now = t0.Add(4*time.Hour - time.Minute)
	if plan := h.step(); len(plan.Actions) != 0 {
		t.Fatalf("within max_snooze: want no action, got %q", kinds(plan))
	}
	h.now = t0.Add(4 * time.Hour)
	h.expect("actions at max_snooze", kinds(h.step()), []string{"idle-stop product/notebook"})
}

func qosPolicy() *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		p.Pools["serving"] = &policy.Pool{Name: "serving", NodePool: "serving", Owners: []string{"inference"}}
		p.Tenants["ml"] = tenant("ml", 8, policy.Unlimited)
		p.Tenants["prod"] = tenant("prod", 8, policy.Unlimited) // inference runs within its reserve
	})
}

func qosServingSpike(t *testing.T) {
	h := newHarness(t, qosPolicy())
	h.node("s1", "serving", 8)
	h.submit("ml", "best-effort", "training", 2, 4) // backfills the serving pool
	h.advance(time.Minute)                          // young: min_runtime does not protect backfill
	h.submit("prod", "serve", "inference", 4, 1, inPool("serving"))
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt ml/best-effort"})
	a := plan.Actions[0]
	if a.Reason.Rule != engine.RuleBackfill || len(a.Allocs) != 2 || a.Grace != 0 {
		t.Fatalf("preemption %s: want 2 backfill allocations taken at once (no grace)", a)
	}
	mustContain(t, a.Reason.Message, "node pool serving is kept for tier inference: backfill by tier training gives 4 GPUs back to prod/serve/main")
	h.expect("running", h.running(), []string{"ml/best-effort×2", "prod/serve×1"})
}

func qosMinRuntime(t *testing.T) {
	h := newHarness(t, testPolicy(nil))
	h.node("n1", "default", 4)
	h.submit("ml", "old", "training", 2, 1)
	h.advance(30 * time.Minute)
	h.submit("ml", "young", "training", 2, 1)
	h.advance(2 * time.Minute)
	h.submit("ml", "notebook", "interactive", 2, 1)
	plan := h.step()
	h.expect("the old job goes, though the young one started last", kinds(plan), []string{"preempt ml/old", "hold ml/notebook"})
	h.playDrains()

	h.submit("ml", "big", "interactive", 2, 1) // only the young one is left
	plan = h.step()
	h.expect("nothing else frees enough", kinds(plan), []string{"preempt ml/young", "hold ml/big"})
}

func qosEvictionCap(t *testing.T) {
	h := newHarness(t, testPolicy(nil))
	h.node("n1", "default", 2)
	h.submit("ml", "steady", "training", 1, 1)
	h.advance(time.Hour)
	// Preempted twice in the last hour already: at the cap of 2.
	h.submit("ml", "bounced", "training", 1, 1, preempted(h.now.Add(-30*time.Minute), h.now.Add(-10*time.Minute)))
	h.advance(15 * time.Minute)
	h.submit("ml", "notebook", "interactive", 1, 1)
	plan := h.step()
	h.expect("the capped job is spared though it started last", kinds(plan), []string{"preempt ml/steady", "hold ml/notebook"})
	h.playDrains()

	h.advance(10 * time.Minute)
	h.submit("ml", "notebook2", "interactive", 1, 1)
	plan = h.step()
	h.expect("nothing may be preempted", kinds(plan), []string{"hold ml/notebook2"})
	mustContain(t, plan.Actions[0].Reason.Message, "none free, and nothing may be preempted")

	h.advance(6 * time.Minute) // the older preemption leaves the hour
	plan = h.step()
	h.expect("under the cap again", kinds(plan), []string{"preempt ml/bounced", "resume ml/notebook2"})
}

// Issue 29: a tenant over its limit asks for its held work again after
// each hold (re-registers it, or scales it up) and Nomad places it at once.
// Twice preempted in the hour, the job is at the eviction cap; the third
// time its tenant is brought back under its limit all the same, and the
// reason says why the cap did not spare it. Before, the job ran over its
// tenant's limit, exempt, for the rest of the hour.
func limitWhateverTheCap(t *testing.T) {
	h := newHarness(t, testPolicy(func(p *policy.Policy) { p.Tenants["ml"] = tenant("ml", 0, 1) }))
	h.node("n1", "default", 4)
	grabby := h.submit("ml", "grabby", "training", 1, 1)
	h.expect("within its limit", kinds(h.step()), nil)
	var plan *engine.Plan
	for i := 1; i <= 3; i++ {
		h.advance(5 * time.Minute)
		if grabby.Held > 0 {
			grabby.Held-- // its owner takes back what Steward held
		}
		grabby.Count++
		h.cluster().Place(h.now)
		h.expect("placed over its limit", h.running(), []string{"ml/grabby×2"})
		plan = h.step()
		h.expect(fmt.Sprintf("over its limit, time %d", i), kinds(plan), []string{"preempt ml/grabby"})
		h.playDrains()
		h.expect("back under its limit", h.running(), []string{"ml/grabby×1"})
	}
	mustContain(t, plan.Actions[0].Reason.Message, "tenant ml holds 2 GPUs, limit 1: giving back 1",
		"at the eviction cap of 2 preemptions an hour, preempted 2 times in the last hour: a limit is kept whatever the cap")
}

func qosPromoteAfterPreemptions(t *testing.T) {
	h := newHarness(t, testPolicy(nil))
	h.node("n1", "default", 1)
	h.submit("ml", "runner", "training", 1, 1)
	past := h.now.Add(-3 * time.Hour)
	h.submit("ml", "victim", "training", 1, 1, preempted(past, past.Add(time.Minute), past.Add(2*time.Minute)))
	plan := h.step()
	// Promoted above its tier, it outranks the runner; the runner is
	// younger than min_runtime, but nothing else frees a GPU.
	h.expect("promoted, then preempting", kinds(plan), []string{"promote ml/victim", "preempt ml/runner", "hold ml/victim"})
	a := plan.Actions[0]
	if a.Priority != 50 || a.Reason.Rule != engine.RulePromoteRun {
		t.Fatalf("promotion %s: want priority 50 for 3 preemptions", a)
	}
	mustContain(t, a.Reason.Message, "preempted 3 times (promote after 3): priority 40 → 50")
	h.playDrains()
	h.expect("running", h.running(), []string{"ml/victim×1"})
}

func qosPromoteAfterWait(t *testing.T) {
	h := newHarness(t, testPolicy(nil))
	h.node("n1", "default", 1)
	h.submit("ml", "runner", "training", 1, 1)
	h.submit("ml", "starved", "training", 1, 1)
	h.step()
	h.advance(59 * time.Minute)
	if plan := h.step(); len(plan.Actions) != 0 {
		t.Fatalf("59m of 1h: want no promotion yet, got %q", kinds(plan))
	}
	h.advance(2 * time.Minute)
	plan := h.step()
	a := actionOf(t, plan, engine.Promote, "ml/starved")
	mustContain(t, a.Reason.Message, "waiting 1h1m for 1 GPU (promote after 1h): priority 40 → 50")
}

// Issue 28: training t1 (40) and batch b1 (45) wait behind an
// interactive job on the one GPU; promotion after 15s, boost 10, no
// min_runtime, no eviction cap. When the GPU frees, b1, of the higher
// tier, is resumed before it has waited 15s; t1 is then promoted (50).
// Before, t1 took b1's GPU (50 > 45), and b1, promoted in its turn (55),
// took it back (55 > 50), and so on. A promotion outranks only work of
// its own tier or below: t1 waits, saying why with the numbers; b1,
// promoted later, is never preempted for t1.
func qosPromotedNeverPreemptEachOther(t *testing.T) {
	h := newHarness(t, testPolicy(func(p *policy.Policy) {
		p.Tiers["batch"] = &policy.Tier{Name: "batch", Priority: 45, Preemptible: true}
		p.Preemption.MinRuntime, p.Preemption.Grace, p.Preemption.MaxPerJobPerHour = 0, 0, 0
		p.Preemption.Promote = policy.Promote{AfterWait: 15 * time.Second, Boost: 10}
	}))
	h.node("n1", "default", 1)
	h.submit("ml", "i1", "interactive", 1, 1)
	h.submit("ml", "t1", "training", 1, 1)
	h.step() // t1 held
	h.advance(10 * time.Second)
	h.submit("ml", "b1", "batch", 1, 1)
	h.step() // b1 held
	h.finish("ml", "i1")
	plan := h.step()
	h.expect("b1 first, of the higher tier", kinds(plan), []string{"resume ml/b1"})
	h.expect("running", h.running(), []string{"ml/b1×1"})
	for range 12 {
		h.advance(5 * time.Second)
		plan = h.step()
		for _, a := range plan.Actions {
			if a.Kind == engine.Preempt {
				t.Fatalf("at %s: %s (%s)", h.now.Sub(t0), a, a.Reason)
			}
		}
		if h.now.Sub(t0) == 15*time.Second {
			a := actionOf(t, plan, engine.Promote, "ml/t1")
			mustContain(t, a.Reason.Message, "priority 40 → 50")
			if len(plan.Waiting) != 1 || plan.Waiting[0].Job.String() != "ml/t1" {
				t.Fatalf("waiting %+v, want ml/t1", plan.Waiting)
			}
			mustContain(t, plan.Waiting[0].Reason.Message, "nothing may be preempted for tier training (priority 50)",
				"ml/b1 (tier batch, priority 45) is not preempted for it: its priority 50 comes from promotion only (tier training runs at 40), and a promotion outranks only work of its own tier or below")
		}
	}
	h.expect("running", h.running(), []string{"ml/b1×1"})
	h.expect("held", h.heldJobs(), []string{"ml/t1×1"})

	// b1 preempted by other work and promoted in its turn (55) may take
	// promoted t1's GPU (its tier runs above training's); t1, promoted
	// too, never takes it back.
	h.finish("ml", "b1")
	h.step()
	h.expect("running", h.running(), []string{"ml/t1×1"})
	h.submit("ml", "b2", "batch", 1, 1)
	h.step()
	h.advance(16 * time.Second)
	plan = h.step()
	h.expect("promoted b2 takes promoted t1's GPU", kinds(plan), []string{"promote ml/b2", "preempt ml/t1", "resume ml/b2"})
	mustContain(t, plan.Actions[1].Reason.Message, "tier training (priority 50) yields 1 GPU to ml/b2/main, tier batch (priority 55)")
	for range 12 {
		h.advance(5 * time.Second)
		for _, a := range h.step().Actions {
			if a.Kind == engine.Preempt {
				t.Fatalf("at %s: %s (%s)", h.now.Sub(t0), a, a.Reason)
			}
		}
	}
	h.expect("running", h.running(), []string{"ml/b2×1"})
}

func qosGangs(t *testing.T) {
	h := newHarness(t, testPolicy(nil))
	h.node("n1", "default", 4)
	h.node("n2", "default", 2)
	h.submit("ml", "single", "training", 2, 1) // on n2, the fullest node it fits (binpack)
	h.advance(time.Minute)
	h.submit("ml", "gang", "training", 2, 2, gang()) // both on n1
	h.advance(time.Hour)
	h.submit("ml", "notebook", "interactive", 2, 1)
	plan := h.step()
	h.expect("the newer gang is spared: preempting a member would take it all", kinds(plan), []string{"preempt ml/single", "hold ml/notebook"})
	h.playDrains()

	h.submit("ml", "notebook2", "interactive", 2, 1)
	plan = h.step()
	// Taking the gang frees 4 GPUs for a 2-GPU job: the other 2 go to the
	// job held earlier.
	h.expect("only the gang is left", kinds(plan), []string{"preempt ml/gang", "hold ml/notebook2", "resume ml/single"})
	if a := plan.Actions[0]; len(a.Allocs) != 2 || a.GPUs != 4 {
		t.Fatalf("gang preemption %s: want both members, 4 GPUs", a)
	}
	h.playDrains()
	h.expect("held whole", h.heldJobs(), []string{"ml/gang×2"})
}

// tenantsPolicy: 8 GPUs; product may use every tier, research only
// interactive and training (default training); reserves of 4 each.
func tenantsPolicy() *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		p.Tenants["product"] = tenant("product", 4, 8)
		p.Tenants["research"] = tenant("research", 4, 8)
		p.Tenants["research"].Tiers = []string{"interactive", "training"}
		p.Tenants["research"].DefaultTier = "training"
	})
}

// Issue #12: research names inference in its job meta. It runs as
// training: at training's priority, preemptible, so product takes back
// its reserve from it as from any borrowed work.
func tierSpoofing(t *testing.T) {
	h := newHarness(t, tenantsPolicy())
	h.node("n1", "default", 8)
	h.submit("research", "serve", "inference", 8, 1) // Nomad places it, at the priority it asked for
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"set-priority research/serve"})
	a := plan.Actions[0]
	if a.Priority != 40 || a.Reason.Rule != engine.RuleTier {
		t.Fatalf("set-priority %s: want training's priority 40", a)
	}
	mustContain(t, a.Reason.Message,
		"tier inference is not allowed for tenant research: runs as training; tier training runs at priority 40; the job had priority 90")

	h.advance(time.Hour)
	h.submit("product", "notebook", "interactive", 4, 1)
	plan = h.step()
	h.expect("the spoofed job is preemptible", kinds(plan), []string{"preempt research/serve", "hold product/notebook"})
	mustContain(t, plan.Actions[0].Reason.Message,
		"tenant research holds 8 GPUs, reserve 4: reclaiming 8 for product/notebook/main (tenant product holds 0, reserve 4)")
	h.playDrains()
	h.expect("running", h.running(), []string{"product/notebook×1"})

	// Held, it waits as training: behind product's interactive work, and
	// it preempts nothing to come back.
	h.submit("product", "train", "training", 2, 1)
	plan = h.step()
	if len(plan.Actions) != 0 {
		t.Fatalf("want no actions, got %q", kinds(plan))
	}
	h.expect("running", h.running(), []string{"product/notebook×1", "product/train×1"})
}

// Run:ai's rule, with beyond_reserve "wait": product's second inference
// job would take its non-preemptible work to 6 GPUs, beyond its reserve of
// 4. It waits (and preempts nobody, though research borrows); it runs once
// the first ends.
func nonPreemptibleBeyondReserveWaits(t *testing.T) {
	h := newHarness(t, testPolicy(func(p *policy.Policy) {
		p.Tiers["inference"].BeyondReserve = policy.BeyondReserveWait
		p.Tenants["product"] = tenant("product", 4, 8)
		p.Tenants["research"] = tenant("research", 2, 8)
	}))
	h.node("n1", "default", 8)
	h.submit("product", "serve-a", "inference", 4, 1)
	h.submit("research", "train", "training", 4, 1) // 2 beyond its reserve
	h.advance(time.Hour)
	h.submit("product", "serve-b", "inference", 2, 1)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"hold product/serve-b"})
	hold := plan.Actions[0]
	if hold.Reason.Rule != engine.RuleReserve {
		t.Fatalf("hold %s: want the reserve rule", hold)
	}
	mustContain(t, hold.Reason.Message,
		"tier inference is not preemptible: it runs only within tenant product's reserve of 4 (its non-preemptible work holds 4 GPUs, 2 more would exceed it)")
	h.expect("running", h.running(), []string{"product/serve-a×1", "research/train×1"})

	h.finish("product", "serve-a")
	plan = h.step()
	h.expect("within the reserve again", kinds(plan), []string{"resume product/serve-b"})
	h.expect("running", h.running(), []string{"product/serve-b×1", "research/train×1"})
}

// Nomad placed product's second inference job on free GPUs: 6 GPUs of
// non-preemptible work, reserve 4. The newest, beyond the reserve, is
// preemptible by reclaim: research reclaims its reserve from it; the job
// within the reserve is never a victim. Held, it waits for GPUs (not for
// the reserve: beyond_reserve "run"), and resumes when research's job
// ends, its reason saying what it may lose.
func nonPreemptiblePlacedBeyondReserve(t *testing.T) {
	h := newHarness(t, tenantsPolicy())
	h.node("n1", "default", 8)
	h.submit("product", "serve-a", "inference", 4, 1)
	h.advance(10 * time.Minute)
	h.submit("product", "serve-b", "inference", 2, 1)
	h.advance(time.Hour)
	h.submit("research", "train", "training", 4, 1)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt product/serve-b", "hold research/train"})
	a := plan.Actions[0]
	if a.Reason.Rule != engine.RuleReclaim || a.GPUs != 2 || a.Signal != "SIGUSR1" {
		t.Fatalf("preemption %s: want a reclaim of serve-b's 2 GPUs with the checkpoint signal", a)
	}
	mustContain(t, a.Reason.Message,
		"tenant product holds 6 GPUs, reserve 4: reclaiming 2 for research/train/main (tenant research holds 0, reserve 4)",
		"; tier inference is safe from preemption only within tenant product's reserve of 4, and its non-preemptible work holds 6 GPUs")
	h.playDrains()
	h.expect("running", h.running(), []string{"product/serve-a×1", "research/train×1"})

	plan = h.step()
	if len(plan.Actions) != 0 || len(plan.Waiting) != 1 || plan.Waiting[0].Reason.Rule != engine.RuleCapacity {
		t.Fatalf("want serve-b waiting for capacity and no actions; got %q, waiting %+v", kinds(plan), plan.Waiting)
	}
	h.finish("research", "train")
	plan = h.step()
	h.expect("actions", kinds(plan), []string{"resume product/serve-b"})
	mustContain(t, plan.Actions[0].Reason.Message,
		"GPUs are free and tenant product stays within its limit of 8 (6 GPUs with these 2): resuming 1 allocation"+
			"; tier inference of tenant product runs beyond its reserve of 4 (6 GPUs of non-preemptible work): preemptible by reserve reclaims")
	h.expect("running", h.running(), []string{"product/serve-a×1", "product/serve-b×1"})
}

// urgentPolicy: inference may not wait for checkpoints; product reserves
// room for its serving.
func urgentPolicy(mod func(p *policy.Policy)) *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		zero := time.Duration(0)
		p.Tiers["inference"].PreemptGrace = &zero
		p.Tenants["prod"] = tenant("prod", 4, policy.Unlimited)
		if mod != nil {
			mod(p)
		}
	})
}

// A serving job needs GPUs that training holds. Without preempt_grace the
// training job gets 2 minutes to checkpoint, and serving waits 2 minutes;
// with preempt_grace = "0s" it is stopped at once, and the reason says why.
// Work of a tier without preempt_grace still grants the usual grace.
func urgentInferencePreemptsAtOnce(t *testing.T) {
	tests := []struct {
		name      string
		tier      string // of the beneficiary
		ns        string
		wantSig   string
		wantGrace time.Duration
		wantNote  string
		wantHold  []string
	}{
		{"inference: at once", "inference", "prod", "", 0, "; grace 0s: inference work waits for no checkpoint", nil},
		// Work that waits for a checkpoint waits held (RuleDraining).
		{"interactive: usual grace", "interactive", "ml", "SIGUSR1", 2 * time.Minute, "", []string{"hold ml/serve"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, urgentPolicy(nil))
			h.node("n1", "default", 4)
			h.submit("ml", "train", "training", 4, 1)
			h.advance(time.Hour)
			h.submit(tt.ns, "serve", tt.tier, 4, 1)
			plan := h.step()
			h.expect("actions", kinds(plan), append([]string{"preempt ml/train"}, tt.wantHold...))
			a := plan.Actions[0]
			if a.Signal != tt.wantSig || a.Grace != tt.wantGrace || a.For == nil || a.For.ID != "serve" {
				t.Fatalf("preemption %s: want signal %q, grace %v, for serve", a, tt.wantSig, tt.wantGrace)
			}
			if tt.wantNote != "" {
				mustContain(t, a.Reason.Message, "4 for "+tt.ns+"/serve/main", tt.wantNote)
			} else if strings.Contains(a.Reason.Message, "grace") {
				t.Errorf("reason %q mentions a grace it did not shorten", a.Reason.Message)
			}
			if tt.wantGrace > 0 {
				h.playDrains() // with no grace the victim stopped in the round
			}
			h.expect("running", h.running(), []string{tt.ns + "/serve×1"})
		})
	}
}

// A pool's grace for backfill is capped too, and preempt_grace longer than
// the usual grace changes nothing: it only ever shortens.
func urgentShortensPoolGrace(t *testing.T) {
	tests := []struct {
		name      string
		cap       time.Duration
		wantGrace time.Duration
		wantNote  string
	}{
		{"30s caps the pool's 1m", 30 * time.Second, 30 * time.Second, "; grace 30s (not 1m): inference work waits no longer for a checkpoint"},
		{"5m leaves the pool's 1m", 5 * time.Minute, time.Minute, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, urgentPolicy(func(p *policy.Policy) {
				p.Tiers["inference"].PreemptGrace = &tt.cap
				p.Pools["serving"] = &policy.Pool{Name: "serving", NodePool: "serving", Owners: []string{"inference"}, Grace: time.Minute}
			}))
			h.node("s1", "serving", 4)
			h.submit("ml", "best-effort", "training", 4, 1)
			h.advance(time.Hour)
			h.submit("prod", "serve", "inference", 4, 1, inPool("serving"))
			plan := h.step()
			h.expect("actions", kinds(plan), []string{"preempt ml/best-effort", "hold prod/serve"})
			a := plan.Actions[0]
			if a.Reason.Rule != engine.RuleBackfill || a.Grace != tt.wantGrace || a.Signal != "SIGUSR1" {
				t.Fatalf("preemption %s: want backfill with SIGUSR1 and grace %v", a, tt.wantGrace)
			}
			mustContain(t, a.Reason.Message, "backfill by tier training gives 4 GPUs back to prod/serve/main"+tt.wantNote)
			if tt.wantNote == "" && strings.Contains(a.Reason.Message, "; grace") {
				t.Errorf("reason %q mentions a grace it did not shorten", a.Reason.Message)
			}
		})
	}
}

// A tenant over its limit gives back work with preemption.grace whatever
// tier its waiting work is in; a victim whose job takes no checkpoint
// signal gets no grace, and no note about one.
func urgentLimitsAndOptOut(t *testing.T) {
	h := newHarness(t, urgentPolicy(func(p *policy.Policy) {
		p.Tenants["ml"] = tenant("ml", 0, 2)
	}))
	h.node("n1", "default", 8)
	// Nomad placed 4 GPUs of ml before Steward saw them: 2 over its limit.
	h.submit("ml", "a", "training", 2, 1)
	h.advance(time.Minute)
	h.submit("ml", "b", "training", 2, 1)
	h.advance(time.Hour)
	plan := h.step()
	h.expect("actions", kinds(plan), []string{"preempt ml/b"})
	if a := plan.Actions[0]; a.Reason.Rule != engine.RuleLimit || a.Grace != 2*time.Minute || a.Signal != "SIGUSR1" {
		t.Fatalf("limit preemption %s: want SIGUSR1 with preemption.grace", a)
	}

	h = newHarness(t, urgentPolicy(nil))
	h.node("n1", "default", 4)
	h.submit("ml", "train", "training", 4, 1)
	h.find("ml", "train").Job.Checkpoint = "none"
	h.advance(time.Hour)
	h.submit("prod", "serve", "inference", 4, 1)
	plan = h.step()
	h.expect("actions", kinds(plan), []string{"preempt ml/train"})
	if a := plan.Actions[0]; a.Signal != "" || a.Grace != 0 || strings.Contains(a.Reason.Message, "grace") {
		t.Fatalf("preemption %s (%q): a job that opts out gets no signal, no grace and no note", a, a.Reason.Message)
	}
}

// Two training jobs of one tenant, on two nodes. Without checkpoints the
// one started last goes (it has run the shortest); once the older one
// reports a checkpoint a minute ago, it has the least progress at risk
// and goes instead. Among jobs of different sizes the time since the
// checkpoint decides, per GPU freed.
func freshestCheckpointFirst(t *testing.T) {
	tests := []struct {
		name string
		ckpt map[string]time.Duration // job -> checkpoint this long before the plan
		want string
	}{
		{"no checkpoints: the newest goes", nil, "preempt ml/new"},
		{"the old job just checkpointed: it goes", map[string]time.Duration{"old": time.Minute}, "preempt ml/old"},
		{"both checkpointed: the freshest goes", map[string]time.Duration{"old": 5 * time.Minute, "new": 2 * time.Minute}, "preempt ml/new"},
		{"checkpoint older than the other's run: the other goes", map[string]time.Duration{"old": 40 * time.Minute}, "preempt ml/new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, testPolicy(nil))
			h.node("n1", "default", 4)
			h.node("n2", "default", 4)
			h.submit("ml", "old", "training", 4, 1)
			h.advance(30 * time.Minute)
			h.submit("ml", "new", "training", 4, 1)
			h.advance(30 * time.Minute) // old ran 60m, new 30m
			for id, ago := range tt.ckpt {
				h.checkpoint("ml", id, h.now.Add(-ago))
			}
			h.submit("ml", "notebook", "interactive", 4, 1)
			plan := h.step()
			h.expect("actions", kinds(plan), []string{tt.want, "hold ml/notebook"})
		})
	}
}

// A checkpoint written before the allocation started (by an earlier run,
// in a persistent checkpoint dir) does not make the work look safe: what
// is at risk is everything since the start.
func staleCheckpointIgnored(t *testing.T) {
	h := newHarness(t, testPolicy(nil))
	h.node("n1", "default", 4)
	h.node("n2", "default", 4)
	h.submit("ml", "old", "training", 4, 1)
	h.advance(30 * time.Minute)
	h.submit("ml", "new", "training", 4, 1)
	h.checkpoint("ml", "new", h.now.Add(-24*time.Hour)) // yesterday's run
	h.advance(30 * time.Minute)
	h.submit("ml", "notebook", "interactive", 4, 1)
	plan := h.step()
	h.expect("the newest goes, as without checkpoints", kinds(plan), []string{"preempt ml/new", "hold ml/notebook"})
}

// overReservePolicy: research reserves the whole 4-GPU node; platform has
// no reserve. With cross set, interactive work may preempt training within
// a reserve (preempts_reserved = ["training"]).
func overReservePolicy(cross bool) *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		p.Tenants["research"] = tenant("research", 4, 8)
		p.Tenants["platform"] = tenant("platform", 0, 4)
		if cross {
			p.Tiers["interactive"].PreemptsReserved = []string{"training"}
		}
	})
}

// Interactive work beats training across teams (the mission's order) only
// where the policy says so: by default research's reserve protects its
// training from platform's notebook; with preempts_reserved it does not,
// and the reason says which rule crossed the reserve.
func tiersOverReserves(t *testing.T) {
	tests := []struct {
		name        string
		cross       bool
		wantActions []string
		wantRunning []string
		wantReason  string
	}{
		{"reserves protect training by default", false, []string{"hold platform/nb"},
			[]string{"research/train×1"}, "none free, and nothing may be preempted for tier interactive (priority 60) of tenant platform (holds 0, reserve 0)"},
		{"preempts_reserved crosses the reserve", true, []string{"preempt research/train", "hold platform/nb"},
			[]string{"platform/nb×1"}, "tier training (priority 40) yields 4 GPUs to platform/nb/main, tier interactive (priority 60); " +
				"tenant research holds 4 GPUs, within its reserve of 4, but tier interactive may preempt training within reserves (preempts_reserved)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, overReservePolicy(tt.cross))
			h.node("n1", "default", 4)
			h.submit("research", "train", "training", 4, 1)
			h.step()
			h.advance(time.Hour)
			h.submit("platform", "nb", "interactive", 1, 1)
			plan := h.step()
			h.expect("actions", kinds(plan), tt.wantActions)
			if tt.cross {
				h.playDrains()
			}
			h.expect("running", h.running(), tt.wantRunning)
			if tt.cross {
				a := plan.Actions[0]
				if a.Reason.Rule != engine.RulePriority || a.Signal != "SIGUSR1" || a.Grace != 2*time.Minute {
					t.Errorf("preemption %s: want rule priority with the usual checkpoint grace", a)
				}
				mustContain(t, a.Reason.Message, tt.wantReason)
				return
			}
			if len(plan.Waiting) != 1 || plan.Waiting[0].Reason.Rule != engine.RuleCapacity {
				t.Fatalf("waiting %v: want platform/nb held for capacity", plan.Waiting)
			}
			mustContain(t, plan.Waiting[0].Reason.Message, tt.wantReason)
		})
	}
}

// The training preempted across its reserve waits: its tenant is under
// its reserve, but reclaiming from the notebook would only start the loop
// over (the notebook would preempt it again). Research's own interactive
// work, which platform's may not preempt within the reserve, does reclaim
// the notebook's GPU.
func tiersOverReservesNoLoop(t *testing.T) {
	h := newHarness(t, overReservePolicy(true))
	h.node("n1", "default", 4)
	h.submit("research", "train", "training", 4, 1)
	h.step()
	h.advance(time.Hour)
	h.submit("platform", "nb", "interactive", 1, 1)
	h.step()
	h.playDrains()
	h.expect("running", h.running(), []string{"platform/nb×1"})
	for range 4 { // past its promotion for waiting (1h): still below interactive
		h.advance(20 * time.Minute)
		for _, a := range h.step().Actions {
			if a.Kind != engine.Promote {
				t.Fatalf("research/train should wait, not reclaim the notebook: %s", a)
			}
		}
	}
	h.expect("held", h.heldJobs(), []string{"research/train×1"})

	h.submit("research", "explore", "interactive", 4, 1)
	plan := h.step()
	a := actionOf(t, plan, engine.Preempt, "platform/nb")
	if a.Reason.Rule != engine.RuleReclaim || a.For == nil || a.For.String() != "research/explore" {
		t.Fatalf("preemption %s: want a reclaim for research/explore", a)
	}
	mustContain(t, a.Reason.Message, "tenant platform holds 1 GPU, reserve 0: reclaiming 1 for research/explore/main (tenant research holds 0, reserve 4)")
	h.playDrains()
	h.expect("running", h.running(), []string{"research/explore×1"})
}

// Jobs name their own tier, so only a tenant whose tiers allow one with
// preempts_reserved crosses reserves with it: platform, limited to
// training, names interactive for its job, which runs as training and so
// leaves research's reserved training alone.
func tiersOverReservesSpoofed(t *testing.T) {
	pol := overReservePolicy(true)
	pol.Tenants["platform"].Tiers = []string{"training"}
	h := newHarness(t, pol)
	h.node("n1", "default", 4)
	h.submit("research", "train", "training", 4, 1)
	h.step()
	h.advance(time.Hour)
	h.submit("platform", "nb", "interactive", 1, 1)
	plan := h.step()
	for _, a := range plan.Actions {
		if a.Kind == engine.Preempt {
			t.Fatalf("platform crossed research's reserve with a tier it may not use: %s", a)
		}
	}
	h.expect("running", h.running(), []string{"research/train×1"})
}
