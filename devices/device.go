// Package devices is Steward's Nomad device plugin for NVIDIA GPUs.
//
// It fingerprints GPUs through NVML (whole GPUs, or MIG instances where MIG
// is on), reports their health and per-device statistics, and tells tasks
// which GPUs are theirs. A simulated backend provides virtual GPUs whose
// utilisation the workload itself sets, for demos and tests on machines
// without GPUs. Devices are reported as vendor "nvidia", type "gpu", the
// same as hashicorp/nomad-device-nvidia, so existing jobspecs keep working.
package devices

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpu-steward/steward/internal/version"
)

const (
	// PluginName is the plugin's name and the file name the steward binary
	// serves it under in the client's plugin_dir.
	PluginName = "steward-gpu"

	// Vendor and DeviceType match hashicorp/nomad-device-nvidia, so jobs
	// ask for device "nvidia/gpu".
	Vendor     = "nvidia"
	DeviceType = device.DeviceTypeGPU
)

// PluginVersion is reported to Nomad: Steward's version (the one
// `steward version` prints), in a form Nomad's plugin loader parses.
var PluginVersion = version.Plugin()

var pluginInfo = &base.PluginInfoResponse{
	Type:              base.PluginTypeDevice,
	PluginApiVersions: []string{device.ApiVersion010},
	PluginVersion:     PluginVersion,
	Name:              PluginName,
}

// Plugin is the device plugin. Create it with New.
type Plugin struct {
	logger hclog.Logger
	// newLib opens NVML; tests replace it with go-nvml's mocks.
	newLib func() nvmlLib
	health *health

	mu      sync.Mutex
	cfg     Config
	started bool    // whether the backend was started (on first use)
	backend backend // nil before start, or when there are no GPUs
	// noGPUReason says why backend is nil once started.
	noGPUReason string
}

var _ device.DevicePlugin = (*Plugin)(nil)

// New returns an unconfigured plugin; Nomad configures it with SetConfig.
func New(logger hclog.Logger) *Plugin {
	return newPlugin(logger, openNVML)
}

// Factory is the plugins.PluginFactory that serves the plugin.
func Factory(logger hclog.Logger) interface{} {
	return New(logger)
}

func newPlugin(logger hclog.Logger, newLib func() nvmlLib) *Plugin {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Plugin{
		logger: logger.Named(PluginName),
		newLib: newLib,
		health: newHealth(),
		cfg:    DefaultConfig(),
	}
}

// PluginInfo describes the plugin to Nomad.
func (p *Plugin) PluginInfo() (*base.PluginInfoResponse, error) {
	return pluginInfo, nil
}

// ConfigSchema returns the schema of the agent's plugin block.
func (p *Plugin) ConfigSchema() (*hclspec.Spec, error) {
	return configSpec, nil
}

// SetConfig validates the plugin block. The backend starts on first use:
// Nomad also runs the plugin briefly just to validate its configuration,
// and that process should neither open NVML nor log about GPUs.
func (p *Plugin) SetConfig(c *base.Config) error {
	cfg, err := parseConfig(c)
	if err != nil {
		return fmt.Errorf("%s: invalid plugin config: %w", PluginName, err)
	}
	if cfg.Enabled && cfg.Backend == BackendSim {
		dir, err := openSimStateDir(cfg.SimStateDir)
		if err != nil {
			return fmt.Errorf("%s: sim_state_dir %q: %w", PluginName, cfg.SimStateDir, err)
		}
		dir.Close()
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.backend != nil {
		p.backend.close()
	}
	p.cfg, p.backend, p.started, p.noGPUReason = cfg, nil, false, ""
	p.health.reset()
	return nil
}

// current returns the configuration and the backend, starting the backend
// on first use. The backend is nil when there are no GPUs to report.
func (p *Plugin) current() (Config, backend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		p.started = true
		if p.cfg.Enabled {
			p.backend, p.noGPUReason = p.startBackend(p.cfg)
		} else {
			p.noGPUReason = "plugin disabled (enabled = false)"
			p.logger.Info("plugin disabled by its configuration (enabled = false), reporting no GPUs")
		}
	}
	return p.cfg, p.backend
}

