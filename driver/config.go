package driver

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"

	"github.com/gpu-steward/steward/internal/pluginspec"
	"github.com/gpu-steward/steward/policy"
)

// GPU attribution backends (plugin option gpu_backend).
const (
	GPUBackendAuto = "auto" // sim when the task has simulated GPUs, else NVML
	GPUBackendNVML = "nvml"
	GPUBackendSim  = "sim"
	GPUBackendNone = "none"
)

// Defaults of the plugin block's options (documented in docs/reference/driver.md).
const (
	// DefaultCheckpointSignal is the policy language's default
	// (preemption { checkpoint_signal = "SIGUSR1" }).
	DefaultCheckpointSignal = "SIGUSR1"
	defaultGPUSamplePeriod  = 10 * time.Second
	defaultIdleThreshold    = 10
	defaultBusyThreshold    = 20
	defaultIdleAfter        = 10 * time.Minute
	defaultBusyAfter        = 30 * time.Second
	defaultPreemptionFile   = "local/steward-preemption.env"
	// defaultDeniedIDs denies root's uid and gid (denied_host_uids/gids).
	defaultDeniedIDs = "0"
	// DefaultTaskUser runs tasks that name no user (default_user).
	DefaultTaskUser = "nobody"
	// defaultStateDir holds the job uid registry when there is no
	// checkpoint_root (state_dir).
	defaultStateDir = "/var/lib/steward-exec"
	// defaultJobUserReclaimAfter is job_user_reclaim_after's default.
	defaultJobUserReclaimAfter = time.Hour
	signalNone                 = policy.CheckpointNone
	checkpointFallbackSubdir   = "steward-checkpoint"
)

// configSpec is the schema of the agent's plugin "steward-exec" block.
var configSpec = hclspec.NewObject(map[string]*hclspec.Spec{
	"enabled":           pluginspec.Optional("enabled", "bool", "true"),
	"checkpoint_root":   pluginspec.Optional("checkpoint_root", "string", `""`),
	"checkpoint_signal": pluginspec.Optional("checkpoint_signal", "string", fmt.Sprintf("%q", DefaultCheckpointSignal)),
	"gpu_backend":       pluginspec.Optional("gpu_backend", "string", `"auto"`),
	"gpu_sample_period": pluginspec.Optional("gpu_sample_period", "string", `"10s"`),
	"idle_threshold":    pluginspec.Optional("idle_threshold", "number", fmt.Sprint(defaultIdleThreshold)),
	"busy_threshold":    pluginspec.Optional("busy_threshold", "number", fmt.Sprint(defaultBusyThreshold)),
	"idle_after":        pluginspec.Optional("idle_after", "string", `"10m"`),
	"busy_after":        pluginspec.Optional("busy_after", "string", `"30s"`),
	// Nomad's raw_exec and exec options, same names and syntax; unlike
	// theirs, the defaults deny root.
	"denied_host_uids":       pluginspec.Optional("denied_host_uids", "string", fmt.Sprintf("%q", defaultDeniedIDs)),
	"denied_host_gids":       pluginspec.Optional("denied_host_gids", "string", fmt.Sprintf("%q", defaultDeniedIDs)),
	"default_user":           pluginspec.Optional("default_user", "string", fmt.Sprintf("%q", DefaultTaskUser)),
	"job_user_ids":           pluginspec.Optional("job_user_ids", "string", fmt.Sprintf("%q", jobUIDsAuto)),
	"allowed_task_users":     hclspec.NewAttr("allowed_task_users", "list(string)", false),
	"state_dir":              pluginspec.Optional("state_dir", "string", fmt.Sprintf("%q", defaultStateDir)),
	"job_user_reclaim_after": pluginspec.Optional("job_user_reclaim_after", "string", `"1h"`),
})

