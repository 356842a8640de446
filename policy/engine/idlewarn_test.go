package engine_test

import (
	"github.com/gpu-steward/steward/policy/engine"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Idle rules with warn_before: the warning comes that long before the
// release, once per idle stretch, and work that gets busy is neither
// released nor warned again.
func TestIdleWarningStories(t *testing.T) {
	stories := []struct {
		name string
		play func(t *testing.T)
	}{
		{"idle warning comes warn_before before the reclaim", idleWarningBeforeReclaim},
		{"busy again: no reclaim, no second warning", idleWarningBusyAgain},
		{"pressure mode: the warning says the GPUs go back only if work waits", idleWarningPressure},
		{"no warn_before: no warning", idleWarningOff},
		{"a gang is warned once, when all its members are idle", idleWarningGang},
		{"snoozed: warned warn_before before the snooze ends, not while it holds", idleWarningSnoozed},
	}
	for _, s := range stories {
		t.Run(s.name, s.play)
	}
}

func warnPolicy(mode policy.IdleMode, warnBefore time.Duration) *policy.Policy {
	return testPolicy(func(p *policy.Policy) {
		p.Idle = []*policy.IdleRule{{Name: "notebooks", Tiers: []string{"interactive"},
			Threshold: 10, After: 15 * time.Minute, Mode: mode, Action: policy.IdleActionRequeue, WarnBefore: warnBefore}}
	})
}

// report sets what a job's allocations have reported by now: one sample a
// minute from the story's start, at util(minute).
func (h *harness) report(ns, id string, util func(minute int) float64) {
	for _, a := range h.allocs() {
		if a.Job.Ref != (engine.JobRef{ns, id}) {
			continue
		}
		var samples []engine.Sample
		for m := 0; !t0.Add(time.Duration(m) * time.Minute).After(h.now); m++ {
			samples = append(samples, engine.Sample{At: t0.Add(time.Duration(m) * time.Minute), Util: util(m)})
		}
		h.util[a.ID] = samples
	}
}

func warnings(p *engine.Plan) []string {
	var out []string
	for _, w := range p.Warnings {
		out = append(out, w.Job.String()+"/"+w.Group)
	}
	return out
}

// stepAt advances to minute m of the story, reports usage and plans.
func (h *harness) stepAt(m int, job string, util func(int) float64) *engine.Plan {
	h.t.Helper()
	h.now = t0.Add(time.Duration(m) * time.Minute)
	h.report("product", job, util)
	return h.step()
}

func idle(int) float64 { return 2 }

func idleWarningBeforeReclaim(t *testing.T) {
	h := newHarness(t, warnPolicy(policy.IdleModeAlways, 5*time.Minute))
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 1)
	h.step()
	if plan := h.stepAt(9, "notebook", idle); len(plan.Warnings)+len(plan.Actions) != 0 {
		t.Fatalf("idle for 9m of 15m, warn 5m before: want nothing yet, got warnings %q actions %q", warnings(plan), kinds(plan))
	}
	plan := h.stepAt(10, "notebook", idle)
	h.expect("warnings at 10m", warnings(plan), []string{"product/notebook/main"})
	h.expect("actions at 10m", kinds(plan), nil)
	w := plan.Warnings[0]
	if w.Reason.Rule != engine.RuleIdle || w.GPUs != 4 || !w.Since.Equal(t0) || !w.ReclaimAt.Equal(t0.Add(15*time.Minute)) || len(w.Allocs) != 1 {
		t.Fatalf("warning %+v: want rule idle, 4 GPUs, idle since t0, reclaim at 15m, one allocation", w)
	}
	if want := "GPU utilisation 2% (under 10%) for 10m (idle rule notebooks: after 15m, mode always): " +
		"its 4 GPUs go back in 5m unless it gets busy; the job is then requeued, held until its owner resumes it"; w.Reason.Message != want {
		t.Fatalf("reason\n got  %s\n want %s", w.Reason.Message, want)
	}
	for _, m := range []int{11, 14} {
		if plan := h.stepAt(m, "notebook", idle); len(plan.Warnings)+len(plan.Actions) != 0 {
			t.Fatalf("minute %d: warned at 10m: want no second warning, got %q %q", m, warnings(plan), kinds(plan))
		}
	}
	plan = h.stepAt(15, "notebook", idle)
	h.expect("actions at 15m", kinds(plan), []string{"idle-stop product/notebook"})
	h.expect("warnings at 15m", warnings(plan), nil)
}

