package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// TestSnoozeDecision: what a snooze request does, for each duration and
// rule: the snooze's end (cut to max_snooze), and the reason or refusal.
func TestSnoozeDecision(t *testing.T) {
	notebooks := &policy.IdleRule{Name: "notebooks", Threshold: 10, After: 15 * time.Minute, MaxSnooze: 4 * time.Hour}
	noSnooze := &policy.IdleRule{Name: "strict", Threshold: 10, After: 15 * time.Minute}
	now := time.Date(2026, 11, 22, 13, 30, 0, 0, time.UTC)
	by := "a request in namespace ml"
	for _, tc := range []struct {
		name     string
		rule     *policy.IdleRule
		prev     *SnoozeState // the job's snooze before the request
		duration string
		until    time.Time // zero: no snooze
		reason   string
		refused  string
	}{
		{name: "within max_snooze", rule: notebooks, duration: "2h", until: now.Add(2 * time.Hour),
			reason: "idle reclaim snoozed until 15:30 UTC by a request in namespace ml (asked for 2h; idle rule notebooks allows up to 4h)"},
		{name: "beyond max_snooze is cut to it", rule: notebooks, duration: "10h", until: now.Add(4 * time.Hour),
			reason: "idle reclaim snoozed until 17:30 UTC by a request in namespace ml (asked for 10h, cut to 4h; idle rule notebooks allows up to 4h)"},
		{name: "ending on another day names it", rule: &policy.IdleRule{Name: "nb", MaxSnooze: 24 * time.Hour}, duration: "12h",
			until: now.Add(12 * time.Hour), reason: "idle reclaim snoozed until Nov 23 01:30 UTC by"},
		{name: "0s ends a snooze", rule: notebooks, duration: "0s",
			reason: "idle reclaim snooze ended by a request in namespace ml: idle rule notebooks applies again"},
		{name: "no idle rule covers the job", rule: nil, duration: "2h", refused: "no idle rule covers ml/nb: there is nothing to snooze"},
		{name: "the rule allows no snooze", rule: noSnooze, duration: "2h", refused: "idle rule strict allows no snooze (max_snooze 0s)"},
		{name: "no duration", rule: notebooks, duration: "soon", refused: `duration "soon" is no duration`},
		{name: "negative duration", rule: notebooks, duration: "-1h", refused: "duration -1h is negative"},
		// Asking again does not stretch max_snooze: a run of snoozes
		// (one asked while another lasts, or within after of its end)
		// ends at most max_snooze after the run began.
		{name: "asked again while snoozed: the run's cap", rule: notebooks, duration: "4h",
			prev:   &SnoozeState{At: now.Add(-3 * time.Hour), Until: now.Add(time.Hour), Asked: 4 * time.Hour},
			until:  now.Add(time.Hour),
			reason: "idle reclaim snoozed until 14:30 UTC by a request in namespace ml (asked for 4h, cut to 1h; idle rule notebooks allows up to 4h in a row, snoozed since 10:30 UTC)"},
		{name: "asked again just after the run's end: refused", rule: notebooks, duration: "2h",
			prev:    &SnoozeState{At: now.Add(-4*time.Hour - 5*time.Minute), Until: now.Add(-5 * time.Minute), Asked: 4 * time.Hour, Ended: true},
			refused: "idle rule notebooks allows snoozes of at most 4h in a row, and ml/nb has been snoozed since 09:25 UTC"},
		// Issue 29: wall-clock time alone never ends a run; only GPUs
		// busy for the rule's after in one stretch do.
		{name: "asked again hours after the end, GPUs idle all along: refused", rule: notebooks, duration: "2h",
			prev:    &SnoozeState{At: now.Add(-5 * time.Hour), Until: now.Add(-time.Hour), Asked: 4 * time.Hour, Ended: true, Busy: 2 * time.Minute},
			refused: "ml/nb has been snoozed since 08:30 UTC: it can be snoozed again once its GPUs have been busy (at or above 10% utilisation) for 15m in a row; the longest busy stretch since 08:30 UTC was 2m"},
		{name: "asked again a day later, GPUs idle all along: refused", rule: notebooks, duration: "2h",
			prev:    &SnoozeState{At: now.Add(-28 * time.Hour), Until: now.Add(-24 * time.Hour), Asked: 4 * time.Hour, Ended: true},
			refused: "allows snoozes of at most 4h in a row"},
		{name: "asked again after the GPUs were busy for after: a new run", rule: notebooks, duration: "2h",
			prev:   &SnoozeState{At: now.Add(-5 * time.Hour), Until: now.Add(-time.Hour), Asked: 4 * time.Hour, Ended: true, Busy: 15 * time.Minute},
			until:  now.Add(2 * time.Hour),
			reason: "idle reclaim snoozed until 15:30 UTC by a request in namespace ml (asked for 2h; idle rule notebooks allows up to 4h)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, why, err := snoozeDecision(tc.rule, tc.prev, jobKey{"ml", "nb"}, tc.duration, by, now)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) || s != nil {
					t.Fatalf("got %+v, %v; want refused with %q", s, err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.until.IsZero() != (s == nil) || s != nil && !s.Until.Equal(tc.until) {
				t.Errorf("snooze %+v, want until %v", s, tc.until)
			}
			if !strings.HasPrefix(why.Message, tc.reason) {
				t.Errorf("reason %q, want %q", why.Message, tc.reason)
			}
		})
	}
}

