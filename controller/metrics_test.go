package controller

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

const metricsPolicyText = `
tier "inference" {
  priority    = 90
  preemptible = false
}
tier "training" {
  priority    = 40
  preemptible = true
}
tenant "prod" {
  reserve = 4
  limit   = 8
}
tenant "ml" {
  reserve = 2
}
preemption {
  max_per_job_per_hour = 3
}
`

func metricsPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, diags := policy.ParseBytes("metrics.hcl", []byte(metricsPolicyText))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	return p
}

// demand is a waiting group "work" of a job whose tier meta says tier.
func demand(ns, id, tier string, gpus int, since time.Time, requeued bool) engine.Demand {
	return engine.Demand{Job: engine.Job{Ref: engine.JobRef{Namespace: ns, ID: id}, Tier: tier}, Group: "work",
		GPUsPerAlloc: gpus, Count: 1, Since: since, Held: requeued, Requeued: requeued}
}

// TestTenantMetrics sets the leader's gauges from one fake round's plan
// and snapshot: each case is a tenant's figures and what waits.
func TestTenantMetrics(t *testing.T) {
	pol := metricsPolicy(t)
	type series struct {
		name   string
		labels []string
		want   float64
	}
	cases := []struct {
		name    string
		tenants []engine.TenantUsage
		waiting []engine.Demand
		want    []series
		absent  []string // gauges with no series at all
	}{{
		name:    "a tenant under its reserve with work waiting lacks the smaller of its gap and its demand",
		tenants: []engine.TenantUsage{{Tenant: "prod", Reserve: 4, Limit: 8, InUse: 1, Waiting: 2}},
		waiting: []engine.Demand{demand("prod", "serve", "inference", 2, t0.Add(-90*time.Second), false)},
		want: []series{
			{"steward_reserve_shortfall_gpus", []string{"prod"}, 2},
			{"steward_gpus_limit", []string{"prod"}, 8},
			{"steward_gpus_borrowed", []string{"prod"}, 0},
			{"steward_waiting_groups", []string{"capacity", "prod", "inference"}, 1},
			{"steward_oldest_wait_seconds", []string{"prod", "inference"}, 90},
		},
	}, {
		name:    "a tenant beyond its reserve borrows, and its waiting work is no shortfall",
		tenants: []engine.TenantUsage{{Tenant: "ml", Reserve: 2, Limit: policy.Unlimited, InUse: 6, Waiting: 4}},
		waiting: []engine.Demand{
			demand("ml", "a", "training", 4, t0.Add(-10*time.Minute), false),
			demand("ml", "b", "training", 4, t0.Add(-time.Minute), false),
		},
		want: []series{
			{"steward_gpus_borrowed", []string{"ml"}, 4},
			{"steward_reserve_shortfall_gpus", []string{"ml"}, 0},
			{"steward_waiting_groups", []string{"capacity", "ml", "training"}, 2},
			{"steward_oldest_wait_seconds", []string{"ml", "training"}, 600},
		},
		absent: []string{"steward_gpus_limit"}, // unlimited: no series
	}, {
		name:    "work requeued after an idle release waits but is not owed the reserve",
		tenants: []engine.TenantUsage{{Tenant: "ml", Reserve: 2, Limit: policy.Unlimited, InUse: 0, Waiting: 2}},
		waiting: []engine.Demand{demand("ml", "nb", "training", 2, t0.Add(-time.Hour), true)},
		want: []series{
			{"steward_reserve_shortfall_gpus", []string{"ml"}, 0},
			{"steward_waiting_groups", []string{"capacity", "ml", "training"}, 1},
			{"steward_oldest_wait_seconds", []string{"ml", "training"}, 3600},
		},
	}, {
		// The label is the tier the job runs as, never what its meta says:
		// a tenant cannot add series (or claim a serving tier's alert).
		name:    "a tier the policy lacks is labelled with the tier the job runs as",
		tenants: []engine.TenantUsage{{Tenant: "ml", Reserve: 2, Limit: policy.Unlimited, InUse: 2, Waiting: 1}},
		waiting: []engine.Demand{demand("ml", "x", "made-up", 1, t0.Add(-time.Second), false)},
		want: []series{
			{"steward_waiting_groups", []string{"capacity", "ml", "training"}, 1},
			{"steward_reserve_shortfall_gpus", []string{"ml"}, 0},
		},
	}, {
		name:    "groups of one tenant and tier held by two rules: a series each, the oldest wait over both",
		tenants: []engine.TenantUsage{{Tenant: "ml", Reserve: 2, Limit: 4, InUse: 4, Waiting: 3}},
		waiting: []engine.Demand{
			demand("ml", "a", "training", 1, t0.Add(-time.Minute), false),
			withGroup(demand("ml", "b", "training", 2, t0.Add(-5*time.Minute), false), "limit"),
		},
		want: []series{
			{"steward_waiting_groups", []string{"capacity", "ml", "training"}, 1},
			{"steward_waiting_groups", []string{"limit", "ml", "training"}, 1},
			{"steward_oldest_wait_seconds", []string{"ml", "training"}, 300},
		},
	}, {
		name:    "nothing waits",
		tenants: []engine.TenantUsage{{Tenant: "prod", Reserve: 4, Limit: 8, InUse: 0}},
		want:    []series{{"steward_reserve_shortfall_gpus", []string{"prod"}, 0}},
		absent: []string{"steward_waiting_groups", "steward_oldest_wait_seconds",
			"steward_tenant_fair_share_usage_gpu_hours", "steward_tenant_fair_share"},
	}, {
		name: "fair share over time: each tenant's decayed use and fair share",
		tenants: []engine.TenantUsage{
			{Tenant: "ml", Limit: policy.Unlimited, InUse: 2, UsageGPUHours: 30, FairShare: 0.5, UsedShare: 0.75},
			{Tenant: "prod", Limit: policy.Unlimited, Waiting: 1, UsageGPUHours: 10, FairShare: 0.5, UsedShare: 0.25},
		},
		want: []series{
			{"steward_tenant_fair_share_usage_gpu_hours", []string{"ml"}, 30},
			{"steward_tenant_fair_share", []string{"ml"}, 0.5},
			{"steward_tenant_fair_share_usage_gpu_hours", []string{"prod"}, 10},
			{"steward_tenant_fair_share", []string{"prod"}, 0.5},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			plan := &engine.Plan{Tenants: tc.tenants}
			for _, d := range tc.waiting {
				plan.Waiting = append(plan.Waiting, engine.Waiting{Job: d.Job.Ref, Group: d.Group, GPUs: d.GPUs(), Held: d.Held,
					Reason: engine.Reason{Rule: ruleOf(d)}})
			}
			r := &round{now: t0, obs: &Observation{At: t0}, plan: plan}
			m.observePlan(r, &engine.Snapshot{Waiting: tc.waiting}, pol, map[jobKey]*JobState{})
			for _, s := range tc.want {
				if got, ok := gaugeValue(t, m.reg, s.name, s.labels); !ok || got != s.want {
					t.Errorf("%s%q = %v (present %v), want %v", s.name, s.labels, got, ok, s.want)
				}
			}
			for _, name := range tc.absent {
				if n := familySize(t, m.reg, name); n != 0 {
					t.Errorf("%s has %d series, want none", name, n)
				}
			}
			if got, _ := gaugeValue(t, m.reg, "steward_tier_preemptible", []string{"inference"}); got != 0 {
				t.Errorf("inference preemptible = %v, want 0", got)
			}
			if got, _ := gaugeValue(t, m.reg, "steward_eviction_cap_per_job_per_hour", nil); got != 3 {
				t.Errorf("eviction cap = %v, want 3", got)
			}
		})
	}
}