func idleWarningBusyAgain(t *testing.T) {
	h := newHarness(t, warnPolicy(policy.IdleModeAlways, 5*time.Minute))
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 1)
	h.step()
	// Idle 0-10m, busy 11-13m, idle again from 14m.
	util := func(m int) float64 {
		if m >= 11 && m <= 13 {
			return 60
		}
		return 2
	}
	h.expect("warnings at 10m", warnings(h.stepAt(10, "notebook", util)), []string{"product/notebook/main"})
	for _, m := range []int{11, 13, 15, 20, 23} {
		if plan := h.stepAt(m, "notebook", util); len(plan.Warnings)+len(plan.Actions) != 0 {
			t.Fatalf("minute %d: busy at 11m: want no release and no second warning, got %q %q", m, warnings(plan), kinds(plan))
		}
	}
	// A new idle stretch since 14m: warned again after 10m of it, at 24m.
	plan := h.stepAt(24, "notebook", util)
	h.expect("warnings at 24m", warnings(plan), []string{"product/notebook/main"})
	mustContain(t, plan.Warnings[0].Reason.Message, "for 10m (idle rule notebooks", "go back in 5m unless it gets busy")
	h.expect("actions at 29m", kinds(h.stepAt(29, "notebook", util)), []string{"idle-stop product/notebook"})
}

func idleWarningPressure(t *testing.T) {
	h := newHarness(t, warnPolicy(policy.IdleModePressure, 5*time.Minute))
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 1, 1)
	h.step()
	plan := h.stepAt(12, "notebook", idle)
	h.expect("warnings at 12m", warnings(plan), []string{"product/notebook/main"})
	mustContain(t, plan.Warnings[0].Reason.Message, "for 12m (idle rule notebooks: after 15m, mode pressure): its 1 GPU goes back in 3m if other work waits for it, unless it gets busy")
	if plan := h.stepAt(30, "notebook", idle); len(plan.Warnings)+len(plan.Actions) != 0 {
		t.Fatalf("idle past after, nobody waits: want nothing, got %q %q", warnings(plan), kinds(plan))
	}
}

func idleWarningOff(t *testing.T) {
	h := newHarness(t, warnPolicy(policy.IdleModeAlways, 0))
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 1)
	h.step()
	for _, m := range []int{10, 14} {
		if plan := h.stepAt(m, "notebook", idle); len(plan.Warnings) != 0 {
			t.Fatalf("minute %d: no warn_before: want no warning, got %q", m, warnings(plan))
		}
	}
}

func idleWarningGang(t *testing.T) {
	h := newHarness(t, warnPolicy(policy.IdleModeAlways, 5*time.Minute))
	h.node("n1", "default", 4)
	h.node("n2", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 2, gang())
	h.step()
	plan := h.stepAt(10, "notebook", idle)
	h.expect("warnings", warnings(plan), []string{"product/notebook/"})
	if w := plan.Warnings[0]; len(w.Allocs) != 2 || w.GPUs != 8 || !slices.IsSorted(w.Allocs) {
		t.Fatalf("gang warning %+v: want both allocations, 8 GPUs", w)
	}
	if plan := h.stepAt(12, "notebook", idle); len(plan.Warnings) != 0 {
		t.Fatalf("gang warned once: got %q", warnings(plan))
	}
}

func idleWarningSnoozed(t *testing.T) {
	p := warnPolicy(policy.IdleModeAlways, 5*time.Minute)
	p.Idle[0].MaxSnooze = 4 * time.Hour
	h := newHarness(t, p)
	h.node("n1", "default", 4)
	h.submit("product", "notebook", "interactive", 4, 1)
	h.step()
	h.snooze("product", "notebook", t0, time.Hour)
	for _, m := range []int{10, 15, 30, 54} {
		if plan := h.stepAt(m, "notebook", idle); len(plan.Warnings)+len(plan.Actions) != 0 {
			t.Fatalf("minute %d: snoozed until 60m: want no warning and no release, got %q %q", m, warnings(plan), kinds(plan))
		}
	}
	plan := h.stepAt(55, "notebook", idle)
	h.expect("warnings at 55m", warnings(plan), []string{"product/notebook/main"})
	if w := plan.Warnings[0]; !w.ReclaimAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("reclaim at %s, want the snooze's end (60m)", w.ReclaimAt.Sub(t0))
	}
	mustContain(t, plan.Warnings[0].Reason.Message, "its 4 GPUs go back when its snooze ends in 5m unless it gets busy")
	h.expect("actions at 60m", kinds(h.stepAt(60, "notebook", idle)), []string{"idle-stop product/notebook"})
}
