package devices

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/nomad/plugins/device"
)

// stockAttrs are the six attributes nomad-device-nvidia fingerprints that
// steward-gpu lacked, as an A100-SXM4-40GB gives them, in the stock
// plugin's names and units.
var stockAttrs = map[string]string{
	AttrBAR1:            "65536MiB",
	AttrCoresClock:      "1410MHz",
	AttrMemoryClock:     "1215MHz",
	AttrPCIBandwidth:    "32768MB/s",
	AttrDisplayState:    "0",
	AttrPersistenceMode: "1",
}

func checkAttrs(t *testing.T, g *device.DeviceGroup, want map[string]string) {
	t.Helper()
	for k, v := range want {
		a, ok := g.Attributes[k]
		switch {
		case v == "" && ok:
			t.Errorf("attribute %s = %s, want it left out", k, a.GoString())
		case v == "":
		case !ok:
			t.Errorf("attribute %s missing", k)
		case a.GoString() != v:
			t.Errorf("attribute %s = %s, want %s", k, a.GoString(), v)
		}
	}
}

// NVML (go-nvml's dgxa100 mock): the six attributes in the stock plugin's
// names and units; a MIG instance has its parent's.
func TestNVMLStockPluginAttributes(t *testing.T) {
	gpus := newMockGPUs()
	gpus.enableMIG(t, 7, 1)
	p, _ := newTestPlugin(t, gpus, map[string]interface{}{})
	ch, err := p.Fingerprint(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := nextFingerprint(t, ch)
	if !ok || len(f.Devices) != 2 {
		t.Fatalf("fingerprint %+v, want two groups (whole GPUs and MIG)", f)
	}
	for _, g := range f.Devices {
		checkAttrs(t, g, stockAttrs)
		if err := g.Validate(); err != nil {
			t.Errorf("group %s does not validate: %v", g.Name, err)
		}
	}
}

// A board query NVML cannot answer leaves its attribute out; the GPU
// stays healthy.
func TestNVMLStockAttributeUnsupported(t *testing.T) {
	gpus := newMockGPUs()
	for i := range gpus.Devices {
		d := gpus.device(i)
		d.GetBAR1MemoryInfoFunc = func() (nvml.BAR1Memory, nvml.Return) { return nvml.BAR1Memory{}, nvml.ERROR_NOT_SUPPORTED }
		d.GetDisplayModeFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	}
	p, _ := newTestPlugin(t, gpus, map[string]interface{}{})
	ch, err := p.Fingerprint(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := nextFingerprint(t, ch)
	if !ok || len(f.Devices) != 1 {
		t.Fatalf("fingerprint %+v", f)
	}
	g := f.Devices[0]
	checkAttrs(t, g, map[string]string{AttrBAR1: "", AttrDisplayState: "", AttrPCIBandwidth: "",
		AttrCoresClock: "1410MHz", AttrPersistenceMode: "1"})
	for _, d := range g.Devices {
		if !d.Healthy {
			t.Errorf("GPU %s unhealthy (%s) for an attribute it cannot report", d.ID, d.HealthDesc)
		}
	}
}

// The stock plugin's PCIe bandwidth: per lane 1, 2, 3, 4 GiB/s for
// generations 3 to 6, unknown otherwise.
func TestPCIBandwidth(t *testing.T) {
	for _, tc := range []struct {
		gen, width int
		want       uint32
	}{{3, 16, 16384}, {4, 16, 32768}, {5, 16, 49152}, {6, 8, 32768}, {2, 16, 0}, {4, 0, 0}} {
		if got := pciBandwidthMBs(tc.gen, tc.width); got != tc.want {
			t.Errorf("gen %d x%d: %d MB/s, want %d", tc.gen, tc.width, got, tc.want)
		}
	}
}
