package devices

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/helper/pluginutils/hclutils"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/zclconf/go-cty/cty/msgpack"
)

// mockGPUs wraps go-nvml's dgxa100 mock (8 simulated A100s) and fills in
// the calls that mock leaves out (utilisation, power, temperature, events,
// PCI bus ID, MIG devices).
type mockGPUs struct {
	*dgxa100.Server
	events chan nvml.EventData
	// mig holds the MIG devices of each GPU, by GPU index.
	mig [8][]nvml.Device
}

func newMockGPUs() *mockGPUs {
	m := &mockGPUs{Server: dgxa100.New(), events: make(chan nvml.EventData, 8)}
	for i := range m.Devices {
		i := i
		d := m.Devices[i].(*dgxa100.Device)
		d.MemoryInfo = nvml.Memory{Total: d.MemoryInfo.Total, Used: uint64(i) * 1024 * mib}
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			copy(p.BusId[:], d.PciBusID)
			return p, nvml.SUCCESS
		}
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 400000, nvml.SUCCESS }
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: uint32(5 * i)}, nvml.SUCCESS
		}
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(100000 + 1000*i), nvml.SUCCESS }
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return uint32(40 + i), nvml.SUCCESS }
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeAll, nvml.SUCCESS }
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
		// What nomad-device-nvidia also fingerprints, as an A100-SXM4-40GB
		// reports it.
		d.GetBAR1MemoryInfoFunc = func() (nvml.BAR1Memory, nvml.Return) {
			return nvml.BAR1Memory{Bar1Total: 65536 * mib, Bar1Used: 3 * mib}, nvml.SUCCESS
		}
		d.GetMaxClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			return map[nvml.ClockType]uint32{nvml.CLOCK_GRAPHICS: 1410, nvml.CLOCK_MEM: 1215}[c], nvml.SUCCESS
		}
		d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 4, nvml.SUCCESS }
		d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
		d.GetDisplayModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
		d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
		d.GetMigDeviceHandleByIndexFunc = func(n int) (nvml.Device, nvml.Return) {
			if n < len(m.mig[i]) {
				return m.mig[i][n], nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		}
	}
	m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				select {
				case e := <-m.events:
					return e, nvml.SUCCESS
				case <-time.After(time.Duration(ms) * time.Millisecond / 20):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return m
}

func (m *mockGPUs) device(i int) *dgxa100.Device { return m.Devices[i].(*dgxa100.Device) }

// enableMIG turns MIG on for GPU i and creates n 1g.5gb instances through
// the dgxa100 mock's GPU-instance API; each becomes a MIG device.
func (m *mockGPUs) enableMIG(t *testing.T, i, n int) []string {
	t.Helper()
	d := m.device(i)
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	profile, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo: %v", ret)
	}
	var ids []string
	for k := 0; k < n; k++ {
		gi, ret := d.CreateGpuInstance(&profile)
		if ret != nvml.SUCCESS {
			t.Fatalf("CreateGpuInstance: %v", ret)
		}
		info, _ := gi.GetInfo()
		uuid := fmt.Sprintf("MIG-%s-%d", strings.TrimPrefix(d.UUID, "GPU-"), k)
		ids = append(ids, uuid)
		mem := profile.MemorySizeMB * mib
		m.mig[i] = append(m.mig[i], &mock.Device{
			GetUUIDFunc:          func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetNameFunc:          func() (string, nvml.Return) { return "NVIDIA A100-SXM4-40GB MIG 1g.5gb", nvml.SUCCESS },
			GetMemoryInfoFunc:    func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: mem, Used: mem / 4}, nvml.SUCCESS },
			GetGpuInstanceIdFunc: func() (int, nvml.Return) { return int(info.Id), nvml.SUCCESS },
			GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
				return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
			},
		})
	}
	return ids
}

// faultyLib wraps an NVML implementation and makes chosen calls fail.
type faultyLib struct {
	nvmlLib
	mu      sync.Mutex
	initRet nvml.Return
	// device faults by GPU index, then by method name.
	dev map[int]map[string]nvml.Return
}

func newFaultyLib(lib nvmlLib) *faultyLib {
	return &faultyLib{nvmlLib: lib, dev: map[int]map[string]nvml.Return{}}
}

// fail makes method (e.g. "GetMemoryInfo") of GPU index return ret;
// nvml.SUCCESS clears the fault.
func (f *faultyLib) fail(index int, method string, ret nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dev[index] == nil {
		f.dev[index] = map[string]nvml.Return{}
	}
	f.dev[index][method] = ret
}

func (f *faultyLib) fault(index int, method string) nvml.Return {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dev[index][method]
}

