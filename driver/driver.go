// Package driver is Steward's Nomad task driver, steward-exec: it runs a
// command as its own process group (raw_exec-level isolation) and handles
// preemption for GPU work. It forwards the checkpoint signal and records it
// as a task event, stops with the kill signal and then SIGKILL after the
// kill timeout, gives the task a checkpoint dir that can outlive the
// allocation, tells the task when it resumes after a preemption, and turns
// the task's own GPU activity (per process through NVML, or the simulated
// GPUs' activity) into idle/busy task events.
package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/lib/cpustats"
	"github.com/hashicorp/nomad/drivers/shared/eventer"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/hashicorp/nomad/plugins/drivers/fsisolation"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
	pstructs "github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/gpu-steward/steward/internal/safefs"
	"github.com/gpu-steward/steward/internal/version"
	"github.com/gpu-steward/steward/policy"
)

const (
	// PluginName is the driver's name (driver = "steward-exec" in a job)
	// and the file name the steward binary serves it under.
	PluginName = "steward-exec"

	fingerprintPeriod = 30 * time.Second
	// defaultKillSignal is what Nomad's own exec drivers send when the
	// task sets no kill_signal.
	defaultKillSignal = "SIGINT"
	// metaCheckpointSignal is the job meta key steward.checkpoint_signal
	// as Nomad puts it in the task's environment: the key as written, dot
	// included (client/taskenv sets NOMAD_META_<key> and its upper-case
	// form, nothing else). metaCheckpointSignalClean, with an underscore,
	// is what a job can set itself in an env block (and what this driver
	// used to read); it is still accepted, after the real key.
	metaCheckpointSignal      = "NOMAD_META_steward.checkpoint_signal"
	metaCheckpointSignalClean = "NOMAD_META_steward_checkpoint_signal"
)

// PluginVersion is reported to Nomad: Steward's version (the one
// `steward version` prints), in a form Nomad's plugin loader parses.
var PluginVersion = version.Plugin()

var pluginInfo = &base.PluginInfoResponse{
	Type:              base.PluginTypeDriver,
	PluginApiVersions: []string{drivers.ApiVersion010},
	PluginVersion:     PluginVersion,
	Name:              PluginName,
}

var capabilities = &drivers.Capabilities{
	SendSignals:       true,
	Exec:              false,
	FSIsolation:       fsisolation.None,
	NetIsolationModes: []drivers.NetIsolationMode{drivers.NetIsolationModeHost},
	MountConfigs:      drivers.MountConfigSupportNone,
}

// Driver is the steward-exec task driver. Create it with New.
type Driver struct {
	drivers.DriverExecTaskNotSupported

	ctx     context.Context
	cancel  context.CancelFunc
	logger  hclog.Logger
	eventer *eventer.Eventer
	tasks   *taskStore
	nvml    *nvmlOpener

	mu      sync.RWMutex
	cfg     Config
	ids     *idPolicy
	compute cpustats.Compute
}

var _ drivers.DriverPlugin = (*Driver)(nil)

// New returns an unconfigured driver; Nomad configures it with SetConfig.
func New(logger hclog.Logger) *Driver {
	return newDriver(logger, openNVMLLib)
}

// Factory is the plugins.PluginFactory that serves the driver.
func Factory(logger hclog.Logger) interface{} {
	return New(logger)
}

func newDriver(logger hclog.Logger, newLib func() nvmlLib) *Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named(PluginName)
	ctx, cancel := context.WithCancel(context.Background())
	return &Driver{
		ctx:     ctx,
		cancel:  cancel,
		logger:  logger,
		eventer: eventer.NewEventer(ctx, logger),
		tasks:   newTaskStore(),
		nvml:    &nvmlOpener{newLib: newLib},
		cfg:     DefaultConfig(),
		ids:     mustIDPolicy(DefaultConfig()),
		compute: cpustats.Compute{NumCores: runtime.NumCPU()},
	}
}

func (d *Driver) config() Config {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.cfg
}

func (d *Driver) idPolicy() *idPolicy {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.ids
}

func mustIDPolicy(cfg Config) *idPolicy {
	p, err := newIDPolicy(cfg.DeniedHostUIDs, cfg.DeniedHostGIDs)
	if err != nil {
		panic(err) // the defaults are valid
	}
	return p
}