// taskConfigSpec is the schema of a task's config block.
var taskConfigSpec = hclspec.NewObject(map[string]*hclspec.Spec{
	"command":           hclspec.NewAttr("command", "string", true),
	"args":              hclspec.NewAttr("args", "list(string)", false),
	"work_dir":          hclspec.NewAttr("work_dir", "string", false),
	"checkpoint_signal": hclspec.NewAttr("checkpoint_signal", "string", false),
	"signal_group":      hclspec.NewAttr("signal_group", "bool", false),
	"preemption_file":   hclspec.NewAttr("preemption_file", "string", false),
})

// rawConfig is the msgpack form of the plugin block.
type rawConfig struct {
	Enabled          bool     `codec:"enabled"`
	CheckpointRoot   string   `codec:"checkpoint_root"`
	CheckpointSignal string   `codec:"checkpoint_signal"`
	GPUBackend       string   `codec:"gpu_backend"`
	GPUSamplePeriod  string   `codec:"gpu_sample_period"`
	IdleThreshold    float64  `codec:"idle_threshold"`
	BusyThreshold    float64  `codec:"busy_threshold"`
	IdleAfter        string   `codec:"idle_after"`
	BusyAfter        string   `codec:"busy_after"`
	DeniedHostUIDs   *string  `codec:"denied_host_uids"`
	DeniedHostGIDs   *string  `codec:"denied_host_gids"`
	DefaultUser      *string  `codec:"default_user"`
	JobUserIDs       *string  `codec:"job_user_ids"`
	AllowedTaskUsers []string `codec:"allowed_task_users"`
	StateDir         string   `codec:"state_dir"`
	JobUserReclaim   string   `codec:"job_user_reclaim_after"`
}

// Config is the validated plugin configuration.
type Config struct {
	Enabled bool
	// CheckpointRoot holds per-task checkpoint dirs that outlive
	// allocations (<root>/<namespace>/<job>/<group>/<task>). Empty: the
	// alloc's shared data dir, which does not survive a new allocation.
	CheckpointRoot string
	// CheckpointSignal is the default checkpoint signal; "none" means a
	// task has none unless its config or job meta names one.
	CheckpointSignal string
	GPUBackend       string
	GPUSamplePeriod  time.Duration
	// A task's GPUs are idle after IdleAfter under IdleThreshold percent,
	// and busy again after BusyAfter at or over BusyThreshold: the gap
	// between the two thresholds is the hysteresis.
	IdleThreshold, BusyThreshold float64
	IdleAfter, BusyAfter         time.Duration
	// DeniedHostUIDs and DeniedHostGIDs are id lists ("0,10-20") no task
	// may run as: the task's uid, or any of its user's groups.
	DeniedHostUIDs, DeniedHostGIDs string
	// DefaultUser runs tasks that set no user when JobUserIDs is off;
	// "" is the agent's user.
	DefaultUser string
	// JobUserIDs ("80000-89999", the default) gives every job whose tasks
	// set no user a uid of its own from the range; "" is off. Its registry
	// is in CheckpointRoot when there is one (shared by the clients that
	// share the root), else in StateDir.
	JobUserIDs string
	// AllowedTaskUsers are the only users a task may name (user = "...");
	// empty (the default): none. A listed user must still have a uid of
	// at least minTaskUserUID, and not a denied one.
	AllowedTaskUsers []string
	// StateDir holds the job uid registry when there is no
	// CheckpointRoot.
	StateDir string
	// JobUserReclaimAfter is how long a job uid stays its job's after its
	// last task there started or stopped, once nothing runs as it and no
	// checkpoint dir is its; then another job may get it.
	JobUserReclaimAfter time.Duration
}

// DefaultConfig is the configuration of an empty plugin block.
func DefaultConfig() Config {
	return Config{
		Enabled:          true,
		CheckpointSignal: DefaultCheckpointSignal,
		GPUBackend:       GPUBackendAuto,
		GPUSamplePeriod:  defaultGPUSamplePeriod,
		IdleThreshold:    defaultIdleThreshold,
		BusyThreshold:    defaultBusyThreshold,
		IdleAfter:        defaultIdleAfter,
		BusyAfter:        defaultBusyAfter,
		DeniedHostUIDs:   defaultDeniedIDs,
		DeniedHostGIDs:   defaultDeniedIDs,
		DefaultUser:      DefaultTaskUser,
		JobUserIDs:       jobUIDsAuto,
		StateDir:         defaultStateDir,
		// Enough for a task's restarts and a held job's resumes to find
		// their uid again; files a gone job left outside its dirs (in /tmp)
		// are not looked for.
		JobUserReclaimAfter: defaultJobUserReclaimAfter,
	}
}

