package forecast

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

const testPolicyHCL = `
tier "interactive" {
  priority = 60
}
tier "training" {
  priority = 40
}
tenant "a" {
  limit = 8
}
tenant "b" {
  limit = 16
}
preemption {
  min_runtime          = "10m"
  grace                = "2m"
  max_per_job_per_hour = 1
}
`

func testEngine(t *testing.T) *engine.Engine {
	t.Helper()
	p, diags := policy.ParseBytes("test.hcl", []byte(testPolicyHCL))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return engine.New(p)
}

func node(id string, gpus int) engine.Node {
	return engine.Node{ID: id, NodePool: "default", GPUs: gpus}
}

// running is an allocation of a job of tenant ns holding gpus GPUs on a
// node since ago before t0.
func running(ns, id, tier, nodeID string, gpus int, ago time.Duration, firstGPU int) engine.Alloc {
	a := engine.Alloc{ID: ns + "-" + id + "-" + nodeID, Job: engine.Job{Ref: engine.JobRef{Namespace: ns, ID: id}, Tier: tier,
		Priority: map[string]int{"interactive": 60, "training": 40}[tier]}, Group: "main", NodeID: nodeID, StartedAt: t0.Add(-ago)}
	for g := range gpus {
		a.GPUIDs = append(a.GPUIDs, nodeID+"-gpu-"+string(rune('a'+firstGPU+g)))
	}
	return a
}

func waiting(ns, id, tier string, count, gpus int, ago time.Duration) engine.Demand {
	return engine.Demand{Job: engine.Job{Ref: engine.JobRef{Namespace: ns, ID: id}, Tier: tier, Gang: count > 1,
		Priority: map[string]int{"interactive": 60, "training": 40}[tier]},
		Group: "main", GPUsPerAlloc: gpus, Count: count, Since: t0.Add(-ago), Held: true}
}

func ref(ns, id string) engine.JobRef { return engine.JobRef{Namespace: ns, ID: id} }

func forecastOf(t *testing.T, snap *engine.Snapshot, est map[engine.JobRef]Estimate) ([]Entry, map[engine.JobRef][]string, *Result) {
	t.Helper()
	e := testEngine(t)
	plan := e.Plan(snap, t0)
	in := Input{Engine: e, Snapshot: snap, Now: t0, Estimates: est}
	q := Queue(e.Policy(), snap, plan)
	res := Run(context.Background(), in, Options{Seed: 1})
	return q, Hints(in, q, plan, res, DefaultHintPlans), res
}