// TestWaitHistogram: in TestWholeRound's story ml/nb waits from its
// blocked evaluation (a second before t0) until the round after the one
// that resumed it finds it running; the histogram observes that wait once,
// in its tier, however many rounds follow.
func TestWaitHistogram(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	r := newRoundRunner(t, f)
	steps := append(slices.Clone(preemptionSteps), roundStep{after: 3 * time.Minute}, roundStep{after: 4 * time.Minute})
	for i, step := range steps {
		if _, err := r.round(step.after); err != nil {
			t.Fatalf("round at %s: %v", step.after, err)
		}
		if i == 0 {
			// Held while the victim checkpoints: it waits, in its tier.
			if got, _ := gaugeValue(t, r.c.metrics.reg, "steward_waiting_groups", []string{"draining", "ml", "interactive"}); got != 1 {
				t.Errorf("after the first round: waiting groups of ml/interactive = %v, want 1", got)
			}
		}
	}
	h := histogram(t, r.c.metrics.reg, "steward_wait_seconds", "interactive")
	// Blocked a second before t0, resumed in the round at 2m1s and
	// placed (started) by the fake's scheduler right after it; the round
	// that forgets the wait comes later (resumeInFlight), and the wait
	// ends when the allocation started, not then.
	want := (time.Second + signalDelay + 2*time.Minute).Seconds()
	if h.GetSampleCount() != 1 || h.GetSampleSum() != want {
		t.Errorf("wait histogram of tier interactive: %d observations summing %vs, want 1 of %vs", h.GetSampleCount(), h.GetSampleSum(), want)
	}
	if n := familySize(t, r.c.metrics.reg, "steward_wait_seconds"); n != 1 {
		t.Errorf("wait histogram has %d series, want 1 (interactive): the held victim has not waited to its end", n)
	}
	if got := testutil.ToFloat64(r.c.metrics.preemptions.WithLabelValues("priority", "training", "ml")); got != 1 {
		t.Errorf("preemptions{reason=priority,tier=training,tenant=ml} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.c.metrics.rounds.WithLabelValues(roundOK)); got != float64(len(steps)) {
		t.Errorf("ok rounds = %v, want %d", got, len(steps))
	}
	if got, _ := gaugeValue(t, r.c.metrics.reg, "steward_job_preemptions_last_hour_max", []string{"ml", "training"}); got != 1 {
		t.Errorf("most stops of one ml/training job in the hour = %v, want 1", got)
	}
}

// TestPreemptionCounter: each stop is counted once under its rule and the
// victim's tier and tenant as the policy resolves them; idle releases also
// count the GPUs they take back; a person's pause is no preemption.
func TestPreemptionCounter(t *testing.T) {
	pol := metricsPolicy(t)
	cases := []struct {
		name      string
		drain     Drain
		tier      string // the job's tier meta
		gpus      int    // per allocation
		want      []string
		idleGPUs  float64
		uncounted bool
	}{
		{name: "priority preemption", drain: Drain{Kind: string(engine.Preempt), Rule: "priority", Group: "work", Allocs: []string{"a1"}},
			tier: "training", gpus: 4, want: []string{"priority", "training", "ml"}},
		{name: "reclaim of a whole gang", drain: Drain{Kind: string(engine.Preempt), Rule: "reclaim", Allocs: []string{"a1", "a2"}},
			tier: "training", gpus: 2, want: []string{"reclaim", "training", "ml"}},
		{name: "idle release counts its GPUs", drain: Drain{Kind: string(engine.IdleStop), Rule: "idle", Group: "work", Allocs: []string{"a1", "a2"}, Requeue: true},
			tier: "training", gpus: 2, want: []string{"idle", "training", "ml"}, idleGPUs: 4},
		{name: "a tier the job may not claim counts under the one it runs as", drain: Drain{Kind: string(engine.Preempt), Rule: "priority", Group: "work", Allocs: []string{"a1"}},
			tier: "no-such-tier", gpus: 1, want: []string{"priority", "training", "ml"}},
		{name: "a pause is no preemption", drain: Drain{Kind: "pause", Group: "work", Allocs: []string{"a1"}}, tier: "training", gpus: 1, uncounted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			j := job("ml", "j", tc.tier, 40, 2, tc.gpus)
			m.preempted(&tc.drain, j, pol)
			if tc.uncounted {
				if n := testutil.CollectAndCount(m.preemptions); n != 0 {
					t.Errorf("%d preemption series, want none", n)
				}
				return
			}
			if n := testutil.CollectAndCount(m.preemptions); n != 1 {
				t.Errorf("%d preemption series, want 1", n)
			}
			if got := testutil.ToFloat64(m.preemptions.WithLabelValues(tc.want...)); got != 1 {
				t.Errorf("preemptions%q = %v, want 1", tc.want, got)
			}
			if got := testutil.ToFloat64(m.idleGPUsReclaimed.WithLabelValues("ml")); got != tc.idleGPUs {
				t.Errorf("idle GPUs reclaimed = %v, want %v", got, tc.idleGPUs)
			}
		})
	}
}

