package devices

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-steward/steward/internal/pluginspec"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
)

// Backends the plugin can run.
const (
	BackendNVML = "nvml"
	BackendSim  = "sim"
)

// Stats shapes of the simulated backend (sim_stats_shape): steward-gpu's
// own, whose Summary is the utilisation, or exactly that of HashiCorp's
// nomad-device-nvidia, whose Summary is the memory used (stats_stock.go).
const (
	StatsShapeSteward = "steward-gpu"
	StatsShapeStock   = "nomad-device-nvidia"
)

// Defaults of the plugin block's config options (documented in docs/reference/devices.md).
const (
	defaultFingerprintPeriod = time.Minute
	defaultSimCount          = 4
	defaultSimModel          = "Simulated A100"
	defaultSimMemoryMiB      = 40960
	maxSimCount              = 64
)

// DefaultSimStateDir is where the simulated backend keeps its per-device
// activity files unless sim_state_dir says otherwise.
func DefaultSimStateDir() string {
	return filepath.Join(os.TempDir(), "steward-gpu-sim")
}

// configSpec is the schema of the agent's plugin "steward-gpu" { config { } }
// block. Nomad decodes the block with it and hands SetConfig the msgpack.
var configSpec = hclspec.NewObject(map[string]*hclspec.Spec{
	"enabled":            pluginspec.Optional("enabled", "bool", "true"),
	"backend":            pluginspec.Optional("backend", "string", `"nvml"`),
	"ignored_gpu_ids":    pluginspec.Optional("ignored_gpu_ids", "list(string)", "[]"),
	"fingerprint_period": pluginspec.Optional("fingerprint_period", "string", `"1m"`),
	"stats_period":       pluginspec.Optional("stats_period", "string", `""`),
	"sim_count":          pluginspec.Optional("sim_count", "number", fmt.Sprint(defaultSimCount)),
	"sim_model":          pluginspec.Optional("sim_model", "string", fmt.Sprintf("%q", defaultSimModel)),
	"sim_memory_mib":     pluginspec.Optional("sim_memory_mib", "number", fmt.Sprint(defaultSimMemoryMiB)),
	"sim_state_dir":      pluginspec.Optional("sim_state_dir", "string", `""`),
	"sim_mig_profile":    pluginspec.Optional("sim_mig_profile", "string", `""`),
	"sim_mig_count":      pluginspec.Optional("sim_mig_count", "number", "0"),
	"sim_stats_shape":    pluginspec.Optional("sim_stats_shape", "string", fmt.Sprintf("%q", StatsShapeSteward)),
	"sim_task_mounts":    pluginspec.Optional("sim_task_mounts", "bool", "true"),
})

// rawConfig is the msgpack form of the plugin block.
type rawConfig struct {
	Enabled           bool     `codec:"enabled"`
	Backend           string   `codec:"backend"`
	IgnoredGPUIDs     []string `codec:"ignored_gpu_ids"`
	FingerprintPeriod string   `codec:"fingerprint_period"`
	StatsPeriod       string   `codec:"stats_period"`
	SimCount          int      `codec:"sim_count"`
	SimModel          string   `codec:"sim_model"`
	SimMemoryMiB      int64    `codec:"sim_memory_mib"`
	SimStateDir       string   `codec:"sim_state_dir"`
	SimMIGProfile     string   `codec:"sim_mig_profile"`
	SimMIGCount       int      `codec:"sim_mig_count"`
	SimStatsShape     string   `codec:"sim_stats_shape"`
	SimTaskMounts     bool     `codec:"sim_task_mounts"`
}

// Config is the validated plugin configuration.
type Config struct {
	Enabled           bool
	Backend           string
	IgnoredGPUIDs     map[string]struct{}
	FingerprintPeriod time.Duration
	// StatsPeriod, when non-zero, is the shortest interval between two
	// stats rounds; Nomad's requested interval is used when it is longer.
	StatsPeriod  time.Duration
	SimCount     int
	SimModel     string
	SimMemoryMiB uint64
	SimStateDir  string
	// SimMIGProfile, when set, splits every simulated GPU into
	// SimMIGCount MIG instances of that profile ("1g.10gb"), as a GPU in
	// MIG mode shows only its instances: devices named
	// "<sim_model> MIG <profile>" with attribute mig = true.
	SimMIGProfile string
	SimMIGCount   int
	// SimStatsShape is the shape of the simulated GPUs' stats:
	// StatsShapeSteward, or StatsShapeStock to stand in for
	// nomad-device-nvidia in tests and demos without a GPU.
	SimStatsShape string
	// SimTaskMounts mounts each reserved GPU's activity dir into the task
	// (container drivers). Off, a container cannot report simulated
	// activity, but keeps its host volumes: Nomad v1.11.3 replaces the
	// mounts its volume hook gave a task with those of its device hook
	// when a device plugin returns any
	// (client/allocrunner/taskrunner/task_runner_hooks.go), so a
	// container asking for simulated GPUs and a host volume loses the
	// volume. (Real GPUs, steward-gpu's NVML backend and the stock plugin
	// return no mounts.)
	SimTaskMounts bool
}

// DefaultConfig is the configuration of an empty plugin block.
func DefaultConfig() Config {
	return Config{
		Enabled:           true,
		Backend:           BackendNVML,
		IgnoredGPUIDs:     map[string]struct{}{},
		FingerprintPeriod: defaultFingerprintPeriod,
		SimCount:          defaultSimCount,
		SimModel:          defaultSimModel,
		SimMemoryMiB:      defaultSimMemoryMiB,
		SimStateDir:       DefaultSimStateDir(),
		SimStatsShape:     StatsShapeSteward,
		SimTaskMounts:     true,
	}
}