// TestStories are the queue's stories: positions, the blocking rule, the
// unblock hints and the forecast, one named case each.
func TestStories(t *testing.T) {
	hour := Estimate{Expected: time.Hour, Source: FromExpected}
	tests := []struct {
		name  string
		snap  engine.Snapshot
		est   map[engine.JobRef]Estimate
		check func(t *testing.T, q []Entry, hints map[engine.JobRef][]string, res *Result)
	}{
		{
			name: "smaller ask starts now",
			snap: engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
				Allocs:  []engine.Alloc{running("a", "big", "training", "n1", 6, 2*time.Hour, 0)},
				Waiting: []engine.Demand{waiting("b", "wants4", "training", 1, 4, time.Minute)}},
			est: map[engine.JobRef]Estimate{ref("a", "big"): {Expected: 150 * time.Minute}},
			check: func(t *testing.T, q []Entry, hints map[engine.JobRef][]string, res *Result) {
				wantEntry(t, q, ref("b", "wants4"), 1, 1, engine.RuleCapacity)
				wantHint(t, hints[ref("b", "wants4")], "starts now if it asks for 2 GPUs instead of 4")
				wantHint(t, hints[ref("b", "wants4")], "starts when a/big ends")
				f := res.Jobs[ref("b", "wants4")]
				// a/big said 2h30m and ran 2h: about half an hour left.
				if f == nil || f.P50.Before(t0.Add(10*time.Minute)) || f.P50.After(t0.Add(time.Hour)) || f.P90.Before(f.P50) {
					t.Fatalf("forecast %+v, want P50 about half an hour from now and P90 no earlier", f)
				}
			},
		},
		{
			name: "waits for a victim at the eviction cap",
			snap: engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
				Allocs: []engine.Alloc{func() engine.Alloc {
					a := running("a", "capped", "training", "n1", 8, 2*time.Hour, 0)
					a.Job.Preemptions = []time.Time{t0.Add(-40 * time.Minute)}
					return a
				}()},
				Waiting: []engine.Demand{waiting("b", "nb", "interactive", 1, 4, time.Minute)}},
			est: map[engine.JobRef]Estimate{ref("a", "capped"): {Expected: 10 * time.Hour}},
			check: func(t *testing.T, q []Entry, hints map[engine.JobRef][]string, res *Result) {
				wantEntry(t, q, ref("b", "nb"), 1, 1, engine.RuleCapacity)
				wantHint(t, hints[ref("b", "nb")], "starts when a/capped ends, or at 12:20 UTC when the eviction cap (1 preemptions an hour) no longer spares it")
				f := res.Jobs[ref("b", "nb")]
				// Preempted at 12:20 with 2m of grace: it starts at about 12:22.
				if f == nil || f.P50.Before(t0.Add(20*time.Minute)) || f.P50.After(t0.Add(30*time.Minute)) {
					t.Fatalf("forecast %+v, want about 12:22 (the cap passes at 12:20, then 2m of grace)", f)
				}
			},
		},
		{
			// min_runtime is a preference among victims, not a guard:
			// young work is preempted when nothing older frees enough, so
			// no job waits for a victim's min_runtime (and no hint says
			// so). The guard that makes work wait is the eviction cap
			// (the story above).
			name: "min_runtime of a victim: no wait",
			snap: engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
				Allocs:  []engine.Alloc{running("a", "young", "training", "n1", 8, 2*time.Minute, 0)},
				Waiting: []engine.Demand{waiting("b", "nb", "interactive", 1, 4, time.Minute)}},
			est: map[engine.JobRef]Estimate{ref("a", "young"): {Expected: 10 * time.Hour}},
			check: func(t *testing.T, q []Entry, hints map[engine.JobRef][]string, res *Result) {
				for _, e := range q {
					if e.Job == ref("b", "nb") && e.Rule != engine.RuleDraining {
						t.Fatalf("b/nb waits with rule %s (%s): want it to preempt a/young at once", e.Rule, e.Reason)
					}
				}
				if f := res.Jobs[ref("b", "nb")]; f == nil || f.P50.After(t0.Add(5*time.Minute)) {
					t.Fatalf("forecast %+v: want a start within the 2m grace", f)
				}
			},
		},
		{
			name: "model no node has: no forecast",
			snap: engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
				Waiting: []engine.Demand{func() engine.Demand {
					d := waiting("b", "b200", "training", 1, 1, time.Minute)
					d.Devices, d.Asks = []string{"nvidia/gpu/B200"}, "nvidia/gpu/B200"
					return d
				}()}},
			check: func(t *testing.T, q []Entry, hints map[engine.JobRef][]string, res *Result) {
				wantEntry(t, q, ref("b", "b200"), 1, 1, engine.RuleCapacity)
				wantHint(t, hints[ref("b", "b200")], "no client node has nvidia/gpu/B200: it cannot start until one joins (no forecast)")
				if f := res.Jobs[ref("b", "b200")]; f == nil || !f.P50.IsZero() || !f.P90.IsZero() || f.Started != 0 {
					t.Fatalf("forecast %+v, want none", f)
				}
			},
		},
		{
			name: "an ask over its tenant's limit never starts as it is",
			snap: engine.Snapshot{Nodes: []engine.Node{node("n1", 16)},
				Waiting: []engine.Demand{waiting("a", "huge", "training", 1, 10, time.Minute)}},
			check: func(t *testing.T, q []Entry, hints map[engine.JobRef][]string, res *Result) {
				wantEntry(t, q, ref("a", "huge"), 1, 1, engine.RuleLimit)
				wantHint(t, hints[ref("a", "huge")], "never starts as it is: an allocation asks for 10 GPUs, more than tenant a's limit of 8; it could start if it asked for at most 8 GPUs")
				if f := res.Jobs[ref("a", "huge")]; f == nil || !f.P50.IsZero() {
					t.Fatalf("forecast %+v, want none", f)
				}
			},
		},
		{
			name: "gang waits for all",
			snap: engine.Snapshot{Nodes: []engine.Node{node("n1", 4), node("n2", 4)},
				Allocs: []engine.Alloc{running("a", "short", "training", "n1", 4, time.Hour, 0),
					running("a", "long", "training", "n2", 4, time.Hour, 0)},
				Waiting: []engine.Demand{waiting("b", "gang", "training", 2, 4, time.Minute)}},
			est: map[engine.JobRef]Estimate{ref("a", "short"): {Expected: 70 * time.Minute}, ref("a", "long"): {Expected: 100 * time.Minute}},
			check: func(t *testing.T, q []Entry, hints map[engine.JobRef][]string, res *Result) {
				wantEntry(t, q, ref("b", "gang"), 1, 1, engine.RuleCapacity)
				f := res.Jobs[ref("b", "gang")]
				// Both allocations at once: when a/long ends (about 40m
				// left), not when a/short does (about 10m).
				if f == nil || f.P50.Before(t0.Add(25*time.Minute)) {
					t.Fatalf("forecast %+v, want about 40m from now (all of the gang at once)", f)
				}
				wantHint(t, hints[ref("b", "gang")], "starts when a/long ends")
			},
		},
		{
			name: "positions in the cluster and in the tenant",
			snap: engine.Snapshot{Nodes: []engine.Node{node("n1", 8)},
				Allocs: []engine.Alloc{running("a", "big", "training", "n1", 8, 2*time.Hour, 0)},
				Waiting: []engine.Demand{
					waiting("b", "old", "training", 1, 2, 30*time.Minute),
					waiting("a", "mine", "training", 1, 2, 20*time.Minute),
					waiting("b", "new", "training", 1, 2, 10*time.Minute),
				}},
			est: map[engine.JobRef]Estimate{ref("a", "big"): hour},
			check: func(t *testing.T, q []Entry, hints map[engine.JobRef][]string, res *Result) {
				var got []string
				for _, e := range q {
					got = append(got, e.Job.String())
				}
				// One tier, no reserves: the tenant with the smaller
				// share of borrowed GPUs first (b holds none, a all 8),
				// then the longest waiting.
				want := []string{"b/old", "b/new", "a/mine"}
				if !slices.Equal(got, want) {
					t.Fatalf("queue %v, want %v", got, want)
				}
				wantEntry(t, q, ref("b", "new"), 2, 2, engine.RuleCapacity)
				wantEntry(t, q, ref("a", "mine"), 3, 1, engine.RuleLimit)
				wantHint(t, hints[ref("a", "mine")], "starts when tenant a holds at most 6 GPUs (it holds 8, limit 8)")
				if q[0].Of != 3 || q[1].TenantOf != 2 || q[2].TenantOf != 1 {
					t.Fatalf("lengths %d, %d, %d; want 3 in the cluster, 2 in tenant b, 1 in a", q[0].Of, q[1].TenantOf, q[2].TenantOf)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, hints, res := forecastOf(t, &tc.snap, tc.est)
			tc.check(t, q, hints, res)
		})
	}
}

func wantEntry(t *testing.T, q []Entry, job engine.JobRef, pos, tenantPos int, rule engine.Rule) {
	t.Helper()
	for _, e := range q {
		if e.Job == job {
			if e.Position != pos || e.TenantPosition != tenantPos || e.Rule != rule {
				t.Fatalf("%s: position %d, in tenant %d, rule %s (%s); want %d, %d, %s", job, e.Position, e.TenantPosition, e.Rule, e.Reason, pos, tenantPos, rule)
			}
			return
		}
	}
	t.Fatalf("%s is not in the queue %+v", job, q)
}

func wantHint(t *testing.T, hints []string, prefix string) {
	t.Helper()
	for _, h := range hints {
		if strings.HasPrefix(h, prefix) {
			return
		}
	}
	t.Fatalf("no hint starting %q in %q", prefix, hints)
}