// TestIdleGPUHours: GPU-hours accrue from round to round for work held
// after an idle release, from the first round that finds it so; holds for
// other rules add none; a new leader starts counting at its first round.
func TestIdleGPUHours(t *testing.T) {
	pol := metricsPolicy(t)
	m := newMetrics()
	nb, train := jobKey{"ml", "nb"}, jobKey{"ml", "train"}
	obs := &Observation{Jobs: map[jobKey]*ObservedJob{nb: job("ml", "nb", "training", 40, 2, 3), train: job("ml", "train", "training", 40, 1, 4)}}
	states := map[jobKey]*JobState{
		nb:    {Namespace: "ml", ID: "nb", Held: map[string]*Held{"work": {Count: 2, Original: 2, Since: t0.Add(-time.Hour), Rule: "idle"}}},
		train: {Namespace: "ml", ID: "train", Held: map[string]*Held{"work": {Count: 1, Original: 1, Since: t0, Rule: "priority"}}},
	}
	steps := []struct {
		at   time.Duration
		want float64 // GPU-hours in all, after the round
	}{
		{0, 0},                // the first round since leading: nothing to add up yet
		{20 * time.Minute, 2}, // 2 allocations of 3 GPUs held: 6 GPUs × 20 minutes
		{80 * time.Minute, 8}, // and 6 × 60 minutes more
	}
	for _, s := range steps {
		m.accrueIdle(&round{now: t0.Add(s.at), obs: obs}, pol, states)
		if got := testutil.ToFloat64(m.idleGPUHours.WithLabelValues("ml")); math.Abs(got-s.want) > 1e-9 {
			t.Errorf("at %s: %v idle GPU-hours reclaimed, want %v", s.at, got, s.want)
		}
	}
	m.stepDown()
	m.accrueIdle(&round{now: t0.Add(5 * time.Hour), obs: obs}, pol, states)
	if got := testutil.ToFloat64(m.idleGPUHours.WithLabelValues("ml")); math.Abs(got-8) > 1e-9 {
		t.Errorf("after a step-down and a new first round: %v GPU-hours, want 8 still", got)
	}
}