// TestSnoozeText: the record's words for a snooze in force, exactly; a
// snooze shorter than asked says what it was cut to.
func TestSnoozeText(t *testing.T) {
	now := time.Date(2026, 11, 22, 13, 30, 0, 0, time.UTC)
	by := "a request in namespace ml"
	rule := func(max time.Duration) *policy.IdleRule {
		return &policy.IdleRule{Name: "notebooks", Threshold: 10, After: 15 * time.Minute, MaxSnooze: max}
	}
	for _, tc := range []struct {
		name string
		rule *policy.IdleRule
		s    SnoozeState
		want string
	}{
		{name: "as asked", rule: rule(4 * time.Hour), s: SnoozeState{At: now, Until: now.Add(2 * time.Hour), Asked: 2 * time.Hour, By: by},
			want: "idle reclaim snoozed until 15:30 UTC by a request in namespace ml (asked for 2h; idle rule notebooks allows up to 4h)"},
		{name: "cut to max_snooze of a minute", rule: rule(time.Minute), s: SnoozeState{At: now, Until: now.Add(time.Minute), Asked: 2 * time.Hour, By: by},
			want: "idle reclaim snoozed until 13:31 UTC by a request in namespace ml (asked for 2h, cut to 1m; idle rule notebooks allows up to 1m)"},
		{name: "cut to what is left of the run", rule: rule(4 * time.Hour),
			s:    SnoozeState{At: now, Since: now.Add(-150 * time.Minute), Until: now.Add(90 * time.Minute), Asked: 2 * time.Hour, By: by},
			want: "idle reclaim snoozed until 15:00 UTC by a request in namespace ml (asked for 2h, cut to 1h30m; idle rule notebooks allows up to 4h in a row, snoozed since 11:00 UTC)"},
		{name: "cut by a max_snooze lowered since", rule: rule(30 * time.Minute), s: SnoozeState{At: now, Until: now.Add(2 * time.Hour), Asked: 2 * time.Hour, By: by},
			want: "idle reclaim snoozed until 14:00 UTC by a request in namespace ml (asked for 2h, cut to 30m; idle rule notebooks allows up to 30m)"},
		{name: "an odd remainder is said to the second", rule: rule(4 * time.Hour),
			s:    SnoozeState{At: now, Since: now.Add(-3*time.Hour - 20*time.Minute - 10500*time.Millisecond), Until: now.Add(39*time.Minute + 49500*time.Millisecond), Asked: time.Hour, By: by},
			want: "idle reclaim snoozed until 14:09 UTC by a request in namespace ml (asked for 1h, cut to 39m50s; idle rule notebooks allows up to 4h in a row, snoozed since 10:09 UTC)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := snoozeText(&tc.s, tc.rule, now); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestSnoozeRequest: a notebook idle since 20 minutes ago holds the only 2
// GPUs while training waits (as in TestWholeRoundIdle). Its owner asked to
// snooze its idle rule just before: rounds at 0, 40m, 1h and 1h41m requeue it
// only once the snooze has ended, after a controller restart too; a
// request left in another namespace names no job there and snoozes
// nothing.
func TestSnoozeRequest(t *testing.T) {
	const requeue = "scale ml/nb work 0: Steward requeues (idle) 1 allocation"
	for _, tc := range []struct {
		name      string
		namespace string // where the request is left
		duration  time.Duration
		restart   bool
		record    string // the notebook's steward_snooze after the round at 0
		// requeued is the first round (0, 40m, 1h or 1h41m) that requeues
		// the notebook; -1: none.
		requeued time.Duration
	}{
		{name: "2h keeps it until 1h40m", namespace: "ml", duration: 2 * time.Hour, requeued: 101 * time.Minute,
			record: "idle reclaim snoozed until 13:40 UTC by a request in namespace ml (asked for 2h; idle rule notebooks allows up to 8h)"},
		{name: "2h, controller restarted", namespace: "ml", duration: 2 * time.Hour, restart: true, requeued: 101 * time.Minute,
			record: "idle reclaim snoozed until 13:40 UTC"},
		{name: "30m ends before the round at 40m", namespace: "ml", duration: 30 * time.Minute, requeued: 40 * time.Minute,
			record: "idle reclaim snoozed until 12:10 UTC"},
		{name: "a request in another namespace snoozes nothing", namespace: "other", duration: 2 * time.Hour, requeued: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cl := f.cl()
			cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
			nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
			train := apiJob("ml", "train", "training", 40, 1, 2)
			cl.jobs["ml/nb"], cl.jobs["ml/train"] = nb, train
			gpus := []string{"n1-gpu0", "n1-gpu1"}
			cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", gpus, t0.Add(-time.Hour))}
			cl.stats["n1"] = gpuStats(gpus, 1)
			ev, sum := apiBlockedEval(train, 1, t0.Add(-time.Second))
			cl.evals, cl.summary["ml/train"] = []*api.Evaluation{ev}, sum
			if err := SubmitRequest(context.Background(), f, tc.namespace, "nb", Request{Action: "snooze", Duration: tc.duration, At: t0}); err != nil {
				t.Fatal(err)
			}
			r := newRoundRunner(t, f)
			sweep := func(at time.Duration) {
				r.clock = t0.Add(at)
				r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
			}
			requeued := time.Duration(-1)
			run := func(at time.Duration) {
				t.Helper()
				w, err := r.round(at)
				if err != nil {
					t.Fatalf("round at %v: %v", at, err)
				}
				if requeued < 0 && slices.ContainsFunc(w, func(c string) bool { return strings.HasPrefix(c, requeue) }) {
					requeued = at
				}
			}
			run(-20 * time.Minute) // holds training; carries the request out
			sweep(-20 * time.Minute)
			sweep(0)
			run(0)
			if got := f.vars["ml:nomad/jobs/nb"]["steward_snooze"]; !strings.HasPrefix(got, tc.record) || (tc.record == "") != (got == "") {
				t.Errorf("the notebook's record says steward_snooze %q, want %q", got, tc.record)
			}
			if tc.restart {
				r.restart()
			}
			run(40 * time.Minute) // (a restarted controller learns what to sweep)
			for _, at := range []time.Duration{50 * time.Minute, time.Hour} {
				sweep(at)
			}
			run(time.Hour)
			sweep(101 * time.Minute)
			run(101 * time.Minute)
			if requeued != tc.requeued {
				t.Errorf("the notebook was first requeued at %v, want %v (-1: never)", requeued, tc.requeued)
			}
		})
	}
}

// TestControlGroupNeverHeld: the example jobspecs' actions run in a group
// of their own without GPUs ("steward"). Steward neither counts it as GPU
// work nor holds it: a pause holds the GPU group alone, a resume brings
// that back, and the control group's allocation runs throughout, so that
// "resume" has somewhere to run.
func TestControlGroupNeverHeld(t *testing.T) {
	f := newFakeNomad()
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 1)}
	nb := apiJob("ml", "nb", "interactive", 60, 1, 1)
	control := &api.Task{Name: "actions", Driver: "raw_exec", Resources: &api.Resources{}}
	nb.TaskGroups = append(nb.TaskGroups, &api.TaskGroup{Name: ptr("steward"), Count: ptr(1), Tasks: []*api.Task{control}})
	cl.jobs["ml/nb"] = nb
	ctlAlloc := &api.AllocationListStub{ID: "a-control", Name: "nb.steward[0]", Namespace: "ml", JobID: "nb", TaskGroup: "steward", NodeID: "n1",
		ClientStatus: "running", DesiredStatus: "run", CreateTime: t0.Add(-time.Hour).UnixNano(),
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"actions": {}}},
		TaskStates:         map[string]*api.TaskState{"actions": {State: "running", StartedAt: t0.Add(-time.Hour)}}}
	cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", []string{"n1-gpu0"}, t0.Add(-time.Hour)), ctlAlloc}
	r := newRoundRunner(t, f)
	var writes []string
	run := func(at time.Duration) {
		t.Helper()
		w, err := r.round(at)
		if err != nil {
			t.Fatalf("round at %v: %v", at, err)
		}
		writes = append(writes, w...)
	}
	groupCount := func(g string) int {
		for _, tg := range cl.jobs["ml/nb"].TaskGroups {
			if *tg.Name == g {
				return *tg.Count
			}
		}
		return -1
	}
	for _, step := range []struct {
		action string
		work   int // the GPU group's count after it
	}{{"pause", 0}, {"resume", 1}} {
		if err := SubmitRequest(context.Background(), f, "ml", "nb", Request{Action: step.action, At: t0}); err != nil {
			t.Fatal(err)
		}
		for _, at := range []time.Duration{0, signalDelay, signalDelay + 2*time.Minute, 3 * time.Minute} {
			run(at)
		}
		if got := groupCount("work"); got != step.work {
			t.Errorf("after %s the GPU group's count is %d, want %d; writes %q", step.action, got, step.work, writes)
		}
		if got := groupCount("steward"); got != 1 || !slices.Contains(cl.allocs, ctlAlloc) {
			t.Errorf("after %s the control group's count is %d (want 1), its allocation running: %v", step.action, got, slices.Contains(cl.allocs, ctlAlloc))
		}
	}
	for _, w := range writes {
		if strings.Contains(w, "nb steward") || strings.Contains(w, "a-control") {
			t.Errorf("Steward acted on the control group: %q", w)
		}
	}
}

