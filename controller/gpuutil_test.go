package controller

import (
	"bytes"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// stewardShape is a device's stats as steward-gpu sends them: the Summary
// is the utilisation (devices/stats.go).
func stewardShape(util, memUsed, memTotal int64) *api.DeviceStats {
	u := &api.StatValue{Unit: "%", IntNumeratorVal: &util}
	return &api.DeviceStats{Summary: u, Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
		"GPU utilization": u,
		"Memory state":    {Unit: "MiB", IntNumeratorVal: &memUsed, IntDenominatorVal: &memTotal},
	}}}
}

// stockShape is a device's stats as HashiCorp's nomad-device-nvidia sends
// them: the Summary is the memory used, in MiB, the utilisation one
// statistic among eleven.
func stockShape(util, memUsed, memTotal int64) *api.DeviceStats {
	mem := &api.StatValue{Unit: "MiB", IntNumeratorVal: &memUsed, IntDenominatorVal: &memTotal}
	n := func(v int64, unit string) *api.StatValue { return &api.StatValue{Unit: unit, IntNumeratorVal: &v} }
	return &api.DeviceStats{Summary: mem, Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
		"Power usage":         {Unit: "W", IntNumeratorVal: new(int64(250)), IntDenominatorVal: new(int64(400))},
		"GPU utilization":     n(util, "%"),
		"Memory utilization":  n(util/2, "%"),
		"Encoder utilization": n(0, "%"),
		"Decoder utilization": n(0, "%"),
		"Temperature":         n(50, "C"),
		"Memory state":        mem,
		"BAR1 buffer state":   {Unit: "MiB", IntNumeratorVal: new(int64(3)), IntDenominatorVal: new(int64(65536))},
		"ECC L1 errors":       n(0, "#"),
		"ECC L2 errors":       n(0, "#"),
		"ECC memory errors":   n(0, "#"),
	}}}
}

func hostStats(byID map[string]*api.DeviceStats) *api.HostStats {
	return &api.HostStats{DeviceStats: []*api.DeviceGroupStats{{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100-SXM4-40GB", InstanceStats: byID}}}
}

// The utilisation comes from the "GPU utilization" statistic in %, never
// from the Summary, in either plugin's shape; a device without it is
// refused, neither idle nor busy.
func TestGPUUtilisationByNameAndUnit(t *testing.T) {
	na := "N/A"
	cases := []struct {
		name    string
		stats   *api.DeviceStats
		want    float64
		refused string // part of the reason; "" when read
	}{
		{"stock shape: busy GPU, little memory", stockShape(95, 300, 40960), 95, ""},
		{"stock shape: idle GPU, big model loaded", stockShape(1, 38000, 40960), 1, ""},
		{"steward-gpu shape: busy", stewardShape(90, 100, 40960), 90, ""},
		{"steward-gpu shape: idle", stewardShape(2, 30000, 40960), 2, ""},
		{"float value", &api.DeviceStats{Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
			"GPU utilization": {Unit: "%", FloatNumeratorVal: new(37.5)}}}}, 37.5, ""},
		{"no statistics at all, a Summary only", &api.DeviceStats{Summary: &api.StatValue{Unit: "%", IntNumeratorVal: new(int64(3))}},
			0, "carry no statistics"},
		{"no utilisation statistic", &api.DeviceStats{Summary: &api.StatValue{Unit: "MiB", IntNumeratorVal: new(int64(3))},
			Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"Memory state": {Unit: "MiB", IntNumeratorVal: new(int64(3))}}}},
			0, `no "GPU utilization" statistic (they carry "Memory state" (MiB))`},
		{"utilisation not available", &api.DeviceStats{Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
			"GPU utilization": {Unit: "%", StringVal: &na}}}}, 0, "has no number (N/A)"},
		{"wrong unit", &api.DeviceStats{Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
			"GPU utilization": {Unit: "MiB", IntNumeratorVal: new(int64(30000))}}}}, 0, `in "MiB", not "%"`},
		{"nil stats", nil, 0, "carry no statistics"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why := deviceUtil(tc.stats)
			if tc.refused == "" {
				if why != "" || got != tc.want {
					t.Errorf("got %v (refused %q), want %v", got, why, tc.want)
				}
				return
			}
			if !strings.Contains(why, tc.refused) {
				t.Errorf("refused %q, want it to say %q", why, tc.refused)
			}
		})
	}
}

