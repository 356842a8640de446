package devices

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/base"
)

func TestConfigDefaults(t *testing.T) {
	cfg, err := parseConfig(pluginConfig(t, map[string]interface{}{}))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Enabled || cfg.Backend != BackendNVML || cfg.FingerprintPeriod != time.Minute || cfg.StatsPeriod != 0 ||
		cfg.SimCount != 4 || cfg.SimModel != "Simulated A100" || cfg.SimMemoryMiB != 40960 ||
		cfg.SimStateDir != DefaultSimStateDir() || len(cfg.IgnoredGPUIDs) != 0 {
		t.Errorf("defaults: %+v", cfg)
	}
	// No config at all (plugin used without SetConfig data).
	if cfg, err := parseConfig(&base.Config{}); err != nil || cfg.Backend != BackendNVML || !cfg.Enabled {
		t.Errorf("empty config: %+v %v", cfg, err)
	}
}

func TestConfigValues(t *testing.T) {
	cfg, err := parseConfig(pluginConfig(t, map[string]interface{}{
		"backend":            "sim",
		"ignored_gpu_ids":    []interface{}{"GPU-a", "GPU-b"},
		"fingerprint_period": "30s",
		"stats_period":       "5s",
		"sim_count":          8,
		"sim_model":          "Simulated H100",
		"sim_memory_mib":     81920,
		"sim_state_dir":      "/var/lib/steward-sim",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Backend != BackendSim || len(cfg.IgnoredGPUIDs) != 2 || cfg.FingerprintPeriod != 30*time.Second ||
		cfg.StatsPeriod != 5*time.Second || cfg.SimCount != 8 || cfg.SimModel != "Simulated H100" ||
		cfg.SimMemoryMiB != 81920 || cfg.SimStateDir != "/var/lib/steward-sim" {
		t.Errorf("config: %+v", cfg)
	}
}

func TestConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		values map[string]interface{}
		want   string
	}{
		{map[string]interface{}{"backend": "cuda"}, `backend "cuda": must be "nvml" or "sim"`},
		{map[string]interface{}{"fingerprint_period": "soon"}, `fingerprint_period "soon"`},
		{map[string]interface{}{"fingerprint_period": "0s"}, "must be positive"},
		{map[string]interface{}{"stats_period": "-1s"}, "must not be negative"},
		{map[string]interface{}{"sim_count": 1000}, "sim_count 1000: must be between 0 and 64"},
		{map[string]interface{}{"sim_memory_mib": -1}, "sim_memory_mib -1"},
		{map[string]interface{}{"sim_mig_profile": "small"}, `sim_mig_profile "small": not a MIG profile like 1g.10gb`},
		{map[string]interface{}{"sim_mig_profile": "1g.10gb", "sim_mig_count": 8}, "sim_mig_count 8: a GPU holds 1 to 7 MIG instances"},
		{map[string]interface{}{"sim_mig_count": 2}, "sim_mig_count 2: give sim_mig_profile too"},
	} {
		p := newPlugin(nil, nil)
		err := p.SetConfig(pluginConfig(t, tc.values))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.values, err, tc.want)
		}
	}
}

func TestStatsPeriodIsAFloor(t *testing.T) {
	p, _ := newTestPlugin(t, nil, map[string]interface{}{"backend": "sim", "sim_state_dir": t.TempDir(), "stats_period": "300ms"})
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)
	stats, err := p.Stats(testContext(t), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	nextStats(t, stats)
	start := time.Now()
	nextStats(t, stats)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("second round after %v: stats_period = 300ms should slow a 10ms request down", d)
	}
}