// TestIdleRequeueAlwaysRound: an idle rule in mode always with action
// requeue stops an idle notebook though nothing else waits. Its GPUs are
// free, but it is not resumed onto them (it would idle and be stopped
// again, in a loop): its record says it waits for its owner, and it runs
// again once its owner resumes it or snoozes the rule.
func TestIdleRequeueAlwaysRound(t *testing.T) {
	const requeue = "scale ml/nb work 0: Steward requeues (idle) 1 allocation"
	for _, tc := range []struct {
		name    string
		request *Request // the owner's request after the stop; nil: none
		then    *Request // a second request, a round later
		resumed bool     // the notebook is resumed in the round that reads it
		reason  string   // the notebook's steward_reason after that round
	}{
		{name: "nobody asks: it stays held", reason: "job requeued: it waits held for its owner to resume it (steward resume) or snooze the rule (steward snooze, up to 8h)"},
		{name: "its owner resumes it", request: &Request{Action: "resume", By: "ann"}, resumed: true,
			reason: "GPUs are free and tenant ml has no limit (2 GPUs with these 2): resuming 1 allocation"},
		{name: "its owner snoozes the rule", request: &Request{Action: "snooze", Duration: time.Hour}, resumed: true},
		{name: "a pause request leaves it held", request: &Request{Action: "pause"}, reason: "paused by"},
		{name: "paused, then resumed: runs again", request: &Request{Action: "pause"}, then: &Request{Action: "resume"}, resumed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cl := f.cl()
			cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
			nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
			cl.jobs["ml/nb"] = nb
			gpus := []string{"n1-gpu0", "n1-gpu1"}
			cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", gpus, t0.Add(-time.Hour))}
			cl.stats["n1"] = gpuStats(gpus, 1)
			r := newRoundRunner(t, f)
			p, diags := policy.ParseBytes("test.hcl", []byte(strings.Replace(testPolicyText, `after     = "15m"`,
				`after     = "15m"`+"\n  mode = \"always\"\n  action = \"requeue\"\n  max_snooze = \"8h\"", 1)))
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			r.c.pol, r.c.eng = p, engine.New(p)
			sweep := func(at time.Duration) {
				r.clock = t0.Add(at)
				r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
			}
			resumes := 0
			run := func(at time.Duration) []string {
				t.Helper()
				w, err := r.round(at)
				if err != nil {
					t.Fatalf("round at %v: %v", at, err)
				}
				for _, c := range w {
					if strings.HasPrefix(c, "scale ml/nb work 1") || strings.HasPrefix(c, "scale-ahead ml/nb work 1") {
						resumes++
					}
				}
				return w
			}
			run(-20 * time.Minute)
			sweep(-20 * time.Minute)
			sweep(0)
			if w := run(0); !slices.ContainsFunc(w, func(c string) bool { return strings.HasPrefix(c, requeue) }) {
				t.Fatalf("the idle notebook was not requeued: %q", w)
			}
			for _, at := range []time.Duration{time.Minute, 2 * time.Minute, 10 * time.Minute} {
				run(at)
			}
			if resumes != 0 || r.count("ml", "nb") != 0 {
				t.Fatalf("resumed %d times onto the GPUs it gave back (count %d), want it held", resumes, r.count("ml", "nb"))
			}
			if tc.request != nil {
				if err := SubmitRequest(context.Background(), f, "ml", "nb", *tc.request); err != nil {
					t.Fatal(err)
				}
			}
			run(11 * time.Minute)
			if tc.then != nil {
				if err := SubmitRequest(context.Background(), f, "ml", "nb", *tc.then); err != nil {
					t.Fatal(err)
				}
				run(12 * time.Minute)
			}
			if got := resumes > 0; got != tc.resumed {
				t.Errorf("resumed %v after the request, want %v", got, tc.resumed)
			}
			if got := f.vars["ml:nomad/jobs/nb"]["steward_reason"]; !strings.Contains(got, tc.reason) {
				t.Errorf("the notebook's record says %q, want it to contain %q", got, tc.reason)
			}
		})
	}
}