// parseConfig decodes and validates the msgpack config Nomad sends.
func parseConfig(c *base.Config) (Config, error) {
	if c == nil || len(c.PluginConfig) == 0 {
		return DefaultConfig(), nil
	}
	var raw rawConfig
	if err := base.MsgPackDecode(c.PluginConfig, &raw); err != nil {
		return DefaultConfig(), fmt.Errorf("decoding plugin config: %w", err)
	}
	return raw.validate()
}

func (r rawConfig) validate() (Config, error) {
	cfg := DefaultConfig()
	cfg.Enabled = r.Enabled
	if r.CheckpointRoot != "" {
		if !filepath.IsAbs(r.CheckpointRoot) {
			return cfg, fmt.Errorf("checkpoint_root %q: must be an absolute path", r.CheckpointRoot)
		}
		cfg.CheckpointRoot = filepath.Clean(r.CheckpointRoot)
	}
	if r.CheckpointSignal != "" {
		sig, err := normaliseSignal(r.CheckpointSignal)
		if err != nil {
			return cfg, fmt.Errorf("checkpoint_signal: %w", err)
		}
		cfg.CheckpointSignal = sig
	}
	switch r.GPUBackend {
	case "":
	case GPUBackendAuto, GPUBackendNVML, GPUBackendSim, GPUBackendNone:
		cfg.GPUBackend = r.GPUBackend
	default:
		return cfg, fmt.Errorf("gpu_backend %q: must be one of %q, %q, %q, %q",
			r.GPUBackend, GPUBackendAuto, GPUBackendNVML, GPUBackendSim, GPUBackendNone)
	}
	var err error
	if cfg.GPUSamplePeriod, err = positiveDuration("gpu_sample_period", r.GPUSamplePeriod, cfg.GPUSamplePeriod); err != nil {
		return cfg, err
	}
	if cfg.IdleAfter, err = positiveDuration("idle_after", r.IdleAfter, cfg.IdleAfter); err != nil {
		return cfg, err
	}
	if cfg.BusyAfter, err = positiveDuration("busy_after", r.BusyAfter, cfg.BusyAfter); err != nil {
		return cfg, err
	}
	if r.IdleThreshold < 0 || r.IdleThreshold > 100 || r.BusyThreshold < 0 || r.BusyThreshold > 100 {
		return cfg, fmt.Errorf("idle_threshold %v and busy_threshold %v: must be percentages (0-100)", r.IdleThreshold, r.BusyThreshold)
	}
	if r.BusyThreshold < r.IdleThreshold {
		return cfg, fmt.Errorf("busy_threshold %v: must not be under idle_threshold %v", r.BusyThreshold, r.IdleThreshold)
	}
	cfg.IdleThreshold, cfg.BusyThreshold = r.IdleThreshold, r.BusyThreshold
	// Absent (a config built without the schema's defaults) is the
	// default; an explicit "" allows every id, as in Nomad.
	if r.DeniedHostUIDs != nil {
		cfg.DeniedHostUIDs = strings.TrimSpace(*r.DeniedHostUIDs)
	}
	if r.DeniedHostGIDs != nil {
		cfg.DeniedHostGIDs = strings.TrimSpace(*r.DeniedHostGIDs)
	}
	if _, err := newIDPolicy(cfg.DeniedHostUIDs, cfg.DeniedHostGIDs); err != nil {
		return cfg, err
	}
	if r.DefaultUser != nil {
		cfg.DefaultUser = strings.TrimSpace(*r.DefaultUser)
	}
	if r.JobUserIDs != nil {
		cfg.JobUserIDs = strings.TrimSpace(*r.JobUserIDs)
	}
	if r.StateDir != "" {
		if !filepath.IsAbs(r.StateDir) {
			return cfg, fmt.Errorf("state_dir %q: must be an absolute path", r.StateDir)
		}
		cfg.StateDir = filepath.Clean(r.StateDir)
	}
	if cfg.JobUserReclaimAfter, err = positiveDuration("job_user_reclaim_after", r.JobUserReclaim, cfg.JobUserReclaimAfter); err != nil {
		return cfg, err
	}
	if err := cfg.resolveJobUserIDs(); err != nil {
		return cfg, err
	}
	for _, u := range r.AllowedTaskUsers {
		if u = strings.TrimSpace(u); u == "" {
			return cfg, fmt.Errorf("allowed_task_users: empty user name")
		}
		cfg.AllowedTaskUsers = append(cfg.AllowedTaskUsers, u)
	}
	return cfg, nil
}

