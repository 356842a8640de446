package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// withScaling gives a job's group "work" a scaling block (a Nomad
// Autoscaler policy), as Nomad stores it.
func withScaling(j *api.Job, lo, hi int64) *api.Job {
	enabled := true
	j.TaskGroups[0].Scaling = &api.ScalingPolicy{Enabled: &enabled, Min: &lo, Max: &hi, Type: "horizontal"}
	return j
}

func scalingOf(t *testing.T, f *fakeNomad, key string) ScalingPolicy {
	t.Helper()
	p := toScalingPolicy(f.cl().jobs[key].TaskGroups[0].Scaling)
	if p == nil {
		t.Fatalf("%s has no scaling policy", key)
	}
	return *p
}

// TestScalingPolicyWhileHeld: ml/train's group has a scaling policy (min
// 1, max 4) and is preempted for ml/nb. Nomad refuses to scale it below
// min, so Steward pins the policy as it holds the group (disabled, max 0);
// a scale up through the scaling API (what the Autoscaler does) is then
// refused by Nomad; when ml/nb ends, the resume restores the owner's
// policy with the count. Each story fails a write once, or restarts the
// controller, at some step: the policy still ends restored.
func TestScalingPolicyWhileHeld(t *testing.T) {
	owner := ScalingPolicy{Enabled: true, Min: 1, Max: 4}
	stories := []struct {
		name      string
		failOnce  string // a write (prefix) that fails once
		restartAt int    // restart the controller before this step (1-based; 0: never)
	}{
		{name: "clean"},
		{name: "the hold's write fails once", failOnce: "scale-policy ml/train work 0"},
		{name: "the resume's write fails once", failOnce: "scale-policy ml/train work 1"},
		{name: "restart after the hold", restartAt: 4},
		{name: "restart after the resume was decided", restartAt: 6},
	}
	for _, s := range stories {
		t.Run(s.name, func(t *testing.T) {
			f := newFakeNomad()
			preemptionCluster(f)
			withScaling(f.cl().jobs["ml/train"], 1, 4)
			r := newRoundRunner(t, f)
			failed := false
			var all []string
			step := 0
			run := func(after time.Duration) {
				step++
				if step == s.restartAt {
					r.restart()
				}
				if s.failOnce != "" && !failed {
					f.mu.Lock()
					f.fail[s.failOnce] = errInjected
					f.mu.Unlock()
				}
				got, _ := r.round(after)
				all = append(all, got...)
				f.mu.Lock()
				for _, c := range f.calls {
					if s.failOnce != "" && strings.HasPrefix(c, s.failOnce) {
						failed = true
						delete(f.fail, s.failOnce)
					}
				}
				f.mu.Unlock()
			}
			for _, st := range preemptionSteps {
				run(st.after)
			}
			run(3 * time.Minute)
			if got := r.count("ml", "train"); got != 0 {
				t.Fatalf("ml/train count %d after its preemption, want 0 (held); writes %q", got, all)
			}
			pinned := scalingOf(t, f, "ml/train")
			if pinned != (ScalingPolicy{Enabled: false, Min: 0, Max: 0}) {
				t.Errorf("while held: scaling policy %s, want disabled, min 0, max 0", pinned)
			}
			h := r.c.states()[jobKey{"ml", "train"}].Held["work"]
			if h == nil || h.Scaling == nil || *h.Scaling != owner {
				t.Fatalf("the hold does not record the owner's policy: %+v", h)
			}
			if got, want := r.c.states()[jobKey{"ml", "train"}].scalingNotes(), "scaling policy disabled while held (restored on resume: enabled, min 1, max 4)"; got != want {
				t.Errorf("record's steward_scaling = %q, want %q", got, want)
			}
			// The Autoscaler scales the held group up: Nomad refuses.
			if _, err := f.cl().scale("ml", "train", "work", 2, 0); err == nil || !strings.Contains(err.Error(), "maximum") {
				t.Errorf("a scale up of the held group: %v, want Nomad's refusal (count above the policy's max)", err)
			}
			// ml/nb ends: ml/train resumes, with its owner's policy.
			stop := true
			f.cl().jobs["ml/nb"].Stop = &stop
			f.cl().allocs = nil
			for i := range 4 {
				run(4*time.Minute + time.Duration(i)*10*time.Second)
			}
			if got := r.count("ml", "train"); got != 1 {
				t.Errorf("ml/train count %d after ml/nb ended, want 1 (resumed); writes %q", got, all)
			}
			if got := scalingOf(t, f, "ml/train"); got != owner {
				t.Errorf("after the resume: scaling policy %s, want the owner's %s; writes %q", got, owner, all)
			}
			if st := r.c.states()[jobKey{"ml", "train"}]; st != nil && st.Held["work"] != nil {
				t.Errorf("hold kept after the resume: %+v", st.Held["work"])
			}
			if s.failOnce != "" && !failed {
				t.Errorf("no write matched %q: the story tested nothing; writes %q", s.failOnce, all)
			}
		})
	}
}