// TestEvictionCapMetrics: the most stops of one job in the last hour (the
// cap's window) and the jobs at the cap, per tenant and tier.
func TestEvictionCapMetrics(t *testing.T) {
	pol := metricsPolicy(t) // cap 3
	m := newMetrics()
	at := func(ago ...time.Duration) []time.Time {
		var out []time.Time
		for _, a := range ago {
			out = append(out, t0.Add(-a))
		}
		return out
	}
	a, b, c := jobKey{"ml", "a"}, jobKey{"ml", "b"}, jobKey{"ml", "c"}
	obs := &Observation{Jobs: map[jobKey]*ObservedJob{a: job("ml", "a", "training", 40, 1, 1), b: job("ml", "b", "training", 40, 1, 1), c: job("ml", "c", "training", 40, 1, 1)}}
	states := map[jobKey]*JobState{
		a: {Preemptions: at(50*time.Minute, 20*time.Minute, time.Minute)}, // 3: at the cap
		b: {Preemptions: at(3*time.Hour, 2*time.Hour, time.Minute)},       // 1 within the hour
		c: {Preemptions: at(61 * time.Minute)},                            // none within the hour
	}
	m.observeStops(&round{now: t0, obs: obs}, pol, states)
	if got, _ := gaugeValue(t, m.reg, "steward_job_preemptions_last_hour_max", []string{"ml", "training"}); got != 3 {
		t.Errorf("most stops in the hour = %v, want 3", got)
	}
	if got, _ := gaugeValue(t, m.reg, "steward_jobs_at_eviction_cap", []string{"ml", "training"}); got != 1 {
		t.Errorf("jobs at the cap = %v, want 1", got)
	}
}

// TestStepDownDropsLeaderGauges: a controller that stops leading exports
// leader 0 and none of the decision gauges (a follower shows no stale
// picture); counters keep what it did.
func TestStepDownDropsLeaderGauges(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	r := newRoundRunner(t, f)
	if _, err := r.round(0); err != nil {
		t.Fatal(err)
	}
	m := r.c.metrics
	m.leader.Set(1)
	if n := familySize(t, m.reg, "steward_waiting_groups"); n == 0 {
		t.Fatal("no waiting series after a round with work waiting")
	}
	m.stepDown()
	for _, name := range []string{"steward_gpus_in_use", "steward_gpus_reserved", "steward_gpus_waiting", "steward_gpus_borrowed",
		"steward_tenant_fair_share_usage_gpu_hours", "steward_tenant_fair_share",
		"steward_reserve_shortfall_gpus", "steward_waiting_groups", "steward_oldest_wait_seconds", "steward_tier_preemptible",
		"steward_eviction_cap_per_job_per_hour"} {
		if n := familySize(t, m.reg, name); n != 0 {
			t.Errorf("%s: %d series after stepping down, want none", name, n)
		}
	}
	if got := testutil.ToFloat64(m.leader); got != 0 {
		t.Errorf("leader = %v after stepping down", got)
	}
	if got := testutil.ToFloat64(m.rounds.WithLabelValues(roundOK)); got != 1 {
		t.Errorf("ok rounds = %v after stepping down, want 1 (counters stay)", got)
	}
}