// parseConfig decodes and validates the msgpack config Nomad sends.
func parseConfig(c *base.Config) (Config, error) {
	cfg := DefaultConfig()
	if c == nil || len(c.PluginConfig) == 0 {
		return cfg, nil
	}
	var raw rawConfig
	if err := base.MsgPackDecode(c.PluginConfig, &raw); err != nil {
		return cfg, fmt.Errorf("decoding plugin config: %w", err)
	}
	return raw.validate()
}

// parseMIGProfile reads a MIG profile name, "<slices>g.<memory>gb"
// ("1g.10gb", "3g.40gb"): the compute slices of a GPU's 7 it takes, and its
// memory in GiB.
func parseMIGProfile(p string) (slices, memGiB int, err error) {
	g, mem, ok := strings.Cut(p, "g.")
	if !ok || !strings.HasSuffix(mem, "gb") {
		return 0, 0, fmt.Errorf("not a MIG profile like 1g.10gb")
	}
	slices, err1 := strconv.Atoi(g)
	memGiB, err2 := strconv.Atoi(strings.TrimSuffix(mem, "gb"))
	if err1 != nil || err2 != nil || slices < 1 || slices > 7 || memGiB < 1 {
		return 0, 0, fmt.Errorf("not a MIG profile like 1g.10gb")
	}
	return slices, memGiB, nil
}

func (r rawConfig) validate() (Config, error) {
	cfg := DefaultConfig()
	cfg.Enabled = r.Enabled
	switch r.Backend {
	case "", BackendNVML:
		cfg.Backend = BackendNVML
	case BackendSim:
		cfg.Backend = BackendSim
	default:
		return cfg, fmt.Errorf("backend %q: must be %q or %q", r.Backend, BackendNVML, BackendSim)
	}
	for _, id := range r.IgnoredGPUIDs {
		cfg.IgnoredGPUIDs[id] = struct{}{}
	}
	if r.FingerprintPeriod != "" {
		d, err := time.ParseDuration(r.FingerprintPeriod)
		if err != nil {
			return cfg, fmt.Errorf("fingerprint_period %q: %w", r.FingerprintPeriod, err)
		}
		if d <= 0 {
			return cfg, fmt.Errorf("fingerprint_period %q: must be positive", r.FingerprintPeriod)
		}
		cfg.FingerprintPeriod = d
	}
	if r.StatsPeriod != "" {
		d, err := time.ParseDuration(r.StatsPeriod)
		if err != nil {
			return cfg, fmt.Errorf("stats_period %q: %w", r.StatsPeriod, err)
		}
		if d < 0 {
			return cfg, fmt.Errorf("stats_period %q: must not be negative", r.StatsPeriod)
		}
		cfg.StatsPeriod = d
	}
	if r.SimCount < 0 || r.SimCount > maxSimCount {
		return cfg, fmt.Errorf("sim_count %d: must be between 0 and %d", r.SimCount, maxSimCount)
	}
	cfg.SimCount = r.SimCount
	cfg.SimTaskMounts = r.SimTaskMounts
	if r.SimModel != "" {
		cfg.SimModel = r.SimModel
	}
	if r.SimMemoryMiB < 0 {
		return cfg, fmt.Errorf("sim_memory_mib %d: must not be negative", r.SimMemoryMiB)
	}
	if r.SimMemoryMiB > 0 {
		cfg.SimMemoryMiB = uint64(r.SimMemoryMiB)
	}
	switch {
	case r.SimMIGProfile == "" && r.SimMIGCount != 0:
		return cfg, fmt.Errorf("sim_mig_count %d: give sim_mig_profile too (e.g. \"1g.10gb\")", r.SimMIGCount)
	case r.SimMIGProfile != "":
		if _, _, err := parseMIGProfile(r.SimMIGProfile); err != nil {
			return cfg, fmt.Errorf("sim_mig_profile %q: %w", r.SimMIGProfile, err)
		}
		if r.SimMIGCount < 1 || r.SimMIGCount > 7 {
			return cfg, fmt.Errorf("sim_mig_count %d: a GPU holds 1 to 7 MIG instances", r.SimMIGCount)
		}
		cfg.SimMIGProfile, cfg.SimMIGCount = r.SimMIGProfile, r.SimMIGCount
	}
	switch r.SimStatsShape {
	case "", StatsShapeSteward:
	case StatsShapeStock:
		if cfg.Backend != BackendSim {
			return cfg, fmt.Errorf("sim_stats_shape %q: only the simulated backend (backend = %q) takes a stats shape; on real GPUs run nomad-device-nvidia itself", r.SimStatsShape, BackendSim)
		}
		cfg.SimStatsShape = StatsShapeStock
	default:
		return cfg, fmt.Errorf("sim_stats_shape %q: must be %q or %q", r.SimStatsShape, StatsShapeSteward, StatsShapeStock)
	}
	if r.SimStateDir != "" {
		dir, err := filepath.Abs(r.SimStateDir)
		if err != nil {
			return cfg, fmt.Errorf("sim_state_dir %q: %w", r.SimStateDir, err)
		}
		cfg.SimStateDir = dir
	}
	return cfg, nil
}