// resolveJobUserIDs turns "auto" into the default range, and checks a
// range: its syntax, and that it hands out no denied id. Job uids do not
// depend on a checkpoint_root: without one, tenants that all ran as
// default_user could read each other's /proc/<pid>/environ and signal
// each other's tasks.
func (c *Config) resolveJobUserIDs() error {
	if c.JobUserIDs == jobUIDsAuto {
		c.JobUserIDs = defaultJobUIDs
	}
	if c.JobUserIDs == "" {
		return nil
	}
	r, err := parseIDRange(c.JobUserIDs)
	if err != nil {
		return err
	}
	ids, err := newIDPolicy(c.DeniedHostUIDs, c.DeniedHostGIDs)
	if err != nil {
		return err
	}
	return r.checkDisjoint(ids.uids, ids.gids, c.DeniedHostUIDs, c.DeniedHostGIDs)
}

func positiveDuration(name, raw string, def time.Duration) (time.Duration, error) {
	if raw == "" {
		return def, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", name, raw, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s %q: must be positive", name, raw)
	}
	return d, nil
}

// TaskConfig is a task's config block.
type TaskConfig struct {
	Command string   `codec:"command"`
	Args    []string `codec:"args"`
	// WorkDir is the working directory; default the task dir.
	WorkDir string `codec:"work_dir"`
	// CheckpointSignal overrides the job meta steward.checkpoint_signal
	// and the plugin default; "none" opts out.
	CheckpointSignal string `codec:"checkpoint_signal"`
	// SignalGroup sends signals (checkpoint, kill) to the task's whole
	// process group instead of its main process only.
	SignalGroup bool `codec:"signal_group"`
	// PreemptionFile, relative to the task dir, is read when the
	// checkpoint signal arrives: key=value lines (reason, grace,
	// preemptions) that a template renders from the job's Nomad variable.
	PreemptionFile string `codec:"preemption_file"`
}

// validate checks what the schema cannot. Errors name the option, so the
// task's "Driver Failure" event says what to fix.
func (tc *TaskConfig) validate() error {
	if strings.TrimSpace(tc.Command) == "" {
		return fmt.Errorf("command: must not be empty")
	}
	if tc.WorkDir != "" && !filepath.IsAbs(tc.WorkDir) {
		return fmt.Errorf("work_dir %q: must be an absolute path", tc.WorkDir)
	}
	if tc.CheckpointSignal != "" {
		if _, err := normaliseSignal(tc.CheckpointSignal); err != nil {
			return fmt.Errorf("checkpoint_signal: %w", err)
		}
	}
	if tc.PreemptionFile != "" {
		if filepath.IsAbs(tc.PreemptionFile) || strings.HasPrefix(filepath.Clean(tc.PreemptionFile), "..") {
			return fmt.Errorf("preemption_file %q: must be a path inside the task dir (like %q)", tc.PreemptionFile, defaultPreemptionFile)
		}
	}
	return nil
}
