package controller

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeProm is Prometheus's HTTP API for an instant query: it answers
// /api/v1/query with series, or fails with status.
type fakeProm struct {
	mu      sync.Mutex
	series  []promSeries
	status  int    // non-zero: answer this status with an error
	raw     string // non-empty: answer this body as is
	queries []string
	srv     *httptest.Server
}

// promSeries is one series of an answer; at zero: the query's time.
type promSeries struct {
	labels map[string]string
	value  float64
	at     time.Time
}

func newFakeProm(t *testing.T) *fakeProm {
	t.Helper()
	f := &fakeProm{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProm) set(status int, series ...promSeries) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.series = status, series
}

func (f *fakeProm) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/api/v1/query" {
		http.NotFound(w, req)
		return
	}
	_ = req.ParseForm()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, req.Form.Get("query")+" lookback_delta="+req.Form.Get("lookback_delta"))
	if f.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `{"status":"error","errorType":"internal","error":"fake failure %d"}`, f.status)
		return
	}
	body := f.raw
	if body == "" {
		var ts float64
		fmt.Sscan(req.Form.Get("time"), &ts)
		result := []map[string]any{}
		for _, s := range f.series {
			at := ts
			if !s.at.IsZero() {
				at = float64(s.at.UnixMilli()) / 1000
			}
			result = append(result, map[string]any{"metric": s.labels, "value": []any{at, fmt.Sprint(s.value)}})
		}
		b, _ := json.Marshal(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
		body = string(b)
	}
	w.Header().Set("Content-Type", "application/json")
	if strings.Contains(req.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = zw.Write([]byte(body))
		_ = zw.Close()
		return
	}
	_, _ = w.Write([]byte(body))
}

func uuidSeries(uuid string, v float64) promSeries {
	return promSeries{labels: map[string]string{"UUID": uuid}, value: v}
}

// TestPrometheusReadings: one query's series mapped to GPUs by UUID, one
// named case per story; refused GPUs say why, with the numbers.
func TestPrometheusReadings(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		series []promSeries
		raw    string
		cfg    func(*PrometheusConfig)
		want   map[string]gpuReading
		err    string // the read fails, with this in its error
	}{
		{name: "whole GPUs by UUID", series: []promSeries{uuidSeries("GPU-a", 3), uuidSeries("GPU-b", 97.5)},
			want: map[string]gpuReading{"GPU-a": {util: 3}, "GPU-b": {util: 97.5}}},
		{name: "MIG instance by its MIG UUID",
			series: []promSeries{{labels: map[string]string{"UUID": "MIG-1111", "GPU_I_ID": "3"}, value: 40}},
			want:   map[string]gpuReading{"MIG-1111": {util: 40}}},
		{name: "DCGM MIG series under its parent's UUID is not the parent's reading",
			series: []promSeries{{labels: map[string]string{"UUID": "GPU-p", "GPU_I_ID": "1"}, value: 0}, uuidSeries("GPU-q", 5)},
			want:   map[string]gpuReading{"GPU-q": {util: 5}}},
		{name: "another UUID label", cfg: func(c *PrometheusConfig) { c.UUIDLabel = "gpu_uuid" },
			series: []promSeries{{labels: map[string]string{"gpu_uuid": "GPU-a"}, value: 7}, uuidSeries("GPU-b", 7)},
			want:   map[string]gpuReading{"GPU-a": {util: 7}}},
		{name: "duplicate series: the busier wins",
			series: []promSeries{uuidSeries("GPU-a", 2), uuidSeries("GPU-a", 80), uuidSeries("GPU-a", 10)},
			want:   map[string]gpuReading{"GPU-a": {util: 80}}},
		{name: "duplicate series: a good reading wins over a stale one",
			series: []promSeries{{labels: map[string]string{"UUID": "GPU-a"}, value: 1, at: now.Add(-10 * time.Minute)}, uuidSeries("GPU-a", 60)},
			want:   map[string]gpuReading{"GPU-a": {util: 60}}},
		{name: "stale sample refused",
			series: []promSeries{{labels: map[string]string{"UUID": "GPU-a"}, value: 1, at: now.Add(-90 * time.Second)}},
			want: map[string]gpuReading{"GPU-a": {refused: "its newest Prometheus sample is from 2026-11-27T11:58:30Z, " +
				"1m30s before the read (the bound is 1m0s)"}}},
		{name: "a ratio where percent is wanted is still read, a number over 100 refused",
			series: []promSeries{uuidSeries("GPU-a", 0.5), uuidSeries("GPU-b", 250)},
			want: map[string]gpuReading{"GPU-a": {util: 0.5},
				"GPU-b": {refused: "Prometheus reads 250 for it, not a utilisation in percent (0..100): check -prometheus-query"}}},
		{name: "no series at all is a failure", series: nil, err: "no series (is the exporter scraped"},
		{name: "more series than the bound", cfg: func(c *PrometheusConfig) { c.MaxSeries = 2 },
			series: []promSeries{uuidSeries("GPU-a", 1), uuidSeries("GPU-b", 1), uuidSeries("GPU-c", 1)},
			err:    "more than 2 series: refused"},
		{name: "oversized answer cut", cfg: func(c *PrometheusConfig) { c.MaxBytes = 1000 },
			raw: `{"status":"success","data":{"resultType":"vector","result":[` + strings.Repeat(`{"metric":{"UUID":"GPU-x"},"value":[1,"1"]},`, 100) +
				`{"metric":{"UUID":"GPU-y"},"value":[1,"1"]}]}}`,
			err: "answer too large: more than 1000 bytes"},
		{name: "not an instant vector", raw: `{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}`,
			err: "answered a scalar, not an instant vector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := newFakeProm(t)
			fp.series, fp.raw = tc.series, tc.raw
			cfg := DefaultPrometheusConfig()
			cfg.Address = fp.srv.URL
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			p, err := newPromSource(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.read(t.Context(), now)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("read: %v; want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("readings\n%v\nwant\n%v", got, tc.want)
			}
			wantQ := fmt.Sprintf("max by (%s, GPU_I_ID) (100 * DCGM_FI_PROF_GR_ENGINE_ACTIVE) lookback_delta=1m0s", cfg.UUIDLabel)
			if !slices.Equal(fp.queries, []string{wantQ}) {
				t.Errorf("queries %q, want one: %q", fp.queries, wantQ)
			}
			if p.wire.Load() == 0 || p.decoded.Load() <= p.wire.Load()/2 {
				t.Errorf("bytes: %d on the wire, %d decoded", p.wire.Load(), p.decoded.Load())
			}
		})
	}
}

func TestPrometheusConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		err  string
	}{
		{"nomad needs nothing", func(c *Config) {}, ""},
		{"prometheus needs an address", func(c *Config) { c.ActivitySource = ActivityPrometheus }, "needs -prometheus-address"},
		{"an address without a scheme", func(c *Config) {
			c.ActivitySource, c.Prometheus.Address = ActivityPrometheus, "127.0.0.1:9090"
		}, "want http(s)://HOST:PORT"},
		{"a label that is not one", func(c *Config) {
			c.ActivitySource, c.Prometheus.Address, c.Prometheus.UUIDLabel = ActivityPrometheus, "http://127.0.0.1:9090", `UUID) (x`
		}, "not a Prometheus label name"},
		{"an unknown source", func(c *Config) { c.ActivitySource = "dcgm" }, `-activity-source "dcgm": want nomad or prometheus`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.PolicyFiles = []string{"p.hcl"}
			tc.set(&c)
			err := c.Validate()
			if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Validate: %v; want %q", err, tc.err)
			}
		})
	}
}

// TestPrometheusActivityRound: whole rounds with GPU activity from a fake
// Prometheus, while the node's own stats say the opposite (so that only a
// reading from Prometheus can decide). A notebook idle for 20 minutes holds
// the only 2 GPUs while training waits.
func TestPrometheusActivityRound(t *testing.T) {
	gpus := []string{"GPU-n1-0", "GPU-n1-1"}
	requeue := "scale ml/nb work 0: Steward requeues (idle) 1 allocation: GPU utilisation 2% (under 10%) for 20m " +
		"(idle rule notebooks: after 15m, mode pressure); 2 GPUs go to ml/train/work, which waits for 2; job requeued"
	hold := "scale ml/train work 0: Steward holds 1 allocation: needs 2 GPUs on one node in any node; none free, " +
		"and nothing may be preempted for tier training (priority 40) of tenant ml (holds 2, reserve 0)"
	for _, tc := range []struct {
		name string
		// then is what Prometheus answers at the second sweep (the
		// first reads both GPUs at 2%).
		then       func(f *fakeProm)
		nodeUtil   int64
		want       []string // the second round's writes (the first held the training job)
		up         float64
		jobWarning string // in the status, on ml/nb
		health     string // in /healthz's warnings
	}{
		{name: "idle from Prometheus: requeued", nodeUtil: 90,
			then: func(f *fakeProm) { f.set(0, uuidSeries(gpus[0], 2), uuidSeries(gpus[1], 2)) },
			want: []string{requeue, "scale-ahead ml/train work 1"}, up: 1},
		{name: "busy from Prometheus: kept", nodeUtil: 1,
			then: func(f *fakeProm) { f.set(0, uuidSeries(gpus[0], 2), uuidSeries(gpus[1], 70)) },
			want: nil, up: 1},
		{name: "Prometheus down: idle rules pause and nothing is reclaimed", nodeUtil: 1,
			then: func(f *fakeProm) { f.set(http.StatusServiceUnavailable) },
			want: nil, up: 0,
			jobWarning: "idle rules are paused: GPU activity could not be read from prometheus since 2026-11-22T12:00:00Z, " +
				"so nothing is reclaimed for idleness until it can (the idle time starts afresh then)",
			health: "GPU activity source prometheus has failed since 2026-11-22T12:00:00Z (1 reads): idle rules are paused for 1 jobs, " +
				"nothing is reclaimed for idleness: query max by (UUID, GPU_I_ID) (100 * DCGM_FI_PROF_GR_ENGINE_ACTIVE) at"},
		{name: "Prometheus answers no series: paused", nodeUtil: 1,
			then: func(f *fakeProm) { f.set(0) },
			want: nil, up: 0,
			jobWarning: "idle rules are paused: GPU activity could not be read from prometheus since 2026-11-22T12:00:00Z, " +
				"so nothing is reclaimed for idleness until it can (the idle time starts afresh then)",
			health: "no series (is the exporter scraped, and its series labelled UUID?)"},
		{name: "one GPU without a series: refused", nodeUtil: 1,
			then: func(f *fakeProm) { f.set(0, uuidSeries(gpus[0], 2)) },
			want: nil, up: 1,
			jobWarning: `GPU GPU-n1-1 on node n1 has no utilisation: Prometheus has no sample of 100 * DCGM_FI_PROF_GR_ENGINE_ACTIVE with UUID="GPU-n1-1" in the last 1m0s; ` +
				"idle rules do not act on allocation a-nb (Steward reads 100 * DCGM_FI_PROF_GR_ENGINE_ACTIVE from Prometheus, by the GPU's UUID in label UUID: docs/reference/controller.md)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cl := f.cl()
			cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
			nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
			train := apiJob("ml", "train", "training", 40, 1, 2)
			cl.jobs["ml/nb"], cl.jobs["ml/train"] = nb, train
			cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", gpus, t0.Add(-time.Hour))}
			cl.stats["n1"] = gpuStats(gpus, tc.nodeUtil)
			ev, sum := apiBlockedEval(train, 1, t0.Add(-time.Second))
			cl.evals, cl.summary["ml/train"] = []*api.Evaluation{ev}, sum
			fp := newFakeProm(t)
			fp.set(0, uuidSeries(gpus[0], 2), uuidSeries(gpus[1], 2))
			r := newRoundRunner(t, f)
			cfg := DefaultPrometheusConfig()
			cfg.Address = fp.srv.URL
			var err error
			if r.c.sampler.prom, err = newPromSource(cfg); err != nil {
				t.Fatal(err)
			}
			r.c.sampler.gpuRefused.hint = "Steward reads 100 * DCGM_FI_PROF_GR_ENGINE_ACTIVE from Prometheus, by the GPU's UUID in label UUID: docs/reference/controller.md"
			if w, err := r.round(-20 * time.Minute); err != nil || !slices.Equal(w, []string{hold}) {
				t.Fatalf("first round: %q, %v", w, err)
			}
			r.c.sampler.sweepPrometheus(context.Background(), r.c.usage.targetsNow())
			r.clock = t0
			tc.then(fp)
			r.c.sampler.sweepPrometheus(context.Background(), r.c.usage.targetsNow())
			got, err := r.round(0)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("writes\n%q\nwant\n%q", got, tc.want)
			}
			if up := testutil.ToFloat64(r.c.metrics.activity.up); up != tc.up {
				t.Errorf("steward_activity_source_up %v, want %v", up, tc.up)
			}
			if errs := testutil.ToFloat64(r.c.metrics.activity.errors); (errs > 0) != (tc.up == 0) {
				t.Errorf("steward_activity_source_errors_total %v with up %v", errs, tc.up)
			}
			if q := testutil.ToFloat64(r.c.metrics.activity.queries); q != 2 {
				t.Errorf("steward_activity_source_queries_total %v, want 2 (one a sweep)", q)
			}
			var warnings []string
			for _, w := range r.c.sampler.activityJobWarnings() {
				warnings = append(warnings, w.Job+": "+w.Problem)
			}
			for _, w := range r.c.sampler.gpuRefused.jobWarnings() {
				warnings = append(warnings, w.Job+": "+w.Problem)
			}
			if tc.jobWarning == "" && len(warnings) > 0 || tc.jobWarning != "" && !slices.Contains(warnings, "ml/nb: "+tc.jobWarning) {
				t.Errorf("status warnings\n%q\nwant\n%q", warnings, tc.jobWarning)
			}
			health := strings.Join(r.c.Health().Warnings, "\n")
			if tc.health != "" && !strings.Contains(health, tc.health) || tc.up == 1 && strings.Contains(health, "source") {
				t.Errorf("healthz warnings\n%s\nwant %q", health, tc.health)
			}
			if tc.up == 0 {
				// Back up: idle rules resume, with the idle time
				// afresh (one sample now is no idle stretch yet).
				fp.set(0, uuidSeries(gpus[0], 2), uuidSeries(gpus[1], 2))
				r.c.sampler.sweepPrometheus(context.Background(), r.c.usage.targetsNow())
				if got, err := r.round(time.Second); err != nil || len(got) != 0 {
					t.Errorf("round after Prometheus came back: %q, %v; want no writes", got, err)
				}
				if up := testutil.ToFloat64(r.c.metrics.activity.up); up != 1 || len(r.c.sampler.activityJobWarnings()) != 0 {
					t.Errorf("after it came back: up %v, warnings %v", up, r.c.sampler.activityJobWarnings())
				}
			}
		})
	}
}

