package sim

import (
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// tinyPolicy is the policy of the hand-checked traces: two preemptible
// tiers, guards at their defaults, no promotion.
const tinyPolicy = `
tier "interactive" { priority = 60 }
tier "training"    { priority = 40 }
preemption {
  min_runtime = "10m"
  grace       = "2m"
  max_per_job_per_hour = 2
  promote {
    after_preemptions = 0
    after_wait        = "0s"
    boost             = 0
  }
}
`

func mustPolicy(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, diags := policy.ParseBytes("test.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatalf("policy: %s", diags.Error())
	}
	return p
}

func mustTrace(t *testing.T, csv string) *Trace {
	t.Helper()
	tr, err := ReadTrace(strings.NewReader(strings.TrimSpace(csv)+"\n"), "test")
	if err != nil {
		t.Fatalf("trace: %v", err)
	}
	return tr
}

// jobOutcome is what a hand-checked trace asserts about one job, in
// minutes of virtual time.
type jobOutcome struct {
	delay       float64 // first start minus submission
	end         float64 // when it completed
	preemptions int
}

// outcomes runs one policy and returns per-job outcomes.
func outcomes(t *testing.T, pol *policy.Policy, csv string, nodes int, cost time.Duration, kind PolicyKind) (map[string]jobOutcome, *Result) {
	t.Helper()
	tr := mustTrace(t, csv)
	if _, err := Derive(tr, DeriveOptions{Seed: 1, Policy: pol, Nodes: nodes, GPUsPerNode: 8}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Policy: pol, Nodes: nodes, GPUsPerNode: 8, CheckpointEvery: 20 * time.Minute, CheckpointCost: cost}
	s, err := newSimulator(tr.Jobs, cfg, kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	r := s.m.result(s)
	if r.EngineSkipped != 0 {
		t.Errorf("%s: the engine skipped %d snapshot items", kind, r.EngineSkipped)
	}
	out := map[string]jobOutcome{}
	for i := range s.jobs {
		j := &s.jobs[i]
		o := jobOutcome{delay: -1, end: -1, preemptions: j.preemptions}
		if j.firstStart >= 0 {
			o.delay = (j.firstStart - j.spec.Submit).Minutes()
		}
		if j.state == done {
			o.end = j.endedAt.Minutes()
		}
		out[j.spec.ID] = o
	}
	return out, r
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// Each case is small enough to follow by hand on 8-GPU nodes; the comments
// give the reasoning behind every number.
func TestHandCheckedTraces(t *testing.T) {
	// A checkpoint signal goes out a signal delay after the plan, and the
	// grace runs from it, as the controller sends it.
	sig := nomadmodel.SignalDelay.Minutes()
	tests := []struct {
		name   string
		policy string
		nodes  int
		cost   time.Duration // Config.CheckpointCost
		trace  string
		want   map[PolicyKind]map[string]jobOutcome
		check  func(t *testing.T, kind PolicyKind, r *Result)
	}{
		{
			// A 16-GPU training gang fills both nodes; at 30m an 8-GPU
			// interactive job arrives.
			name: "interactive beats a training gang", policy: tinyPolicy, nodes: 2,
			trace: `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
T1,0,8,2,7200,ml,training,never
I1,1800,8,1,3600,ml,interactive,never`,
			want: map[PolicyKind]map[string]jobOutcome{
				// FIFO: I1 waits for T1 to finish at 120m: 90m.
				FIFO: {"T1": {0, 120, 0}, "I1": {90, 180, 0}},
				// Nomad: 60 ≥ 40+10, so I1 stops the whole gang at 30m.
				// T1 loses 30m mod 20m = 10m of 16 GPUs, restarts from
				// 20m when I1 ends at 90m, and ends 100m later.
				Strict: {"T1": {0, 190, 1}, "I1": {0, 90, 0}},
				// Steward: T1 is past min_runtime, gets the signal at 30m
				// and 2m of grace; its checkpoint holds the 30m done at
				// the signal (the 2m after it are lost); I1 starts at
				// 32m, ends at 92m, then T1 resumes for its last 90m (each
				// a signal delay later: the grace runs from the signal).
				Steward: {"T1": {0, 182, 1}, "I1": {2 + sig, 92 + sig, 0}},
			},
			check: func(t *testing.T, kind PolicyKind, r *Result) {
				lost := map[PolicyKind]float64{FIFO: 0, Strict: 16 * 10.0 / 60, Steward: 16 * 2.0 / 60}[kind]
				if !near(r.LostGPUHours, lost) {
					t.Errorf("lost %.4f GPU-hours, want %.4f", r.LostGPUHours, lost)
				}
			},
		},
		{
			// Tenant b borrows tenant a's reservation with a 16-GPU gang;
			// at 1h a needs 8 GPUs for 1h. One tier: no priority can help.
			name: "reservation reclaim", nodes: 2,
			policy: tinyPolicy + `
tenant "a" { reserve = 8 }
tenant "b" { reserve = 8 }`,
			trace: `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
B1,0,8,2,14400,b,training,never
A1,3600,8,1,3600,a,training,never`,
			want: map[PolicyKind]map[string]jobOutcome{
				// Nobody preempts at equal priority: A1 waits until 240m.
				FIFO:   {"B1": {0, 240, 0}, "A1": {180, 300, 0}},
				Strict: {"B1": {0, 240, 0}, "A1": {180, 300, 0}},
				// Steward reclaims: B1 (over its reservation) gets the
				// signal at 60m and 2m of grace, A1 starts at 62m and ends
				// at 122m, B1 resumes then with 60m saved and ends 180m
				// later, at 302m (a signal delay later each, and 60m1s
				// saved).
				Steward: {"B1": {0, 302, 1}, "A1": {2 + sig, 122 + sig, 0}},
			},
			check: func(t *testing.T, kind PolicyKind, r *Result) {
				// FIFO and strict: a waits 3h under its reservation, 8
				// GPUs short. Steward: a waits 2m (8 short), then b waits
				// 60m holding nothing (8 short of its reservation).
				want := map[PolicyKind][2]float64{FIFO: {3, 24}, Strict: {3, 24},
					Steward: {(2 + sig + 60) / 60.0, 8 * (2 + sig + 60) / 60.0}}[kind]
				if !near(r.ReserveWaitHours, want[0]) || !near(r.ReserveShortGPUHours, want[1]) {
					t.Errorf("reservation wait %.4f h, %.4f GPU-h; want %.4f, %.4f",
						r.ReserveWaitHours, r.ReserveShortGPUHours, want[0], want[1])
				}
			},
		},
		{
			// A notebook holds the only node: busy 30m, then idle for the
			// rest of its 4h. Training arrives at 1h. (With action
			// "requeue" the notebook, a higher tier, would take the node
			// back from the training job as soon as it held it.)
			name: "idle notebook gives way under pressure", nodes: 1,
			policy: tinyPolicy + `
idle "nb" {
  tiers = ["interactive"]
  threshold = 10
  after = "15m"
  mode = "pressure"
  action = "stop"
}`,
			trace: `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
N1,0,8,1,14400,ml,interactive,1800
T1,3600,8,1,3600,ml,training,never`,
			want: map[PolicyKind]map[string]jobOutcome{
				// Training cannot preempt interactive work: T1 waits 3h.
				FIFO:   {"N1": {0, 240, 0}, "T1": {180, 300, 0}},
				Strict: {"N1": {0, 240, 0}, "T1": {180, 300, 0}},
				// N1 has been idle 30m ≥ 15m when T1 arrives: it is
				// stopped at once (no grace) and T1 runs 60m–120m.
				Steward: {"N1": {0, -1, 0}, "T1": {0, 120, 0}},
			},
			check: func(t *testing.T, kind PolicyKind, r *Result) {
				// Reclaimed: the 3h of idling N1 still had, on 8 GPUs.
				want := map[PolicyKind]float64{Steward: 24}[kind]
				if !near(r.IdleReclaimedGPUHours, want) {
					t.Errorf("reclaimed %.4f GPU-hours, want %.4f", r.IdleReclaimedGPUHours, want)
				}
				if stopped := map[PolicyKind]int{Steward: 1}[kind]; r.StoppedByIdleRule != stopped {
					t.Errorf("%d jobs stopped by an idle rule, want %d", r.StoppedByIdleRule, stopped)
				}
				// The window is [0, 1h]: all 8 GPUs allocated, busy for
				// N1's first 30m only.
				if !near(r.UtilAllocated, 1) || !near(r.UtilBusy, 0.5) {
					t.Errorf("utilisation %.4f allocated, %.4f busy; want 1, 0.5", r.UtilAllocated, r.UtilBusy)
				}
			},
		},
		{
			// Strict preemption needs a 10-point gap; Steward's tiers do
			// not. The engine spares work younger than min_runtime only
			// while something else frees enough: here nothing does.
			name: "priority gap and min_runtime", nodes: 1,
			policy: `
tier "interactive" { priority = 45 }
tier "training"    { priority = 40 }
preemption {
  min_runtime = "10m"
  grace       = "0s"
  promote {
    after_preemptions = 0
    after_wait        = "0s"
  }
}`,
			trace: `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
T1,0,8,1,3600,ml,training,never
I1,300,8,1,600,ml,interactive,never`,
			want: map[PolicyKind]map[string]jobOutcome{
				FIFO: {"T1": {0, 60, 0}, "I1": {55, 70, 0}},
				// 45 < 40+10: Nomad will not preempt.
				Strict: {"T1": {0, 60, 0}, "I1": {55, 70, 0}},
				// T1 is 5m old, but the only victim: it is stopped at
				// once (grace 0s: no checkpoint signal), losing its 5m,
				// and restarts from 0 when I1 ends at 15m.
				Steward: {"T1": {0, 75, 1}, "I1": {0, 15, 0}},
			},
			check: func(t *testing.T, kind PolicyKind, r *Result) {
				lost := map[PolicyKind]float64{Steward: 8 * 5.0 / 60}[kind]
				if !near(r.LostGPUHours, lost) {
					t.Errorf("lost %.4f GPU-hours, want %.4f", r.LostGPUHours, lost)
				}
			},
		},
		{
			// The first case with checkpoints that take 1m to write and
			// 1m to load.
			name: "checkpoint write and load cost GPU time", policy: tinyPolicy, nodes: 2, cost: time.Minute,
			trace: `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
T1,0,8,2,7200,ml,training,never
I1,1800,8,1,3600,ml,interactive,never`,
			want: map[PolicyKind]map[string]jobOutcome{
				FIFO: {"T1": {0, 120, 0}, "I1": {90, 180, 0}},
				// Nomad: T1 keeps 20m, restarts at 90m, loads for 1m and
				// has 100m to go: it ends at 191m.
				Strict: {"T1": {0, 191, 1}, "I1": {0, 90, 0}},
				// Steward: the 2m grace holds the 1m write; the checkpoint
				// has the 30m done at the signal. T1 restarts at 92m,
				// loads for 1m and runs its last 90m: 183m.
				Steward: {"T1": {0, 183, 1}, "I1": {2 + sig, 92 + sig, 0}},
			},
			check: func(t *testing.T, kind PolicyKind, r *Result) {
				// 16 GPUs: strict loses 10m of work and the 1m load;
				// Steward the 2m grace and the 1m load.
				lost := map[PolicyKind]float64{FIFO: 0, Strict: 16 * 11.0 / 60, Steward: 16 * 3.0 / 60}[kind]
				if !near(r.LostGPUHours, lost) {
					t.Errorf("lost %.4f GPU-hours, want %.4f", r.LostGPUHours, lost)
				}
			},
		},
		{
			// A checkpoint that takes 3m does not fit the 2m grace: the
			// preemption loses what strict's does, plus the grace.
			name: "a grace shorter than the checkpoint write loses the work", policy: tinyPolicy, nodes: 2, cost: 3 * time.Minute,
			trace: `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
T1,0,8,2,7200,ml,training,never
I1,1800,8,1,3600,ml,interactive,never`,
			want: map[PolicyKind]map[string]jobOutcome{
				// T1 falls back to its checkpoint at 20m: 100m to go from
				// 92m, plus a 3m load.
				Steward: {"T1": {0, 195 + sig, 1}, "I1": {2 + sig, 92 + sig, 0}},
			},
			check: func(t *testing.T, kind PolicyKind, r *Result) {
				if kind != Steward {
					return
				}
				// 12m1s of work (20m to 32m1s) and the 3m load, on 16 GPUs.
				if lost := 16 * (15 + sig) / 60; !near(r.LostGPUHours, lost) {
					t.Errorf("lost %.4f GPU-hours, want %.4f", r.LostGPUHours, lost)
				}
			},
		},
		{
			// Tenant a may hold 8 GPUs; its notebook I0 holds them for 2h
			// when a second notebook comes at 1m. Only Steward has limits:
			// I1 waits for I0, held by the rule limit, which the long
			// waits say.
			name: "a long wait is counted with the rule that held it", nodes: 2,
			policy: tinyPolicy + `
tenant "a" { limit = 8 }`,
			trace: `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
I0,0,8,1,7200,a,interactive,never
I1,60,8,1,3600,a,interactive,never`,
			check: func(t *testing.T, kind PolicyKind, r *Result) {
				want := map[string]int(nil)
				if kind == Steward {
					want = map[string]int{"limit": 1}
				}
				if !maps.Equal(r.HighPriorityLongWaits, want) {
					t.Errorf("long waits %v, want %v", r.HighPriorityLongWaits, want)
				}
				// Its whole wait was its own limit's: none of it is left
				// net of that, and its hours are the limit's.
				if kind == Steward {
					if d, net := r.HighPriorityDelay.P99, r.HighPriorityDelayNetOwnLimit.P99; !near(d, 119) || net != 0 {
						t.Errorf("delay p99 %.2f min, net of own limit %.2f; want 119 and 0", d, net)
					}
					if h := r.HighPriorityLongWaitHours; len(h) != 1 || !near(h["limit"], 119.0/60) {
						t.Errorf("long-wait hours by rule %v, want limit %.3f", h, 119.0/60)
					}
				} else if r.HighPriorityDelayNetOwnLimit != r.HighPriorityDelay {
					t.Errorf("net of own limit %+v, want the delay %+v (no limits)", r.HighPriorityDelayNetOwnLimit, r.HighPriorityDelay)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, kind := range AllPolicies {
				got, r := outcomes(t, mustPolicy(t, tc.policy), tc.trace, tc.nodes, tc.cost, kind)
				for id, want := range tc.want[kind] {
					g := got[id]
					if !near(g.delay, want.delay) || !near(g.end, want.end) || g.preemptions != want.preemptions {
						t.Errorf("%s: job %s: delay %.2fm, ended %.2fm, %d preemptions; want %.2fm, %.2fm, %d",
							kind, id, g.delay, g.end, g.preemptions, want.delay, want.end, want.preemptions)
					}
				}
				if tc.check != nil {
					t.Run(string(kind), func(t *testing.T) { tc.check(t, kind, r) })
				}
			}
		})
	}
}

// The same input gives the same figures, run after run.
func TestSimulateIsDeterministic(t *testing.T) {
	pol := mustPolicy(t, tinyPolicy+`
tenant "a" { reserve = 8 }
idle "nb" {
  tiers = ["interactive"]
  after = "15m"
}`)
	var csv strings.Builder
	csv.WriteString("job,submit,gpus,allocs,run_time,user\n")
	for i := range 300 {
		csv.WriteString(strings.Join([]string{"j" + itoa(i), itoa(i * 97 % 20000), itoa(1 << (i % 4)),
			itoa(1 + i%3/2), itoa(600 + i*7919%20000), "u" + itoa(i%7)}, ",") + "\n")
	}
	run := func() []*Result {
		tr := mustTrace(t, csv.String())
		rep, err := Compare(tr, Options{Config: Config{Policy: pol, Nodes: 4, GPUsPerNode: 8,
			CheckpointEvery: DefaultCheckpointEvery}, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			r.WallSeconds = 0
		}
		return rep.Results
	}
	a, b := run(), run()
	var ja, jb strings.Builder
	if err := WriteJSON(&ja, []*Report{{Results: a}}); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&jb, []*Report{{Results: b}}); err != nil {
		t.Fatal(err)
	}
	if ja.String() != jb.String() {
		t.Fatal("two runs of the same input differ")
	}
	for _, r := range a {
		if r.Completed+r.StoppedByIdleRule+r.NeverStarted != r.Jobs {
			t.Errorf("%s: %d completed + %d stopped + %d never started != %d jobs", r.Policy,
				r.Completed, r.StoppedByIdleRule, r.NeverStarted, r.Jobs)
		}
		if r.EngineSkipped != 0 {
			t.Errorf("%s: engine skipped %d items", r.Policy, r.EngineSkipped)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// With -checkpoint-done a job says when its signalled checkpoint is
// written, and is stopped then (the driver notices within doneNotice)
// rather than at the end of its grace: the beneficiary starts sooner and
// less work after the signal is lost.
func TestCheckpointDoneEndsTheGrace(t *testing.T) {
	const trace = `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
T1,0,8,2,7200,ml,training,never
I1,1800,8,1,3600,ml,interactive,never`
	for _, tt := range []struct {
		name      string
		done      bool
		notice    time.Duration
		wantDelay time.Duration // I1's
		wantLost  float64       // GPU-hours: the work after the signal, and T1's load on restart
	}{
		// T1 gets the signal at 30m1s (the plan at 30m, the signal a
		// signal delay later), 2m of grace; I1 starts at 32m1s.
		{"runs out its grace", false, 0, nomadmodel.SignalDelay + 2*time.Minute, 16 * (2.0 + 1.0) / 60},
		// Its checkpoint takes 1m; it says so, noticed within the
		// contract's 2s (its file), or steward-exec's event's 10s.
		{"says its checkpoint is written", true, 0, nomadmodel.SignalDelay + time.Minute + DefaultDoneNotice, 16 * (62.0/60 + 1.0) / 60},
		{"says so, noticed within 10s", true, 10 * time.Second, nomadmodel.SignalDelay + time.Minute + 10*time.Second, 16 * (70.0/60 + 1.0) / 60},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pol := mustPolicy(t, tinyPolicy)
			tr := mustTrace(t, trace)
			if _, err := Derive(tr, DeriveOptions{Seed: 1, Policy: pol, Nodes: 2, GPUsPerNode: 8}); err != nil {
				t.Fatal(err)
			}
			s, err := newSimulator(tr.Jobs, Config{Policy: pol, Nodes: 2, GPUsPerNode: 8, CheckpointEvery: 20 * time.Minute,
				CheckpointCost: time.Minute, CheckpointDone: tt.done, DoneNotice: tt.notice}, Steward)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.run(); err != nil {
				t.Fatal(err)
			}
			i1 := &s.jobs[s.byRef[engine.JobRef{Namespace: "ml", ID: "I1"}]]
			if got := i1.firstStart - i1.spec.Submit; got != tt.wantDelay {
				t.Errorf("I1 waited %s, want %s", got, tt.wantDelay)
			}
			if r := s.m.result(s); !near(r.LostGPUHours, tt.wantLost) {
				t.Errorf("lost %.4f GPU-hours, want %.4f", r.LostGPUHours, tt.wantLost)
			}
		})
	}
}

// A new job Nomad cannot place is planned for at once, as the controller
// reacts to Nomad's blocked evaluation, not at the end of the plan
// interval: urgent work whose victims get no grace starts the moment it
// arrives. Other triggers still wait for the interval.
func TestPlanWhenNomadCannotPlace(t *testing.T) {
	pol := mustPolicy(t, tinyPolicy+`
tier "inference" {
  priority      = 90
  preempt_grace = "0s"
}`)
	// T1 fills the node at 0; T2 arrives at 10m and does not fit: a plan
	// (it waits). I1 arrives 10 s later, within the plan interval, and
	// needs T1's GPUs.
	tr := mustTrace(t, `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
T1,0,8,1,7200,ml,training,never
T2,600,8,1,600,ml,training,never
I1,610,8,1,600,ml,inference,never`)
	if _, err := Derive(tr, DeriveOptions{Seed: 1, Policy: pol, Nodes: 1, GPUsPerNode: 8}); err != nil {
		t.Fatal(err)
	}
	s, err := newSimulator(tr.Jobs, Config{Policy: pol, Nodes: 1, GPUsPerNode: 8, CheckpointEvery: 20 * time.Minute,
		PlanInterval: DefaultPlanInterval}, Steward)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	i1 := &s.jobs[s.byRef[engine.JobRef{Namespace: "ml", ID: "I1"}]]
	if got := i1.firstStart - i1.spec.Submit; got != 0 {
		t.Errorf("I1 waited %s for a plan, want none", got)
	}
}