// TestScalingFor: the policy Steward writes with each count it sets.
func TestScalingFor(t *testing.T) {
	owner := ScalingPolicy{Enabled: true, Min: 1, Max: 4}
	job := func(count int, p *ScalingPolicy) *ObservedJob {
		return &ObservedJob{Namespace: "ml", ID: "train", Groups: map[string]GroupSpec{"work": {Count: count, GPUsPerAlloc: 1, Scaling: p}}}
	}
	held := func(count, original int, p *ScalingPolicy) *JobState {
		return &JobState{Namespace: "ml", ID: "train", Held: map[string]*Held{"work": {Count: count, Original: original, Scaling: p}}}
	}
	pin := func(lo, hi int64) ScalingPolicy { return ScalingPolicy{Enabled: false, Min: lo, Max: hi} }
	p := func(s ScalingPolicy) *ScalingPolicy { return &s }
	cases := []struct {
		name  string
		job   *ObservedJob
		st    *JobState
		count int
		want  ScalingPolicy
		write bool
	}{
		{"no scaling block: a plain scale", job(4, nil), held(4, 4, nil), 0, ScalingPolicy{}, false},
		{"held in full: pinned at 0", job(4, p(owner)), held(4, 4, p(owner)), 0, pin(0, 0), true},
		{"held in part: min kept where it fits, max the held count", job(4, p(owner)), held(2, 4, p(owner)), 2, pin(1, 2), true},
		{"resumed in part: still pinned", job(0, p(pin(0, 0))), held(1, 4, p(owner)), 3, pin(1, 3), true},
		{"resumed in full: the owner's back", job(0, p(pin(0, 0))), held(0, 4, p(owner)), 4, owner, true},
		{"already as wanted: a plain scale", job(2, p(pin(1, 2))), held(2, 4, p(owner)), 2, pin(1, 2), false},
		{"stopped for good (no hold): pinned", job(2, p(owner)), &JobState{}, 0, pin(0, 0), true},
		{"scaled up with no hold: the owner's policy stays", job(2, p(owner)), &JobState{}, 3, ScalingPolicy{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, write := scalingFor(c.job, c.st, "work", c.count)
			if write != c.write || write && got != c.want {
				t.Errorf("scalingFor(count %d) = %s, %v; want %s, %v", c.count, got, write, c.want, c.write)
			}
		})
	}
}

// TestScalingPolicyOwnerTakesBack: ml/train is held in part (2 of 4) with
// its policy pinned (min 1, max 2); its owner scales it to 1 through the
// scaling API, which the pin allows downwards: the owner's count wins, as
// for any job, and their policy comes back with it.
func TestScalingPolicyOwnerTakesBack(t *testing.T) {
	f := newFakeNomad()
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
	train := withScaling(apiJob("ml", "train", "training", 40, 1, 1), 1, 4) // the owner's scale: 1
	enabled, lo, hi := false, int64(1), int64(2)
	train.TaskGroups[0].Scaling = &api.ScalingPolicy{Enabled: &enabled, Min: &lo, Max: &hi}
	cl.jobs["ml/train"] = train
	r := newRoundRunner(t, f)
	owner := ScalingPolicy{Enabled: true, Min: 1, Max: 4}
	st := r.c.state(jobKey{"ml", "train"})
	st.hold("work", 2, 4, "capacity", t0, 10)
	st.keepScaling("work", &owner)
	st.Held["work"].Index = 9 // the owner's scale moved the job on since
	if err := r.c.save(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	if _, err := r.round(time.Second); err != nil {
		t.Fatal(err)
	}
	if got := scalingOf(t, f, "ml/train"); got != owner {
		t.Errorf("scaling policy %s after the owner took the group back, want theirs: %s (writes %q)", got, owner, f.calls)
	}
	if st := r.c.states()[jobKey{"ml", "train"}]; st != nil && st.Held["work"] != nil {
		t.Errorf("hold kept after the owner changed the count")
	}
}