// TestGPUAllocationInfo: steward_gpu_allocation_info has one series per GPU
// an allocation holds, labelled with its job, tenant and tier, and the
// series of an allocation that ended go at the next round.
func TestGPUAllocationInfo(t *testing.T) {
	f := newFakeNomad()
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
	nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
	train := apiJob("ml", "train", "training", 40, 1, 2)
	cl.jobs["ml/nb"], cl.jobs["ml/train"] = nb, train
	cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", []string{"GPU-0", "MIG-1"}, t0.Add(-time.Hour)),
		apiAlloc("a-train", train, "n1", []string{"GPU-2", "GPU-3"}, t0.Add(-time.Hour))}
	r := newRoundRunner(t, f)
	series := func() []string {
		var out []string
		mfs, err := r.c.metrics.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "steward_gpu_allocation_info" {
				continue
			}
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				out = append(out, fmt.Sprintf("%s %s/%s %s %s %g", l["uuid"], l["namespace"], l["job"], l["tenant"], l["tier"], m.GetGauge().GetValue()))
			}
		}
		slices.Sort(out)
		return out
	}
	if _, err := r.round(0); err != nil {
		t.Fatal(err)
	}
	want := []string{"GPU-0 ml/nb ml interactive 1", "GPU-2 ml/train ml training 1", "GPU-3 ml/train ml training 1", "MIG-1 ml/nb ml interactive 1"}
	if got := series(); !slices.Equal(got, want) {
		t.Fatalf("series\n%q\nwant\n%q", got, want)
	}
	cl.allocs = cl.allocs[1:] // the notebook ended
	if _, err := r.round(time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := series(); !slices.Equal(got, want[1:3]) {
		t.Fatalf("after the notebook ended:\n%q\nwant\n%q", got, want[1:3])
	}
	r.c.metrics.stepDown()
	if got := series(); len(got) != 0 {
		t.Fatalf("after stepping down: %q", got)
	}
}