// A sweep over a node of the stock plugin: the busy GPU with little memory
// reads busy and the idle one with a loaded model idle (the Summary read
// as a percentage said the opposite); steward-gpu's shape reads as before;
// a GPU without utilisation gets no sample, loses the ones it had, and is
// refused once in the log, in the status warnings and in /healthz.
func TestSweepReadsUtilisationNotSummary(t *testing.T) {
	on := func(id, node, gpu string) ObservedAlloc {
		a := alloc(id, "nb")
		a.NodeID, a.GPUIDs = node, []string{gpu}
		return a
	}
	cases := []struct {
		name  string
		stats *api.DeviceStats
		// want is the sample's utilisation; refused: no sample, a warning.
		want    float64
		refused bool
	}{
		{"stock shape, busy GPU with little memory", stockShape(95, 300, 40960), 95, false},
		{"stock shape, idle GPU with a big model", stockShape(1, 38000, 40960), 1, false},
		{"steward-gpu shape, busy", stewardShape(90, 100, 40960), 90, false},
		{"steward-gpu shape, idle", stewardShape(2, 30000, 40960), 2, false},
		{"no utilisation statistic", &api.DeviceStats{Summary: &api.StatValue{Unit: "MiB", IntNumeratorVal: new(int64(300))},
			Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"Memory state": {Unit: "MiB", IntNumeratorVal: new(int64(300))}}}}, 0, true},
		{"absent from the node's stats", nil, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			var logs bytes.Buffer
			c := testController(t, f, withLogger(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})))
			a := on("a1", "node-1", "GPU-1")
			byID := map[string]*api.DeviceStats{"GPU-other": stockShape(50, 1, 2)}
			if tc.stats != nil {
				byID["GPU-1"] = tc.stats
			}
			f.cl().stats["node-1"] = hostStats(byID)
			// A sample from before: a refused GPU must not keep it.
			c.usage.add(a.ID, engine.Sample{At: t0.Add(-time.Minute), Util: 1})
			targets := []statsTarget{{node: "node-1", allocs: []ObservedAlloc{a}}}
			for range 3 {
				if failed := c.sampler.sweepStats(t.Context(), targets); failed != 0 {
					t.Fatalf("%d nodes failed", failed)
				}
			}
			samples := c.usage.history(a.ID)
			warns := c.sampler.gpuRefused.jobWarnings()
			health := c.Health().Warnings
			if !tc.refused {
				if len(samples) != 4 || samples[3].Util != tc.want {
					t.Errorf("samples %+v, want the last at %v", samples, tc.want)
				}
				if len(warns) != 0 || len(health) != 0 || strings.Contains(logs.String(), "refused") {
					t.Errorf("refused a readable GPU: %v %v\n%s", warns, health, logs.String())
				}
				return
			}
			if len(samples) != 0 {
				t.Errorf("a GPU without utilisation was judged: samples %+v", samples)
			}
			if n := strings.Count(logs.String(), "GPU refused"); n != 1 {
				t.Errorf("refused %d times in the log over three sweeps, want once:\n%s", n, logs.String())
			}
			if len(warns) != 1 || warns[0].Job != "ml/nb" || !strings.Contains(warns[0].Problem, "GPU GPU-1") ||
				!strings.Contains(warns[0].Problem, "idle rules do not act on allocation a1") {
				t.Errorf("status warnings %+v", warns)
			}
			if len(health) != 1 || !strings.Contains(health[0], "GPU GPU-1") {
				t.Errorf("healthz warnings %q", health)
			}

			// The GPU reports utilisation again: sampled, the warning goes.
			byID["GPU-1"] = stockShape(80, 10, 40960)
			c.sampler.sweepStats(t.Context(), targets)
			if s := c.usage.history(a.ID); len(s) != 1 || s[0].Util != 80 {
				t.Errorf("after recovery samples %+v, want one at 80", s)
			}
			if w := c.sampler.gpuRefused.jobWarnings(); len(w) != 0 {
				t.Errorf("warnings after recovery %+v", w)
			}
			if !strings.Contains(logs.String(), "GPU reports utilisation again") {
				t.Errorf("recovery not logged:\n%s", logs.String())
			}
		})
	}
}

// An allocation of two GPUs one of which has no utilisation is not judged
// on the other: the unread one may be the busy one. Refusals of
// allocations no longer read are forgotten.
func TestAllocUtilNeedsEveryGPU(t *testing.T) {
	readings := gpuReadings(hostStats(map[string]*api.DeviceStats{
		"g1": stockShape(1, 38000, 40960),
		"g2": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"Memory state": {Unit: "MiB", IntNumeratorVal: new(int64(1))}}}},
		"g3": stockShape(60, 1, 40960),
	}))
	if _, refused, ok := allocUtil(readings, []string{"g1", "g2"}); ok || len(refused) != 1 || refused["g2"] == "" {
		t.Errorf("g1+g2: ok %v refused %v, want g2 refused and no mean", ok, refused)
	}
	if u, refused, ok := allocUtil(readings, []string{"g1", "g3"}); !ok || refused != nil || u != 30.5 {
		t.Errorf("g1+g3: %v %v %v, want the mean 30.5", u, refused, ok)
	}
	if _, _, ok := allocUtil(readings, nil); ok {
		t.Error("an allocation without GPUs was judged")
	}

	var g gpuRefusals
	a := alloc("a1", "nb")
	if !g.refuse("n1", "g2", "why", a) || g.refuse("n1", "g2", "why", a) {
		t.Error("refuse should report news once")
	}
	g.keep([]statsTarget{{node: "n1", allocs: []ObservedAlloc{alloc("other", "nb")}}})
	if w := g.jobWarnings(); len(w) != 0 {
		t.Errorf("a refusal outlived its allocation: %+v", w)
	}
}
