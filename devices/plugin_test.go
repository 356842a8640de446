package devices

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcPlugin serves p over go-plugin's in-process gRPC connection, the
// same boundary the Nomad client talks to, and returns the client side.
func grpcPlugin(t *testing.T, p device.DevicePlugin) device.DevicePlugin {
	t.Helper()
	// go-plugin puts its socket in the temp dir and does not remove it.
	t.Setenv("TMPDIR", t.TempDir())
	client, _ := plugin.TestPluginGRPCConn(t, true, map[string]plugin.Plugin{
		base.PluginTypeBase:   &base.PluginBase{Impl: p},
		base.PluginTypeDevice: &device.PluginDevice{Impl: p},
	})
	// Closing the client shuts the server down through go-plugin's
	// controller; stopping the server as well races with that.
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(base.PluginTypeDevice)
	if err != nil {
		t.Fatalf("dispensing the device plugin: %v", err)
	}
	impl, ok := raw.(device.DevicePlugin)
	if !ok {
		t.Fatalf("dispensed %T, not a device plugin", raw)
	}
	return impl
}

// TestGRPCConformance drives the plugin through the real gRPC plugin
// boundary: PluginInfo, ConfigSchema, SetConfig, the Fingerprint stream,
// Reserve and the Stats stream, with simulated GPUs.
func TestGRPCConformance(t *testing.T) {
	logger, _ := testLogger(t)
	local := newPlugin(logger, nil)
	t.Cleanup(local.Shutdown)
	impl := grpcPlugin(t, local)

	info, err := impl.PluginInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != base.PluginTypeDevice || info.Name != "steward-gpu" || info.PluginVersion != PluginVersion ||
		len(info.PluginApiVersions) != 1 || info.PluginApiVersions[0] != device.ApiVersion010 {
		t.Errorf("PluginInfo = %+v", info)
	}

	spec, err := impl.ConfigSchema()
	if err != nil {
		t.Fatal(err)
	}
	if _, diags := hclspecutils.Convert(spec); diags.HasErrors() {
		t.Fatalf("schema from the wire does not convert: %v", diags)
	}

	dir := t.TempDir()
	if err := impl.SetConfig(pluginConfig(t, map[string]interface{}{"backend": "sim", "sim_count": 2, "sim_state_dir": dir})); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	if err := impl.SetConfig(pluginConfig(t, map[string]interface{}{"backend": "nope"})); err == nil {
		t.Error("SetConfig accepted an invalid backend over gRPC")
	}
	if err := impl.SetConfig(pluginConfig(t, map[string]interface{}{"backend": "sim", "sim_count": 2, "sim_state_dir": dir})); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fch, err := impl.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := nextFingerprint(t, fch)
	if !ok {
		t.Fatal("fingerprint stream ended")
	}
	if len(f.Devices) != 1 || len(f.Devices[0].Devices) != 2 {
		t.Fatalf("fingerprint over gRPC: %#v", f.Devices)
	}
	g := f.Devices[0]
	if g.Vendor != "nvidia" || g.Type != "gpu" || g.Name != "Simulated A100" || g.Attributes[AttrSimulated].GoString() != "true" {
		t.Errorf("group over gRPC: %s/%s/%s %v", g.Vendor, g.Type, g.Name, g.Attributes)
	}
	id := g.Devices[1].ID
	if !g.Devices[1].Healthy || g.Devices[1].HwLocality == nil || g.Devices[1].HwLocality.PciBusID == "" {
		t.Errorf("device over gRPC: %#v", g.Devices[1])
	}

	res, err := impl.Reserve([]string{id})
	if err != nil {
		t.Fatal(err)
	}
	file := res.Envs[EnvSimActivityFile]
	if res.Envs["NVIDIA_VISIBLE_DEVICES"] != id || filepath.Dir(file) != filepath.Join(dir, id) || len(res.Mounts) != 1 {
		t.Fatalf("reservation over gRPC: %#v", res)
	}
	if _, err := impl.Reserve([]string{"SIM-GPU-unknown-7"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Reserve of an unknown device over gRPC: err = %v, want InvalidArgument", err)
	}

	sch, err := impl.Stats(ctx, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("80\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		var s *device.StatsResponse
		select {
		case s = <-sch:
		case <-deadline:
			t.Fatal("utilisation 80 never arrived over the stats stream")
		}
		if s == nil || s.Error != nil {
			t.Fatalf("stats over gRPC: %#v", s)
		}
		if len(s.Groups) != 1 || s.Groups[0].Name != "Simulated A100" || len(s.Groups[0].InstanceStats) != 2 {
			t.Fatalf("stats groups over gRPC: %#v", s.Groups)
		}
		ds := s.Groups[0].InstanceStats[id]
		if ds.Summary != nil && ds.Summary.IntNumeratorVal != nil && *ds.Summary.IntNumeratorVal == 80 {
			if got := statInt(t, ds, StatGPUUtilization); got != 80 || ds.Timestamp.IsZero() {
				t.Errorf("stats over gRPC: %s at %v", formatStats(ds), ds.Timestamp)
			}
			break
		}
	}
	cancel()
}

// TestGRPCNVMLMock runs the NVML backend (dgxa100 mock) across gRPC.
func TestGRPCNVMLMock(t *testing.T) {
	gpus := newMockGPUs()
	logger, _ := testLogger(t)
	local := newPlugin(logger, func() nvmlLib { return gpus })
	t.Cleanup(local.Shutdown)
	impl := grpcPlugin(t, local)
	if err := impl.SetConfig(pluginConfig(t, map[string]interface{}{})); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	fch, _ := impl.Fingerprint(ctx)
	f, _ := nextFingerprint(t, fch)
	if n := len(devicesByID(f.Devices)); n != 8 {
		t.Fatalf("want 8 GPUs over gRPC, got %d", n)
	}
	sch, _ := impl.Stats(ctx, 50*time.Millisecond)
	s := nextStats(t, sch)
	ds := s.Groups[0].InstanceStats[gpus.device(7).UUID]
	if ds == nil || statInt(t, ds, StatGPUUtilization) != 70 {
		t.Fatalf("GPU 7 stats over gRPC: %#v", ds)
	}
}

// TestGRPCNoDriver: with NVML unavailable the fingerprint stream ends
// cleanly across gRPC (Nomad then treats the plugin as having no devices).
func TestGRPCNoDriver(t *testing.T) {
	lib := newFaultyLib(newMockGPUs())
	lib.initRet = 12 // ERROR_LIBRARY_NOT_FOUND
	local := newPlugin(nil, func() nvmlLib { return lib })
	impl := grpcPlugin(t, local)
	if err := impl.SetConfig(pluginConfig(t, map[string]interface{}{})); err != nil {
		t.Fatal(err)
	}
	fch, err := impl.Fingerprint(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := nextFingerprint(t, fch); ok {
		t.Fatalf("want the stream to end, got %#v", f)
	}
}
