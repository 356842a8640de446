//go:build gpu && cgo

// Tests of the NVML backend against a real NVIDIA driver and GPU. They are
// built only with -tags gpu (`make gpu-check`), on a machine with a GPU:
// `make test` runs the same code paths against go-nvml's mock instead.

package devices

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// TestRealNVML fingerprints the machine's GPUs through the real
// libnvidia-ml.so.1, reads their stats, reserves them, and, with
// STEWARD_GPU_LOAD naming a command that keeps one GPU busy, sees its
// utilisation rise in the stats Nomad would attach to the allocation.
func TestRealNVML(t *testing.T) {
	logger, logs := testLogger(t)
	p := newPlugin(logger, openNVML)
	if err := p.SetConfig(pluginConfig(t, map[string]interface{}{"backend": "nvml"})); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	t.Cleanup(p.Shutdown)

	ch, err := p.Fingerprint(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := nextFingerprint(t, ch)
	if !ok || len(f.Devices) == 0 {
		t.Fatalf("no GPUs fingerprinted through NVML; plugin log:\n%s", logs)
	}
	memory := map[string]int64{}
	var ids []string
	for _, g := range f.Devices {
		if err := g.Validate(); err != nil {
			t.Errorf("group %s does not validate: %v", g.Name, err)
		}
		if g.Vendor != "nvidia" || g.Type != "gpu" || g.Name == "" {
			t.Errorf("group %s/%s/%q, want nvidia/gpu/<model>", g.Vendor, g.Type, g.Name)
		}
		attrs := map[string]string{}
		for k, a := range g.Attributes {
			attrs[k] = a.GoString()
		}
		t.Logf("group nvidia/gpu/%s: %d devices, attributes %v", g.Name, len(g.Devices), attrs)
		if attrs[AttrSimulated] != "false" {
			t.Errorf("%s = %q on real GPUs, want false", AttrSimulated, attrs[AttrSimulated])
		}
		for _, k := range []string{AttrDriverVersion, AttrCUDAVersion, AttrComputeCapability, AttrMemory} {
			if attrs[k] == "" {
				t.Errorf("attribute %s missing", k)
			}
		}
		m := g.Attributes[AttrMemory]
		if m == nil || m.Int == nil || *m.Int <= 0 {
			t.Errorf("memory attribute %v, want a positive number of MiB", m)
		}
		for _, d := range g.Devices {
			if !strings.HasPrefix(d.ID, "GPU-") && !strings.HasPrefix(d.ID, "MIG-") {
				t.Errorf("device ID %q is not an NVML UUID", d.ID)
			}
			if !d.Healthy {
				t.Errorf("device %s unhealthy: %s", d.ID, d.HealthDesc)
			}
			if d.HwLocality == nil || d.HwLocality.PciBusID == "" {
				t.Errorf("device %s has no PCI bus ID", d.ID)
			}
			if m != nil && m.Int != nil {
				memory[d.ID] = *m.Int
			}
			ids = append(ids, d.ID)
		}
	}

	res, err := p.Reserve(ids)
	if err != nil {
		t.Fatalf("Reserve(%v): %v", ids, err)
	}
	if got, want := res.Envs["NVIDIA_VISIBLE_DEVICES"], strings.Join(ids, ","); got != want {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want %q", got, want)
	}
	if _, err := p.Reserve([]string{"GPU-00000000-0000-0000-0000-000000000000"}); err == nil {
		t.Error("Reserve of a UUID this machine lacks succeeded")
	}

	stats, err := p.Stats(testContext(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	first := nextStats(t, stats)
	checkRealStats(t, first, ids, memory)

	load := os.Getenv("STEWARD_GPU_LOAD")
	if load == "" {
		t.Fatal("STEWARD_GPU_LOAD is not set: name a command that keeps GPU 0 busy (make gpu-check sets it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", load)
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+ids[0])
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start GPU load %q: %v", load, err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	var seen []int64
	for time.Now().Before(deadline) {
		s := nextStats(t, stats)
		ds := s.Groups[0].InstanceStats[ids[0]]
		if ds == nil {
			continue
		}
		u := statInt(t, ds, StatGPUUtilization)
		seen = append(seen, u)
		if u >= 50 {
			t.Logf("GPU %s busy: utilisation samples %v; memory used %d of %d MiB", ids[0], seen,
				statInt(t, ds, StatMemoryState), memory[ids[0]])
			return
		}
	}
	t.Fatalf("GPU %s never reached 50%% utilisation under load (samples %v); load output:\n%s", ids[0], seen, out)
}

// checkRealStats checks one stats response against the fingerprint: every
// device has stats, utilisation is a percentage, the memory denominator is
// the fingerprinted memory.
func checkRealStats(t *testing.T, s *device.StatsResponse, ids []string, memory map[string]int64) {
	t.Helper()
	byID := map[string]*device.DeviceStats{}
	for _, g := range s.Groups {
		for id, ds := range g.InstanceStats {
			byID[id] = ds
		}
	}
	for _, id := range ids {
		ds := byID[id]
		if ds == nil {
			t.Errorf("no stats for %s", id)
			continue
		}
		if u := statInt(t, ds, StatGPUUtilization); u < 0 || u > 100 {
			t.Errorf("%s: utilisation %d%%", id, u)
		}
		if d := ds.Stats.Attributes[StatMemoryState].IntDenominatorVal; d == nil || *d != memory[id] {
			t.Errorf("%s: memory total %v, want %d MiB", id, d, memory[id])
		}
		if ds.Summary == nil || ds.Summary.Unit != "%" {
			t.Errorf("%s: summary %#v, want GPU utilisation in %%", id, ds.Summary)
		}
		attrs := map[string]string{}
		for k, a := range ds.Stats.Attributes {
			attrs[k] = statString(a)
		}
		t.Logf("stats of %s at rest: %v", id, attrs)
	}
}

// statString shows a statistic as numerator[/denominator] unit.
func statString(v *structs.StatValue) string {
	var s string
	switch {
	case v == nil:
		return "missing"
	case v.IntNumeratorVal != nil:
		s = fmt.Sprint(*v.IntNumeratorVal)
		if v.IntDenominatorVal != nil {
			s += fmt.Sprintf("/%d", *v.IntDenominatorVal)
		}
	case v.FloatNumeratorVal != nil:
		s = fmt.Sprint(*v.FloatNumeratorVal)
	case v.StringVal != nil:
		s = *v.StringVal
	case v.BoolVal != nil:
		s = fmt.Sprint(*v.BoolVal)
	}
	return s + " " + v.Unit
}