func (f *faultyLib) Init() nvml.Return {
	if f.initRet != nvml.SUCCESS {
		return f.initRet
	}
	return f.nvmlLib.Init()
}

func (f *faultyLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if r := f.fault(i, "DeviceGetHandleByIndex"); r != nvml.SUCCESS {
		return nil, r
	}
	d, r := f.nvmlLib.DeviceGetHandleByIndex(i)
	if r != nvml.SUCCESS {
		return d, r
	}
	return &faultyDevice{Device: d, lib: f, index: i}, nvml.SUCCESS
}

// faultyDevice injects the faults of its index into the calls it overrides.
type faultyDevice struct {
	nvml.Device
	lib   *faultyLib
	index int
}

func (d *faultyDevice) GetUUID() (string, nvml.Return) {
	if r := d.lib.fault(d.index, "GetUUID"); r != nvml.SUCCESS {
		return "", r
	}
	return d.Device.GetUUID()
}

func (d *faultyDevice) GetName() (string, nvml.Return) {
	if r := d.lib.fault(d.index, "GetName"); r != nvml.SUCCESS {
		return "", r
	}
	return d.Device.GetName()
}

func (d *faultyDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if r := d.lib.fault(d.index, "GetMemoryInfo"); r != nvml.SUCCESS {
		return nvml.Memory{}, r
	}
	return d.Device.GetMemoryInfo()
}

func (d *faultyDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if r := d.lib.fault(d.index, "GetUtilizationRates"); r != nvml.SUCCESS {
		return nvml.Utilization{}, r
	}
	return d.Device.GetUtilizationRates()
}

func (d *faultyDevice) GetPowerUsage() (uint32, nvml.Return) {
	if r := d.lib.fault(d.index, "GetPowerUsage"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.Device.GetPowerUsage()
}

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// lines returns the log lines containing s.
func (l *logBuffer) lines(s string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

func testLogger(t testing.TB) (hclog.Logger, *logBuffer) {
	buf := &logBuffer{}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: buf}), buf
}

// pluginConfig encodes a plugin block's config as the Nomad agent does:
// HCL values decoded with the plugin's ConfigSchema, then msgpack.
func pluginConfig(t testing.TB, values map[string]interface{}) *base.Config {
	t.Helper()
	spec, diags := hclspecutils.Convert(configSpec)
	if diags.HasErrors() {
		t.Fatalf("converting config spec: %v", diags)
	}
	val, diags, errs := hclutils.ParseHclInterface(values, spec, nil)
	if diags.HasErrors() || len(errs) > 0 {
		t.Fatalf("parsing config %v: %v %v", values, diags, errs)
	}
	data, err := msgpack.Marshal(val, val.Type())
	if err != nil {
		t.Fatalf("encoding config: %v", err)
	}
	return &base.Config{PluginConfig: data, ApiVersion: device.ApiVersion010}
}

// newTestPlugin returns a configured plugin on lib.
func newTestPlugin(t testing.TB, lib nvmlLib, values map[string]interface{}) (*Plugin, *logBuffer) {
	t.Helper()
	logger, logs := testLogger(t)
	p := newPlugin(logger, func() nvmlLib { return lib })
	if err := p.SetConfig(pluginConfig(t, values)); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	t.Cleanup(p.Shutdown)
	return p, logs
}

// nextFingerprint waits for the next fingerprint; ok is false when the
// stream ended.
func nextFingerprint(t testing.TB, ch <-chan *device.FingerprintResponse) (*device.FingerprintResponse, bool) {
	t.Helper()
	select {
	case f, ok := <-ch:
		if ok && f.Error != nil {
			t.Fatalf("fingerprint error: %v", f.Error)
		}
		return f, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no fingerprint within 10s")
		return nil, false
	}
}

func nextStats(t testing.TB, ch <-chan *device.StatsResponse) *device.StatsResponse {
	t.Helper()
	select {
	case s, ok := <-ch:
		if !ok {
			t.Fatal("stats stream ended")
		}
		if s.Error != nil {
			t.Fatalf("stats error: %v", s.Error)
		}
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no stats within 10s")
		return nil
	}
}

// devicesByID flattens fingerprinted groups.
func devicesByID(groups []*device.DeviceGroup) map[string]*device.Device {
	out := map[string]*device.Device{}
	for _, g := range groups {
		for _, d := range g.Devices {
			out[d.ID] = d
		}
	}
	return out
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// statInt returns a device statistic's integer numerator.
func statInt(t testing.TB, ds *device.DeviceStats, name string) int64 {
	t.Helper()
	v := ds.Stats.Attributes[name]
	if v == nil || v.IntNumeratorVal == nil {
		t.Fatalf("statistic %q missing or not an integer: %#v", name, v)
	}
	return *v.IntNumeratorVal
}