// startBackend starts the configured backend, or returns why there is none.
func (p *Plugin) startBackend(cfg Config) (backend, string) {
	if cfg.Backend == BackendSim {
		b, err := newSimBackend(cfg, p.logger.Named("sim"))
		if err != nil {
			p.logger.Error("cannot start simulated GPUs, reporting no GPUs", "error", err)
			return nil, err.Error()
		}
		p.logger.Info("simulated GPUs started", "count", len(b.gpus), "model", cfg.SimModel, "state_dir", cfg.SimStateDir, "stats_shape", cfg.SimStatsShape)
		return b, ""
	}
	b, err := newNVMLBackend(p.newLib(), p.logger.Named("nvml"), cfg, p.markUnhealthy)
	if err != nil {
		if errors.Is(err, errNVMLUnavailable) {
			p.logger.Warn(`NVML is unavailable, reporting no GPUs (is the NVIDIA driver installed? set backend = "sim" in the plugin config to simulate GPUs)`, "error", err)
		} else {
			p.logger.Error("cannot start NVML, reporting no GPUs", "error", err)
		}
		return nil, err.Error()
	}
	p.logger.Info("NVML initialised")
	return b, ""
}

// Shutdown releases the backend (NVML). Nomad ends plugins by killing
// them; this is for tests and in-process use.
func (p *Plugin) Shutdown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.backend != nil {
		p.backend.close()
	}
	p.backend, p.started, p.noGPUReason = nil, true, "plugin shut down"
}

// markUnhealthy records a critical hardware event for a device.
func (p *Plugin) markUnhealthy(uuid, reason string) {
	p.health.set(uuid, srcEvent, reason)
}

// Reserve returns the environment (and, for simulated GPUs, the mounts) a
// task needs to use exactly these GPUs.
func (p *Plugin) Reserve(ids []string) (*device.ContainerReservation, error) {
	if len(ids) == 0 {
		return &device.ContainerReservation{}, nil
	}
	_, be := p.current()
	if be == nil {
		p.mu.Lock()
		reason := p.noGPUReason
		p.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "no GPUs to reserve: %s", reason)
	}
	res, err := be.reserve(ids)
	if err != nil {
		// Keep the gRPC code (InvalidArgument for unknown IDs) across the
		// plugin boundary.
		if st, ok := status.FromError(err); ok {
			return nil, status.Errorf(st.Code(), "reserving GPUs %v: %s", ids, st.Message())
		}
		return nil, fmt.Errorf("reserving GPUs %v: %w", ids, err)
	}
	return res, nil
}

// Fingerprint streams the detected GPUs: once at start, then whenever a GPU
// appears, disappears or changes health.
//
// With enabled = false, or without NVML, the stream ends at once without
// devices: Nomad then treats the plugin as having none. (Returning
// device.ErrPluginDisabled would make the agent log an ERROR, because the
// error does not survive the gRPC boundary as itself.)
func (p *Plugin) Fingerprint(ctx context.Context) (<-chan *device.FingerprintResponse, error) {
	cfg, be := p.current()
	out := make(chan *device.FingerprintResponse)
	go p.fingerprintLoop(ctx, be, cfg.FingerprintPeriod, out)
	return out, nil
}

// Stats streams per-device statistics every interval (or stats_period, if
// configured and longer).
func (p *Plugin) Stats(ctx context.Context, interval time.Duration) (<-chan *device.StatsResponse, error) {
	cfg, be := p.current()
	if interval < cfg.StatsPeriod {
		interval = cfg.StatsPeriod
	}
	if interval <= 0 {
		interval = time.Second
	}
	out := make(chan *device.StatsResponse)
	go p.statsLoop(ctx, be, interval, statsBuilder(cfg), out)
	return out, nil
}