// PluginInfo describes the plugin to Nomad.
func (d *Driver) PluginInfo() (*base.PluginInfoResponse, error) { return pluginInfo, nil }

// ConfigSchema is the schema of the agent's plugin block.
func (d *Driver) ConfigSchema() (*hclspec.Spec, error) { return configSpec, nil }

// TaskConfigSchema is the schema of a task's config block.
func (d *Driver) TaskConfigSchema() (*hclspec.Spec, error) { return taskConfigSpec, nil }

// Capabilities tells Nomad what the driver supports.
func (d *Driver) Capabilities() (*drivers.Capabilities, error) { return capabilities, nil }

// SetConfig validates the plugin block.
func (d *Driver) SetConfig(c *base.Config) error {
	cfg, err := parseConfig(c)
	if err != nil {
		return fmt.Errorf("%s: invalid plugin config: %w", PluginName, err)
	}
	ids, err := newIDPolicy(cfg.DeniedHostUIDs, cfg.DeniedHostGIDs)
	if err != nil {
		return fmt.Errorf("%s: invalid plugin config: %w", PluginName, err)
	}
	if cfg.CheckpointRoot == "" && cfg.JobUserIDs != "" && os.Geteuid() == 0 {
		// Job uids' registry, without a checkpoint_root to hold it. Only
		// root switches users: an unprivileged agent needs none.
		dir, err := prepareCheckpointRoot(cfg.StateDir)
		if err != nil {
			return fmt.Errorf("%s: state_dir: %w", PluginName, err)
		}
		cfg.StateDir = dir
	}
	if cfg.CheckpointRoot != "" {
		root, err := prepareCheckpointRoot(cfg.CheckpointRoot)
		if err != nil {
			return fmt.Errorf("%s: checkpoint_root: %w", PluginName, err)
		}
		if root != cfg.CheckpointRoot {
			d.logger.Info("checkpoint_root is a symlink: using its target", "checkpoint_root", cfg.CheckpointRoot, "target", root)
			cfg.CheckpointRoot = root
		}
	}
	if j := cfg.jobUIDs(); j != nil && os.Geteuid() == 0 {
		// The registry is checked now, so that a bad one (a symlink,
		// another user's dir) stops the agent rather than every task.
		dir, err := j.open()
		if err != nil {
			return fmt.Errorf("%s: job_user_ids: %w", PluginName, err)
		}
		dir.Close()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfg, d.ids = cfg, ids
	if c != nil && c.AgentConfig != nil && c.AgentConfig.Driver != nil && c.AgentConfig.Driver.Topology != nil {
		d.compute = c.AgentConfig.Compute()
	}
	return nil
}

// Shutdown stops the driver's background work (tests and in-process use;
// Nomad ends plugins by killing them). Tasks keep running.
func (d *Driver) Shutdown() { d.cancel() }

// Fingerprint reports the driver healthy, or undetected when disabled.
func (d *Driver) Fingerprint(ctx context.Context) (<-chan *drivers.Fingerprint, error) {
	ch := make(chan *drivers.Fingerprint)
	go func() {
		defer close(ch)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.ctx.Done():
				return
			case <-t.C:
				t.Reset(fingerprintPeriod)
			}
			select {
			case ch <- d.fingerprint():
			case <-ctx.Done():
				return
			case <-d.ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func (d *Driver) fingerprint() *drivers.Fingerprint {
	cfg := d.config()
	if !cfg.Enabled {
		return &drivers.Fingerprint{Health: drivers.HealthStateUndetected, HealthDescription: "disabled (enabled = false)"}
	}
	attrs := map[string]*pstructs.Attribute{
		"driver." + PluginName:                            pstructs.NewBoolAttribute(true),
		"driver." + PluginName + ".version":               pstructs.NewStringAttribute(PluginVersion),
		"driver." + PluginName + ".checkpoint_persistent": pstructs.NewBoolAttribute(cfg.CheckpointRoot != ""),
	}
	return &drivers.Fingerprint{Attributes: attrs, Health: drivers.HealthStateHealthy, HealthDescription: drivers.DriverHealthy}
}

// StartTask validates the task's config and starts its command.
func (d *Driver) StartTask(cfg *drivers.TaskConfig) (*drivers.TaskHandle, *drivers.DriverNetwork, error) {
	pcfg := d.config()
	if !pcfg.Enabled {
		return nil, nil, fmt.Errorf("%s is disabled in this client's plugin config (enabled = false)", PluginName)
	}
	if _, ok := d.tasks.get(cfg.ID); ok {
		return nil, nil, fmt.Errorf("task %q already started", cfg.ID)
	}
	var tc TaskConfig
	if err := cfg.DecodeDriverConfig(&tc); err != nil {
		return nil, nil, fmt.Errorf("invalid %s task config: %w", PluginName, err)
	}
	if err := tc.validate(); err != nil {
		return nil, nil, fmt.Errorf("invalid %s task config: %w", PluginName, err)
	}
	ckptSignal, err := checkpointSignalFor(&tc, cfg.Env, pcfg.CheckpointSignal)
	if err != nil {
		return nil, nil, err
	}
	tu, err := d.taskUserFor(cfg, pcfg)
	if err != nil {
		return nil, nil, err
	}
	ckpt, persistent := checkpointLocation(pcfg.CheckpointRoot, cfg)
	ckptDir := ckpt.path()
	uid, gid := -1, -1
	if tu.cred != nil {
		uid, gid = tu.uid, tu.gid
	}
	dir, err := ckpt.prepare(uid, gid)
	if err != nil {
		return nil, nil, err
	}
	resumed, count, err := consumeResume(dir, time.Now())
	dir.Close()
	if err != nil {
		// A damaged marker must not keep the work from running; the task
		// still finds its checkpoints.
		d.logger.Warn("cannot read the resume marker, starting as a first run", "task_id", cfg.ID, "error", err)
	}

	env := taskEnv(cfg, ckptDir, persistent, ckptSignal, resumed, count)
	for k, v := range tu.env(cfg) {
		env = append(env, k+"="+v)
	}
	cmd, err := d.command(cfg, &tc, env, tu.cred)
	if err != nil {
		return nil, nil, err
	}
	closeLogs, err := attachLogs(cmd, cfg)
	if err != nil {
		return nil, nil, err
	}
	err = cmd.Start()
	closeLogs()
	if err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", tc.Command, err)
	}
	st, err := readProcStat(cmd.Process.Pid)
	if err != nil {
		// It already ended (and is a zombie until waited for, so this is
		// rare); the wait below reports how.
		d.logger.Debug("cannot read the new task's start time", "pid", cmd.Process.Pid, "error", err)
	}

	h := d.newHandle(cfg, tc, cmd.Process.Pid, st.StartTicks, time.Now().Round(time.Millisecond), ckpt, persistent, ckptSignal)
	h.proc = cmd.Process
	if tu.jobUID {
		h.jobUID = uint32(tu.uid)
	}
	handle := drivers.NewTaskHandle(taskHandleVersion)
	handle.Config = cfg
	if err := handle.SetDriverState(h.persistentState()); err != nil {
		h.killAll()
		_, _ = cmd.Process.Wait()
		return nil, nil, fmt.Errorf("saving driver state: %w", err)
	}
	d.tasks.set(cfg.ID, h)
	d.logger.Info("task started", "task_id", cfg.ID, "pid", h.pid, "command", tc.Command,
		"user", tu.name, "checkpoint_dir", ckptDir, "checkpoint_signal", ckptSignal, "resumed", resumed, "gpus", strings.Join(h.gpus, ","))
	if resumed {
		d.emit(cfg, resumeMessage(count, ckptDir, persistent), map[string]string{
			"steward.event": "resumed", "preemptions": strconv.Itoa(count),
		})
	}
	d.startTask(h)
	return handle, nil, nil
}

func (d *Driver) newHandle(cfg *drivers.TaskConfig, tc TaskConfig, pid int, startTicks uint64, startedAt time.Time,
	ckpt ckptLoc, persistent bool, ckptSignal string) *taskHandle {
	return &taskHandle{
		logger:         d.logger.With("task_id", cfg.ID, "task", cfg.Name, "alloc_id", cfg.AllocID),
		cfg:            cfg,
		tc:             tc,
		pid:            pid,
		startTicks:     startTicks,
		startedAt:      startedAt,
		ckpt:           ckpt,
		ckptDir:        ckpt.path(),
		ckptPersistent: persistent,
		ckptSignal:     ckptSignal,
		gpus:           taskGPUs(deviceEnvOf(cfg)),
		done:           make(chan struct{}),
		state:          drivers.TaskStateRunning,
	}
}

// startTask starts the goroutines that watch a task: its end, its GPU
// activity and its checkpoints.
func (d *Driver) startTask(h *taskHandle) {
	ctx, cancel := context.WithCancel(d.ctx)
	h.cancel = cancel
	go h.run(d.taskEnded)
	go d.monitorGPUs(ctx, h)
	go d.watchCheckpoints(ctx, h)
	go d.watchIdleWarnings(ctx, h)
}

// taskEnded runs when a task's main process has ended.
func (d *Driver) taskEnded(h *taskHandle) {
	h.mu.Lock()
	res, stopped := h.exit, h.stopRequested
	h.mu.Unlock()
	h.logger.Info("task ended", "exit_code", res.ExitCode, "signal", res.Signal, "stopped", stopped, "error", res.Err)
	// The job uid's reclaim delay counts from its tasks' last end.
	if j := d.config().jobUIDs(); j != nil && h.jobUID != 0 {
		if err := j.used(h.jobUID, jobKey(h.cfg)); err != nil {
			h.logger.Warn("cannot mark the job's uid used", "uid", h.jobUID, "error", err)
		}
	}
	// A task that was asked to checkpoint and then finished its work by
	// itself was not preempted.
	if !stopped && res.Successful() {
		if err := h.withCheckpointDir(func(dir *safefs.Dir) error { return cancelCheckpointSignal(dir, h.cfg.AllocID) }); err != nil {
			h.logger.Warn("cannot update the resume marker", "error", err)
		}
	}
}

// RecoverTask reattaches to a task that kept running while the plugin
// restarted. Its process is no longer the plugin's child, so its end is
// found by polling and its exit status is unknown.
func (d *Driver) RecoverTask(handle *drivers.TaskHandle) error {
	if handle == nil || handle.Config == nil {
		return errors.New("RecoverTask: no task handle")
	}
	if _, ok := d.tasks.get(handle.Config.ID); ok {
		return nil
	}
	var st taskState
	if err := handle.GetDriverState(&st); err != nil {
		return fmt.Errorf("decoding the task's driver state: %w", err)
	}
	if st.TaskConfig == nil {
		st.TaskConfig = handle.Config
	}
	if !alive(st.Pid, st.StartTicks) {
		return fmt.Errorf("task process %d is gone", st.Pid)
	}
	ckpt := st.Checkpoint
	if ckpt.Base == "" {
		// State of an older version: the location by today's config.
		ckpt, _ = checkpointLocation(d.config().CheckpointRoot, st.TaskConfig)
	}
	h := d.newHandle(st.TaskConfig, st.DriverConfig, st.Pid, st.StartTicks, st.StartedAt,
		ckpt, st.CheckpointPersistent, st.CheckpointSignal)
	h.jobUID = st.JobUID
	d.tasks.set(h.cfg.ID, h)
	h.primeIdleWarning(readPreemptionInfo(h.cfg.TaskDir().Dir, preemptionFileRel(&h.tc)))
	d.startTask(h)
	d.logger.Info("task recovered", "task_id", h.cfg.ID, "pid", h.pid)
	return nil
}

// WaitTask returns a channel that delivers the task's exit result.
func (d *Driver) WaitTask(ctx context.Context, taskID string) (<-chan *drivers.ExitResult, error) {
	h, ok := d.tasks.get(taskID)
	if !ok {
		return nil, drivers.ErrTaskNotFound
	}
	ch := make(chan *drivers.ExitResult)
	go func() {
		defer close(ch)
		select {
		case <-h.done:
		case <-ctx.Done():
			return
		case <-d.ctx.Done():
			return
		}
		h.mu.Lock()
		res := h.exit.Copy()
		h.mu.Unlock()
		select {
		case ch <- res:
		case <-ctx.Done():
		case <-d.ctx.Done():
		}
	}()
	return ch, nil
}

// StopTask sends the kill signal (default SIGINT), waits up to timeout
// (the task's kill_timeout), then kills the task's process group.
func (d *Driver) StopTask(taskID string, timeout time.Duration, signal string) error {
	h, ok := d.tasks.get(taskID)
	if !ok {
		return drivers.ErrTaskNotFound
	}
	if signal == "" {
		signal = defaultKillSignal
	}
	sig, err := parseSignal(signal)
	if err != nil {
		return fmt.Errorf("kill_signal: %w", err)
	}
	return h.stop(sig, timeout)
}

// DestroyTask forgets a task, killing it first if force is set.
func (d *Driver) DestroyTask(taskID string, force bool) error {
	h, ok := d.tasks.get(taskID)
	if !ok {
		return drivers.ErrTaskNotFound
	}
	if h.isRunning() {
		if !force {
			return errors.New("cannot destroy a running task (use force)")
		}
		h.killAll()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			return fmt.Errorf("task (pid %d) still running 5s after SIGKILL", h.pid)
		}
	}
	h.cancel()
	d.tasks.delete(taskID)
	return nil
}

// InspectTask returns the task's status.
func (d *Driver) InspectTask(taskID string) (*drivers.TaskStatus, error) {
	h, ok := d.tasks.get(taskID)
	if !ok {
		return nil, drivers.ErrTaskNotFound
	}
	return h.status(), nil
}

// TaskEvents streams the driver's task events to Nomad.
func (d *Driver) TaskEvents(ctx context.Context) (<-chan *drivers.TaskEvent, error) {
	return d.eventer.TaskEvents(ctx)
}

// SignalTask forwards a signal. The task's checkpoint signal is also
// recorded: as a task event, and in the resume marker, so that the task's
// next start (usually in a new allocation) knows it resumes.
func (d *Driver) SignalTask(taskID string, signal string) error {
	h, ok := d.tasks.get(taskID)
	if !ok {
		return drivers.ErrTaskNotFound
	}
	name, err := normaliseSignal(signal)
	if err != nil {
		return err
	}
	sig, err := parseSignal(name)
	if err != nil {
		return err
	}
	if name == h.ckptSignal && h.isRunning() {
		d.checkpointRequested(h, name)
	}
	return h.signal(sig, h.tc.SignalGroup)
}

func (d *Driver) checkpointRequested(h *taskHandle, signal string) {
	h.noteCheckpointRequest(time.Now())
	var count int
	err := h.withCheckpointDir(func(dir *safefs.Dir) (err error) {
		count, err = recordCheckpointSignal(dir, h.cfg.AllocID, signal, time.Now())
		return err
	})
	if err != nil {
		h.logger.Error("cannot write the resume marker: the next start will not know it resumes", "error", err)
	}
	info := readPreemptionInfo(h.cfg.TaskDir().Dir, preemptionFileRel(&h.tc))
	msg := checkpointMessage(signal, info)
	h.logger.Info("checkpoint signal forwarded", "signal", signal, "preemptions", count, "message", msg)
	d.emit(h.cfg, msg, map[string]string{
		"steward.event": "checkpoint", "signal": signal, "preemptions": strconv.Itoa(count),
	})
}

// checkpointSignalFor resolves a task's checkpoint signal: its config,
// then the job meta steward.checkpoint_signal, then the plugin default.
func checkpointSignalFor(tc *TaskConfig, env map[string]string, def string) (string, error) {
	if tc.CheckpointSignal != "" {
		return normaliseSignal(tc.CheckpointSignal)
	}
	for _, key := range []string{metaCheckpointSignal, metaCheckpointSignalClean} {
		if v := env[key]; strings.TrimSpace(v) != "" {
			sig, err := normaliseSignal(v)
			if err == nil {
				// The controller sends the job's signal through Nomad,
				// and refuses (sending the policy's) one Nomad cannot
				// send: the task must not wait for it either.
				_, err = policy.CheckpointSignal(v)
			}
			if err != nil {
				return "", fmt.Errorf("job meta steward.checkpoint_signal: %w; fix the job's meta (or set the task's checkpoint_signal)", err)
			}
			return sig, nil
		}
	}
	return def, nil
}