// TestBusyStretch: the longest stretch of busy samples since a run began;
// an idle sample breaks a stretch, and samples before the run do not count.
func TestBusyStretch(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	at := func(min int, util float64) engine.Sample {
		return engine.Sample{At: t0.Add(time.Duration(min) * time.Minute), Util: util}
	}
	for _, tc := range []struct {
		name    string
		samples []engine.Sample
		since   time.Time
		want    time.Duration
	}{
		{name: "no samples", want: 0},
		{name: "idle all along (keep-my-notebook scripted)", samples: []engine.Sample{at(0, 1), at(60, 2), at(120, 0), at(240, 3)}, want: 0},
		{name: "one busy sample is no while", samples: []engine.Sample{at(0, 1), at(5, 90), at(10, 1)}, want: 0},
		{name: "busy stretch", samples: []engine.Sample{at(0, 1), at(5, 90), at(15, 50), at(25, 10), at(30, 1)}, want: 20 * time.Minute},
		{name: "an idle sample breaks it; the longest counts", samples: []engine.Sample{at(0, 90), at(10, 90), at(11, 9), at(12, 90), at(14, 90)}, want: 10 * time.Minute},
		{name: "before the run began does not count", samples: []engine.Sample{at(0, 90), at(30, 90), at(40, 1)}, since: t0.Add(20 * time.Minute), want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := busyStretch(tc.samples, 10, tc.since); got != tc.want {
				t.Errorf("busyStretch = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestSnoozeRunEndsOnlyWhenBusy (issue 29): a run of snoozes ends once the
// job's GPUs were busy for its idle rule's after, never by wall-clock time
// alone. keep-my-notebook scripted to ask for 8h again an hour after each
// snooze ends, its GPUs idle all along, is refused; the same notebook
// busy for 20m in that hour gets a new run.
func TestSnoozeRunEndsOnlyWhenBusy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		util    int64 // the GPUs' utilisation between the snooze's end and the second request
		granted bool  // the second request starts a new run
	}{
		{name: "idle all along: asking again an hour after the end is refused", util: 1},
		{name: "busy for 20m after the end: a new run", util: 90, granted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cl := f.cl()
			cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
			nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
			cl.jobs["ml/nb"] = nb
			gpus := []string{"n1-gpu0", "n1-gpu1"}
			cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", gpus, t0.Add(-time.Hour))}
			cl.stats["n1"] = gpuStats(gpus, 1)
			ask := func(at time.Duration) {
				t.Helper()
				if err := SubmitRequest(context.Background(), f, "ml", "nb", Request{Action: "snooze", Duration: 8 * time.Hour, At: t0.Add(at)}); err != nil {
					t.Fatal(err)
				}
			}
			r := newRoundRunner(t, f)
			step := func(from, to time.Duration) {
				t.Helper()
				for at := from; at <= to; at += 5 * time.Minute {
					r.clock = t0.Add(at)
					r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
					if _, err := r.round(at); err != nil {
						t.Fatalf("round at %v: %v", at, err)
					}
				}
			}
			ask(0)
			step(0, 8*time.Hour) // the snooze, idle: it ends at 8h
			cl.stats["n1"] = gpuStats(gpus, tc.util)
			step(8*time.Hour+5*time.Minute, 8*time.Hour+25*time.Minute)
			cl.stats["n1"] = gpuStats(gpus, 1)
			step(8*time.Hour+30*time.Minute, 9*time.Hour)
			ask(9 * time.Hour)
			step(9*time.Hour+5*time.Minute, 9*time.Hour+5*time.Minute)
			st := r.c.states()[jobKey{"ml", "nb"}]
			granted := st != nil && st.Snooze != nil && st.Snooze.Until.After(r.clock)
			if granted != tc.granted {
				t.Errorf("second snooze granted %v, want %v (state %+v; record %q)", granted, tc.granted,
					st.Snooze, f.vars["ml:nomad/jobs/nb"]["steward_snooze"])
			}
		})
	}
}
