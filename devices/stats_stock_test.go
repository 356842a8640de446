package devices

import (
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/plugins/device"
)

// stockStatUnits are nomad-device-nvidia's statistics and their units
// (its stats.go): the shape sim_stats_shape = "nomad-device-nvidia" sends.
var stockStatUnits = map[string]string{
	"Power usage":         "W",
	"GPU utilization":     "%",
	"Memory utilization":  "%",
	"Encoder utilization": "%",
	"Decoder utilization": "%",
	"Temperature":         "C",
	"Memory state":        "MiB",
	"BAR1 buffer state":   "MiB",
	"ECC L1 errors":       "#",
	"ECC L2 errors":       "#",
	"ECC memory errors":   "#",
}

// In the stock shape a simulated GPU's Summary is its memory used in MiB,
// out of its total, and its utilisation one statistic among the stock
// plugin's eleven: an idle GPU holding a big model has a big Summary.
func TestSimStockStatsShape(t *testing.T) {
	p, dir := simPlugin(t, map[string]interface{}{"sim_stats_shape": "nomad-device-nvidia", "sim_count": 2})
	ch, _ := p.Fingerprint(testContext(t))
	f, _ := nextFingerprint(t, ch)
	if g := f.Devices[0]; g.Attributes[AttrSimulated].GoString() != "true" || g.Name != "Simulated A100" {
		t.Errorf("the stock-shaped GPUs are not labelled simulated: %s %v", g.Name, g.Attributes[AttrSimulated])
	}
	idle, busy := SimUUID(dir, 0), SimUUID(dir, 1)
	write := func(id, activity string) {
		res, err := p.Reserve([]string{id})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(res.Envs[EnvSimActivityFile], []byte(activity), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	write(idle, "2 30000")
	write(busy, "95 300")

	stats := mustStats(t, p)
	var s *device.StatsResponse
	for range 20 { // until a round has read both files
		s = nextStats(t, stats)
		if len(s.Groups) == 1 && s.Groups[0].InstanceStats[idle].Summary.IntNumeratorVal != nil &&
			*s.Groups[0].InstanceStats[idle].Summary.IntNumeratorVal == 30000 {
			break
		}
	}
	if len(s.Groups) != 1 {
		t.Fatalf("%d groups", len(s.Groups))
	}
	g := s.Groups[0]
	if g.Vendor != "nvidia" || g.Type != "gpu" || g.Name != "Simulated A100" {
		t.Errorf("group %s/%s/%s", g.Vendor, g.Type, g.Name)
	}
	for id, want := range map[string][2]int64{idle: {2, 30000}, busy: {95, 300}} {
		d := g.InstanceStats[id]
		if d == nil {
			t.Fatalf("no stats for %s", id)
		}
		if d.Summary.Unit != "MiB" || *d.Summary.IntNumeratorVal != want[1] || *d.Summary.IntDenominatorVal != 40960 {
			t.Errorf("%s: Summary %+v, want the memory used, %d MiB of 40960", id, d.Summary, want[1])
		}
		if d.Summary != d.Stats.Attributes["Memory state"] {
			t.Errorf("%s: the Summary is not the \"Memory state\" statistic", id)
		}
		if len(d.Stats.Attributes) != len(stockStatUnits) {
			t.Errorf("%s: %d statistics, want the stock plugin's %d", id, len(d.Stats.Attributes), len(stockStatUnits))
		}
		for name, unit := range stockStatUnits {
			v := d.Stats.Attributes[name]
			if v == nil || v.Unit != unit || v.Desc == "" {
				t.Errorf("%s: statistic %q = %+v, want it in %q with a description", id, name, v, unit)
			}
		}
		if u := d.Stats.Attributes["GPU utilization"]; u.IntNumeratorVal == nil || *u.IntNumeratorVal != want[0] {
			t.Errorf("%s: GPU utilization %+v, want %d", id, u, want[0])
		}
	}
}

// Like the stock plugin, the stock shape sends no stats for MIG instances.
func TestSimStockStatsLeaveOutMIG(t *testing.T) {
	p, _ := simPlugin(t, map[string]interface{}{"sim_stats_shape": "nomad-device-nvidia", "sim_count": 1,
		"sim_mig_profile": "1g.10gb", "sim_mig_count": 2})
	ch, _ := p.Fingerprint(testContext(t))
	if f, _ := nextFingerprint(t, ch); len(f.Devices) != 1 || len(f.Devices[0].Devices) != 2 {
		t.Fatalf("fingerprint %+v, want two MIG devices", f)
	}
	if s := nextStats(t, mustStats(t, p)); len(s.Groups) != 0 {
		t.Errorf("stats for MIG instances: %+v", s.Groups)
	}
}

func TestSimStatsShapeConfig(t *testing.T) {
	cfg, err := parseConfig(pluginConfig(t, map[string]interface{}{"backend": "sim", "sim_stats_shape": "nomad-device-nvidia"}))
	if err != nil || cfg.SimStatsShape != StatsShapeStock {
		t.Errorf("%+v %v", cfg, err)
	}
	if cfg, _ := parseConfig(pluginConfig(t, map[string]interface{}{"backend": "sim"})); cfg.SimStatsShape != StatsShapeSteward {
		t.Errorf("default shape %q", cfg.SimStatsShape)
	}
	for _, tc := range []struct {
		values map[string]interface{}
		want   string
	}{
		{map[string]interface{}{"backend": "sim", "sim_stats_shape": "dcgm"}, `sim_stats_shape "dcgm": must be "steward-gpu" or "nomad-device-nvidia"`},
		{map[string]interface{}{"sim_stats_shape": "nomad-device-nvidia"}, "only the simulated backend"},
	} {
		if _, err := parseConfig(pluginConfig(t, tc.values)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.values, err, tc.want)
		}
	}
}