// TestRoundResults counts rounds by result.
func TestRoundResults(t *testing.T) {
	m := newMetrics()
	m.roundEnded(nil, 0)
	m.roundEnded(nil, 2)
	m.roundEnded(io.ErrUnexpectedEOF, 0)
	for result, want := range map[string]float64{roundOK: 1, roundCallsFailed: 1, roundError: 1} {
		if got := testutil.ToFloat64(m.rounds.WithLabelValues(result)); got != want {
			t.Errorf("rounds{result=%q} = %v, want %v", result, got, want)
		}
	}
}

// TestMetricNames: every series a controller's /metrics shows after
// rounds that preempt, hold and resume is one MetricNames lists (the list
// the monitoring check reads), and the list holds the new names.
func TestMetricNames(t *testing.T) {
	names := MetricNames()
	for _, want := range []string{"steward_leader", "steward_wait_seconds_bucket", "steward_reserve_shortfall_gpus", "steward_nomad_http_requests_total"} {
		if !slices.Contains(names, want) {
			t.Errorf("MetricNames lacks %s", want)
		}
	}
	f := newFakeNomad()
	preemptionCluster(f)
	r := newRoundRunner(t, f)
	for _, step := range preemptionSteps {
		if _, err := r.round(step.after); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	r.c.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	scraped := 0
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		scraped++
		if !slices.Contains(names, name) {
			t.Errorf("/metrics shows %s, which MetricNames lacks", name)
		}
	}
	if scraped < 20 {
		t.Errorf("/metrics showed %d series; want the round's", scraped)
	}
}

// gaugeValue reads one series of a family from a registry.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, labels []string) (float64, bool) {
	t.Helper()
	for _, m := range family(t, reg, name) {
		var values []string
		for _, l := range m.GetLabel() {
			values = append(values, l.GetValue())
		}
		// Labels come sorted by name: rule, tenant, tier.
		if slices.Equal(values, labels) || len(values) == 0 && len(labels) == 0 {
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func histogram(t *testing.T, reg *prometheus.Registry, name, tier string) *dto.Histogram {
	t.Helper()
	for _, m := range family(t, reg, name) {
		if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == tier {
			return m.GetHistogram()
		}
	}
	return &dto.Histogram{}
}

func familySize(t *testing.T, reg *prometheus.Registry, name string) int {
	return len(family(t, reg, name))
}

func family(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

// TestIdleReclaimMetrics: in TestWholeRoundIdle's story the notebook's
// GPUs count as idle, its requeue as an idle preemption of 2 GPUs, and
// while Steward holds it its GPUs accrue GPU-hours reclaimed.
func TestIdleReclaimMetrics(t *testing.T) {
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
	r := newRoundRunner(t, f)
	if _, err := r.round(-20 * time.Minute); err != nil {
		t.Fatal(err)
	}
	r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
	r.clock = t0
	r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
	if _, err := r.round(0); err != nil { // the requeue
		t.Fatal(err)
	}
	m := r.c.metrics
	if got := testutil.ToFloat64(m.idleGPUs); got != 2 {
		t.Errorf("idle GPUs = %v, want the notebook's 2 (the round's status is of what it observed)", got)
	}
	if got := testutil.ToFloat64(m.preemptions.WithLabelValues("idle", "interactive", "ml")); got != 1 {
		t.Errorf("preemptions{idle, interactive, ml} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.idleGPUsReclaimed.WithLabelValues("ml")); got != 2 {
		t.Errorf("idle GPUs reclaimed = %v, want 2", got)
	}
	for _, after := range []time.Duration{time.Second, 30 * time.Minute} {
		if _, err := r.round(after); err != nil {
			t.Fatal(err)
		}
	}
	// Held from the requeue at t0 to the round at 30m: 2 GPUs × 0.5 h.
	if got := testutil.ToFloat64(m.idleGPUHours.WithLabelValues("ml")); math.Abs(got-1) > 1e-9 {
		t.Errorf("idle GPU-hours reclaimed = %v, want 1", got)
	}
}

// ruleOf is the rule a test demand waits under: its group's name when it
// names one ("limit"), else capacity.
func ruleOf(d engine.Demand) engine.Rule {
	if d.Group == "limit" {
		return engine.RuleLimit
	}
	return engine.RuleCapacity
}

func withGroup(d engine.Demand, g string) engine.Demand { d.Group = g; return d }

// TestMetricsDocumented: the controller's reference names every series
// MetricNames lists (a histogram by its own name), as `name` or with its
// labels, `name{...}`.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "reference", "controller.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range MetricNames() {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(MetricNames(), base+"_bucket") {
				name = base
			}
		}
		if !bytes.Contains(doc, []byte("`"+name+"`")) && !bytes.Contains(doc, []byte("`"+name+"{")) {
			t.Errorf("docs/reference/controller.md does not name %s: add it to the metrics table", name)
		}
	}
}
