package devices

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/nomad/plugins/device"
)

func TestNVMLFingerprintDGXA100(t *testing.T) {
	gpus := newMockGPUs()
	p, _ := newTestPlugin(t, gpus, map[string]interface{}{})

	ch, err := p.Fingerprint(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := nextFingerprint(t, ch)
	if !ok {
		t.Fatal("fingerprint stream ended without devices")
	}
	if len(f.Devices) != 1 {
		t.Fatalf("want 1 device group, got %d", len(f.Devices))
	}
	g := f.Devices[0]
	if g.Vendor != "nvidia" || g.Type != "gpu" || g.Name != "Mock NVIDIA A100-SXM4-40GB" {
		t.Fatalf("group = %s/%s/%s, want nvidia/gpu/Mock NVIDIA A100-SXM4-40GB", g.Vendor, g.Type, g.Name)
	}
	if err := g.Validate(); err != nil {
		t.Fatalf("group does not validate: %v", err)
	}
	if len(g.Devices) != 8 {
		t.Fatalf("want 8 GPUs, got %d", len(g.Devices))
	}
	for i, d := range g.Devices {
		mockDev := gpus.device(i)
		if d.ID != mockDev.UUID {
			t.Errorf("device %d: ID %q, want %q", i, d.ID, mockDev.UUID)
		}
		if !d.Healthy || d.HealthDesc != "" {
			t.Errorf("device %d unhealthy: %q", i, d.HealthDesc)
		}
		if d.HwLocality == nil || d.HwLocality.PciBusID != mockDev.PciBusID {
			t.Errorf("device %d: locality %#v, want PCI bus %s", i, d.HwLocality, mockDev.PciBusID)
		}
	}
	want := map[string]string{
		AttrMemory:            "40960MiB",
		AttrPower:             "400W",
		AttrDriverVersion:     "550.54.15",
		AttrCUDAVersion:       "12.4",
		AttrComputeCapability: "8.0",
		AttrMIG:               "false",
		AttrSimulated:         "false",
	}
	for k, v := range want {
		a, ok := g.Attributes[k]
		if !ok {
			t.Errorf("attribute %s missing", k)
			continue
		}
		if got := a.GoString(); got != v {
			t.Errorf("attribute %s = %s, want %s", k, got, v)
		}
	}
}

func TestNVMLIgnoredGPUs(t *testing.T) {
	gpus := newMockGPUs()
	ignored := []interface{}{gpus.device(2).UUID, gpus.device(5).UUID}
	p, _ := newTestPlugin(t, gpus, map[string]interface{}{"ignored_gpu_ids": ignored})

	ch, _ := p.Fingerprint(testContext(t))
	f, _ := nextFingerprint(t, ch)
	devs := devicesByID(f.Devices)
	if len(devs) != 6 {
		t.Fatalf("want 6 GPUs after ignoring 2, got %d", len(devs))
	}
	for _, id := range ignored {
		if _, ok := devs[id.(string)]; ok {
			t.Errorf("ignored GPU %s was fingerprinted", id)
		}
	}

	// Ignored GPUs have no stats and cannot be reserved.
	s := nextStats(t, mustStats(t, p))
	if n := len(s.Groups[0].InstanceStats); n != 6 {
		t.Errorf("stats for %d GPUs, want 6", n)
	}
	if _, err := p.Reserve([]string{ignored[0].(string)}); err == nil {
		t.Error("reserving an ignored GPU succeeded")
	}
}

func mustStats(t *testing.T, p *Plugin) <-chan *device.StatsResponse {
	t.Helper()
	ch, err := p.Stats(testContext(t), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestNVMLStats(t *testing.T) {
	gpus := newMockGPUs()
	p, _ := newTestPlugin(t, gpus, map[string]interface{}{})
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)

	s := nextStats(t, mustStats(t, p))
	if len(s.Groups) != 1 {
		t.Fatalf("want 1 stats group, got %d", len(s.Groups))
	}
	g := s.Groups[0]
	if g.Vendor != "nvidia" || g.Type != "gpu" || g.Name != "Mock NVIDIA A100-SXM4-40GB" {
		t.Fatalf("stats group %s/%s/%s does not match the fingerprint", g.Vendor, g.Type, g.Name)
	}
	if len(g.InstanceStats) != 8 {
		t.Fatalf("want stats for 8 GPUs, got %d", len(g.InstanceStats))
	}
	for i := 0; i < 8; i++ {
		ds := g.InstanceStats[gpus.device(i).UUID]
		if ds == nil {
			t.Fatalf("no stats for GPU %d", i)
		}
		if ds.Summary == nil || ds.Summary.IntNumeratorVal == nil || *ds.Summary.IntNumeratorVal != int64(10*i) || ds.Summary.Unit != "%" {
			t.Errorf("GPU %d: summary %#v, want GPU utilisation %d %%", i, ds.Summary, 10*i)
		}
		checks := map[string]int64{
			StatGPUUtilization:    int64(10 * i),
			StatMemoryUtilization: int64(5 * i),
			StatMemoryState:       int64(1024 * i),
			StatPowerUsage:        int64(100 + i),
			StatTemperature:       int64(40 + i),
		}
		for name, want := range checks {
			if got := statInt(t, ds, name); got != want {
				t.Errorf("GPU %d: %s = %d, want %d", i, name, got, want)
			}
		}
		if d := ds.Stats.Attributes[StatMemoryState].IntDenominatorVal; d == nil || *d != 40960 {
			t.Errorf("GPU %d: memory total %v, want 40960 MiB", i, d)
		}
		if d := ds.Stats.Attributes[StatPowerUsage].IntDenominatorVal; d == nil || *d != 400 {
			t.Errorf("GPU %d: power limit %v, want 400 W", i, d)
		}
		if ds.Timestamp.IsZero() {
			t.Errorf("GPU %d: no timestamp", i)
		}
	}
}

func TestNVMLMIG(t *testing.T) {
	gpus := newMockGPUs()
	migIDs := gpus.enableMIG(t, 0, 3)
	p, _ := newTestPlugin(t, gpus, map[string]interface{}{})

	ch, _ := p.Fingerprint(testContext(t))
	f, _ := nextFingerprint(t, ch)
	if len(f.Devices) != 2 {
		t.Fatalf("want 2 groups (whole GPUs and MIG instances), got %d", len(f.Devices))
	}
	var whole, mig *device.DeviceGroup
	for _, g := range f.Devices {
		if strings.Contains(g.Name, "MIG") {
			mig = g
		} else {
			whole = g
		}
	}
	if whole == nil || mig == nil {
		t.Fatalf("groups %q %q: want one whole-GPU and one MIG group", f.Devices[0].Name, f.Devices[1].Name)
	}
	if mig.Name != "NVIDIA A100-SXM4-40GB MIG 1g.5gb" {
		t.Errorf("MIG group name %q", mig.Name)
	}
	if len(whole.Devices) != 7 {
		t.Errorf("want 7 whole GPUs (GPU 0 is split), got %d", len(whole.Devices))
	}
	if _, ok := devicesByID(f.Devices)[gpus.device(0).UUID]; ok {
		t.Error("GPU 0 is in MIG mode but was reported as a whole device")
	}
	if len(mig.Devices) != 3 {
		t.Fatalf("want 3 MIG devices, got %d", len(mig.Devices))
	}
	for i, d := range mig.Devices {
		if d.ID != migIDs[i] || !d.Healthy {
			t.Errorf("MIG device %d: %s healthy=%t, want %s healthy", i, d.ID, d.Healthy, migIDs[i])
		}
		if d.HwLocality == nil || d.HwLocality.PciBusID != gpus.device(0).PciBusID {
			t.Errorf("MIG device %d: locality %#v, want parent's PCI bus", i, d.HwLocality)
		}
	}
	if got := mig.Attributes[AttrMIG].GoString(); got != "true" {
		t.Errorf("MIG group attribute mig = %s", got)
	}
	if got := mig.Attributes[AttrMemory].GoString(); got != "4864MiB" {
		t.Errorf("MIG group memory = %s, want 4864 MiB (1g.5gb)", got)
	}

	// MIG instances report memory but no utilisation, power or temperature.
	s := nextStats(t, mustStats(t, p))
	var migStats *device.DeviceGroupStats
	for _, g := range s.Groups {
		if g.Name == mig.Name {
			migStats = g
		}
	}
	if migStats == nil || len(migStats.InstanceStats) != 3 {
		t.Fatalf("MIG stats group missing or incomplete: %#v", migStats)
	}
	ds := migStats.InstanceStats[migIDs[0]]
	if ds.Summary.StringVal == nil || *ds.Summary.StringVal != "N/A" {
		t.Errorf("MIG summary %#v, want N/A", ds.Summary)
	}
	if got := statInt(t, ds, StatMemoryState); got != 4864/4 {
		t.Errorf("MIG memory used %d, want %d", got, 4864/4)
	}

	// Reserve hands out MIG UUIDs, which CUDA accepts in CUDA_VISIBLE_DEVICES.
	res, err := p.Reserve(migIDs[:2])
	if err != nil {
		t.Fatal(err)
	}
	if want := migIDs[0] + "," + migIDs[1]; res.Envs["NVIDIA_VISIBLE_DEVICES"] != want || res.Envs["CUDA_VISIBLE_DEVICES"] != want {
		t.Errorf("env %v, want both lists = %s", res.Envs, want)
	}
}

func TestNVMLReserve(t *testing.T) {
	gpus := newMockGPUs()
	p, _ := newTestPlugin(t, gpus, map[string]interface{}{})
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)

	ids := []string{gpus.device(3).UUID, gpus.device(1).UUID}
	res, err := p.Reserve(ids)
	if err != nil {
		t.Fatal(err)
	}
	want := ids[0] + "," + ids[1]
	if res.Envs["NVIDIA_VISIBLE_DEVICES"] != want {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want %q", res.Envs["NVIDIA_VISIBLE_DEVICES"], want)
	}
	if res.Envs["CUDA_VISIBLE_DEVICES"] != want {
		t.Errorf("CUDA_VISIBLE_DEVICES = %q, want %q", res.Envs["CUDA_VISIBLE_DEVICES"], want)
	}
	if len(res.Mounts) != 0 || len(res.Devices) != 0 {
		t.Errorf("unexpected mounts/devices: %#v", res)
	}
	if _, err := p.Reserve([]string{"GPU-does-not-exist"}); err == nil || !strings.Contains(err.Error(), "unknown GPU IDs: GPU-does-not-exist") {
		t.Errorf("reserving an unknown GPU: err = %v", err)
	}
}

func TestNVMLInitFails(t *testing.T) {
	lib := newFaultyLib(newMockGPUs())
	lib.initRet = nvml.ERROR_LIBRARY_NOT_FOUND
	p, logs := newTestPlugin(t, lib, map[string]interface{}{})

	ch, err := p.Fingerprint(testContext(t))
	if err != nil {
		t.Fatalf("Fingerprint: %v", err)
	}
	if f, ok := nextFingerprint(t, ch); ok {
		t.Fatalf("want the stream to end with no devices, got %#v", f)
	}
	sch, err := p.Stats(testContext(t), time.Second)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	select {
	case s, ok := <-sch:
		if ok {
			t.Fatalf("want the stats stream to end, got %#v", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stats stream did not end")
	}
	if _, err := p.Reserve([]string{"GPU-x"}); err == nil {
		t.Error("Reserve succeeded without GPUs")
	}
	// A second stream does not log again.
	ch2, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch2)

	lines := logs.lines("NVML")
	if len(lines) != 1 {
		t.Fatalf("want exactly one log line about NVML, got %d:\n%s", len(lines), logs)
	}
	for _, want := range []string{"NVML is unavailable, reporting no GPUs", "ERROR_LIBRARY_NOT_FOUND", `backend = "sim"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q lacks %q", lines[0], want)
		}
	}
}

// TestNVMLNoDriver runs the real go-nvml library: on a machine without the
// NVIDIA driver (like CI) the plugin must report no GPUs and say why, and
// on a GPU machine it must fingerprint the GPUs.
func TestNVMLNoDriver(t *testing.T) {
	logger, logs := testLogger(t)
	p := New(logger)
	if err := p.SetConfig(pluginConfig(t, map[string]interface{}{})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Shutdown)
	ch, err := p.Fingerprint(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := nextFingerprint(t, ch)
	if !ok {
		if len(logs.lines("NVML is unavailable")) != 1 {
			t.Fatalf("no GPUs and no explanation in the log:\n%s", logs)
		}
		t.Logf("no NVIDIA driver here: %s", logs.lines("NVML")[0])
		return
	}
	devs := devicesByID(f.Devices)
	t.Logf("real NVML: %d GPUs", len(devs))
	for _, g := range f.Devices {
		t.Logf("group %q attributes %v", g.Name, g.Attributes)
		for _, d := range g.Devices {
			t.Logf("  %s healthy=%t %s", d.ID, d.Healthy, d.HealthDesc)
		}
	}
	s := nextStats(t, mustStats(t, p))
	for _, g := range s.Groups {
		for id, ds := range g.InstanceStats {
			t.Logf("stats %s: %s", id, formatStats(ds))
		}
	}
}

func TestNVMLDeviceQueryFails(t *testing.T) {
	lib := newFaultyLib(newMockGPUs())
	gpus := lib.nvmlLib.(*mockGPUs)
	lib.fail(3, "GetMemoryInfo", nvml.ERROR_GPU_IS_LOST)
	p, _ := newTestPlugin(t, lib, map[string]interface{}{"fingerprint_period": "100ms"})

	ch, _ := p.Fingerprint(testContext(t))
	f, _ := nextFingerprint(t, ch)
	devs := devicesByID(f.Devices)
	if len(devs) != 8 {
		t.Fatalf("want all 8 GPUs reported, got %d", len(devs))
	}
	bad := devs[gpus.device(3).UUID]
	if bad.Healthy || !strings.Contains(bad.HealthDesc, "nvml GetMemoryInfo: ERROR_GPU_IS_LOST") {
		t.Fatalf("GPU 3: healthy=%t %q, want unhealthy with the NVML error", bad.Healthy, bad.HealthDesc)
	}
	for id, d := range devs {
		if id != bad.ID && !d.Healthy {
			t.Errorf("GPU %s unhealthy: %s", id, d.HealthDesc)
		}
	}

	// Stats keep flowing for the other GPUs.
	s := nextStats(t, mustStats(t, p))
	if n := len(s.Groups[0].InstanceStats); n != 8 {
		t.Errorf("stats for %d GPUs, want 8", n)
	}
	if ds := s.Groups[0].InstanceStats[gpus.device(4).UUID]; statInt(t, ds, StatGPUUtilization) != 40 {
		t.Errorf("GPU 4 utilisation wrong: %v", ds.Summary)
	}

	// The GPU recovers: it becomes healthy again at the next fingerprint.
	lib.fail(3, "GetMemoryInfo", nvml.SUCCESS)
	f = waitFingerprint(t, ch, func(devs map[string]*device.Device) bool { return devs[bad.ID].Healthy })
	if d := devicesByID(f.Devices)[bad.ID]; d.HealthDesc != "" {
		t.Errorf("recovered GPU keeps reason %q", d.HealthDesc)
	}
}

func TestNVMLLostGPUKeepsItsID(t *testing.T) {
	lib := newFaultyLib(newMockGPUs())
	gpus := lib.nvmlLib.(*mockGPUs)
	p, _ := newTestPlugin(t, lib, map[string]interface{}{"fingerprint_period": "100ms"})
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)

	// GPU 6 stops answering entirely: it stays listed, unhealthy.
	lib.fail(6, "DeviceGetHandleByIndex", nvml.ERROR_GPU_IS_LOST)
	id := gpus.device(6).UUID
	f := waitFingerprint(t, ch, func(devs map[string]*device.Device) bool { return devs[id] != nil && !devs[id].Healthy })
	if d := devicesByID(f.Devices)[id]; !strings.Contains(d.HealthDesc, "DeviceGetHandleByIndex: ERROR_GPU_IS_LOST") {
		t.Errorf("reason %q", d.HealthDesc)
	}
	if len(devicesByID(f.Devices)) != 8 {
		t.Errorf("want 8 GPUs still listed")
	}
}

func TestNVMLStatsQueryFails(t *testing.T) {
	lib := newFaultyLib(newMockGPUs())
	gpus := lib.nvmlLib.(*mockGPUs)
	p, _ := newTestPlugin(t, lib, map[string]interface{}{})
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)

	lib.fail(2, "GetUtilizationRates", nvml.ERROR_UNKNOWN)
	id := gpus.device(2).UUID
	s := nextStats(t, mustStats(t, p))
	ds := s.Groups[0].InstanceStats[id]
	if ds.Summary.StringVal == nil || *ds.Summary.StringVal != "N/A" {
		t.Errorf("failed utilisation summary %#v, want N/A", ds.Summary)
	}
	if statInt(t, ds, StatTemperature) != 42 {
		t.Error("other figures of the GPU should still be reported")
	}
	f := waitFingerprint(t, ch, func(devs map[string]*device.Device) bool { return !devs[id].Healthy })
	if d := devicesByID(f.Devices)[id]; !strings.Contains(d.HealthDesc, "nvml GetUtilizationRates: ERROR_UNKNOWN") {
		t.Errorf("reason %q", d.HealthDesc)
	}

	lib.fail(2, "GetUtilizationRates", nvml.SUCCESS)
	waitFingerprint(t, ch, func(devs map[string]*device.Device) bool { return devs[id].Healthy })
}

func TestNVMLCriticalXid(t *testing.T) {
	gpus := newMockGPUs()
	migIDs := gpus.enableMIG(t, 1, 2)
	p, logs := newTestPlugin(t, gpus, map[string]interface{}{})
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)

	// An application Xid (13) leaves the GPU healthy.
	gpus.events <- nvml.EventData{Device: gpus.device(5), EventType: nvml.EventTypeXidCriticalError, EventData: 13, GpuInstanceId: noInstanceID}
	// A critical one (79: GPU fell off the bus) makes it unhealthy.
	gpus.events <- nvml.EventData{Device: gpus.device(4), EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: noInstanceID}
	id := gpus.device(4).UUID
	f := waitFingerprint(t, ch, func(devs map[string]*device.Device) bool { return !devs[id].Healthy })
	devs := devicesByID(f.Devices)
	if !strings.Contains(devs[id].HealthDesc, "critical Xid 79") {
		t.Errorf("reason %q", devs[id].HealthDesc)
	}
	if !devs[gpus.device(5).UUID].Healthy {
		t.Errorf("application Xid 13 made GPU 5 unhealthy: %s", devs[gpus.device(5).UUID].HealthDesc)
	}
	if len(logs.lines("application Xid error")) != 1 {
		t.Errorf("application Xid not logged:\n%s", logs)
	}

	// On a MIG GPU, the Xid hits the instance it names.
	gpus.events <- nvml.EventData{Device: gpus.device(1), EventType: nvml.EventTypeXidCriticalError, EventData: 48, GpuInstanceId: 1}
	f = waitFingerprint(t, ch, func(devs map[string]*device.Device) bool { return !devs[migIDs[1]].Healthy })
	if !devicesByID(f.Devices)[migIDs[0]].Healthy {
		t.Error("Xid on GPU instance 1 made instance 0 unhealthy")
	}
}

// waitFingerprint reads fingerprints until cond holds.
func waitFingerprint(t *testing.T, ch <-chan *device.FingerprintResponse, cond func(map[string]*device.Device) bool) *device.FingerprintResponse {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-ch:
			if !ok {
				t.Fatal("fingerprint stream ended")
			}
			if f.Error != nil {
				t.Fatalf("fingerprint error: %v", f.Error)
			}
			if cond(devicesByID(f.Devices)) {
				return f
			}
		case <-deadline:
			t.Fatal("condition not met by any fingerprint within 10s")
		}
	}
}

// formatStats renders a device's statistics for test logs.
func formatStats(ds *device.DeviceStats) string {
	var parts []string
	for name, v := range ds.Stats.Attributes {
		switch {
		case v.IntNumeratorVal != nil && v.IntDenominatorVal != nil:
			parts = append(parts, fmt.Sprintf("%s=%d/%d %s", name, *v.IntNumeratorVal, *v.IntDenominatorVal, v.Unit))
		case v.IntNumeratorVal != nil:
			parts = append(parts, fmt.Sprintf("%s=%d %s", name, *v.IntNumeratorVal, v.Unit))
		case v.StringVal != nil:
			parts = append(parts, fmt.Sprintf("%s=%s", name, *v.StringVal))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
