package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/drivers"
)

// recoveredPollInterval is how often the driver checks whether a task it
// recovered (and so cannot wait for: it is no longer the task's parent)
// still runs.
const recoveredPollInterval = 250 * time.Millisecond

// taskHandle is one running (or finished) task.
type taskHandle struct {
	logger hclog.Logger
	cfg    *drivers.TaskConfig
	tc     TaskConfig
	// pid is the task's main process, which leads its process group.
	pid        int
	startTicks uint64
	startedAt  time.Time
	// proc is the started child; nil for a recovered task, whose parent
	// is now init.
	proc *os.Process

	ckpt           ckptLoc
	ckptDir        string // ckpt.path()
	ckptPersistent bool
	ckptSignal     string // canonical name, or "none"
	gpus           []string
	// jobUID is the job's own uid the task runs as; 0: none.
	jobUID uint32

	// cancel stops the GPU monitor.
	cancel context.CancelFunc
	done   chan struct{}

	mu            sync.Mutex
	state         drivers.TaskState
	exit          *drivers.ExitResult
	completedAt   time.Time
	stopRequested bool
	lastGPU       *gpuUsage
	// ckptRequestedAt is when the checkpoint signal was last forwarded
	// without a done file answering it yet (ckptDoneReported).
	ckptRequestedAt  time.Time
	ckptDoneReported bool
	// idleWarnedAt is the time of the last idle warning emitted
	// (idle_warning.go).
	idleWarnedAt string
}

func (h *taskHandle) persistentState() taskState {
	return taskState{
		TaskConfig:           h.cfg,
		DriverConfig:         h.tc,
		Pid:                  h.pid,
		StartTicks:           h.startTicks,
		StartedAt:            h.startedAt,
		CheckpointDir:        h.ckptDir,
		Checkpoint:           h.ckpt,
		CheckpointPersistent: h.ckptPersistent,
		CheckpointSignal:     h.ckptSignal,
		JobUID:               h.jobUID,
	}
}

func (h *taskHandle) isRunning() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == drivers.TaskStateRunning
}

func (h *taskHandle) status() *drivers.TaskStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	attrs := map[string]string{
		"pid":               strconv.Itoa(h.pid),
		"checkpoint_dir":    h.ckptDir,
		"checkpoint_signal": h.ckptSignal,
	}
	if h.lastGPU != nil {
		attrs["gpu_memory_mib"] = strconv.FormatUint(h.lastGPU.MemMiB, 10)
		if h.lastGPU.HasUtil {
			attrs["gpu_utilization"] = strconv.FormatFloat(h.lastGPU.Util, 'f', 0, 64)
		}
	}
	return &drivers.TaskStatus{
		ID:               h.cfg.ID,
		Name:             h.cfg.Name,
		State:            h.state,
		StartedAt:        h.startedAt,
		CompletedAt:      h.completedAt,
		ExitResult:       h.exit.Copy(),
		DriverAttributes: attrs,
	}
}

// run waits for the task to end, records how it ended, calls onExit and
// closes done.
func (h *taskHandle) run(onExit func(*taskHandle)) {
	var res *drivers.ExitResult
	if h.proc != nil {
		res = h.waitChild()
	} else {
		res = h.pollRecovered()
	}
	h.cancel()
	h.mu.Lock()
	h.state, h.exit, h.completedAt = drivers.TaskStateExited, res, time.Now()
	h.mu.Unlock()
	onExit(h)
	close(h.done)
}

func (h *taskHandle) waitChild() *drivers.ExitResult {
	ps, err := h.proc.Wait()
	if err != nil {
		return &drivers.ExitResult{ExitCode: -1, Err: fmt.Errorf("waiting for pid %d: %w", h.pid, err)}
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return &drivers.ExitResult{ExitCode: ps.ExitCode()}
	}
	if ws.Signaled() {
		// The shell convention, as Nomad's own executor reports it.
		return &drivers.ExitResult{ExitCode: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	}
	return &drivers.ExitResult{ExitCode: ws.ExitStatus()}
}

// pollRecovered waits for a recovered task by polling /proc. Its exit
// status went to init, so it is unknown: a task that was stopped is
// reported as stopped, any other end as an error saying so.
func (h *taskHandle) pollRecovered() *drivers.ExitResult {
	for alive(h.pid, h.startTicks) {
		time.Sleep(recoveredPollInterval)
	}
	h.mu.Lock()
	stopped := h.stopRequested
	h.mu.Unlock()
	if stopped {
		return &drivers.ExitResult{}
	}
	return &drivers.ExitResult{
		ExitCode: -1,
		Err:      errors.New("exit status unknown: the task ended after the steward-exec plugin restarted and was no longer its parent"),
	}
}

// signal sends sig to the task's main process, or with group to its whole
// process group. A task that has already ended is not an error.
func (h *taskHandle) signal(sig syscall.Signal, group bool) error {
	if !h.isRunning() {
		return nil
	}
	// A recovered task is not our child: make sure the pid is still its.
	if h.proc == nil && !alive(h.pid, h.startTicks) {
		return nil
	}
	target := h.pid
	if group {
		target = -h.pid
	}
	if err := syscall.Kill(target, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending %s to pid %d: %w", sig, target, err)
	}
	return nil
}

// killAll SIGKILLs the task's process group and any descendant that left
// it, so nothing of the task outlives a stop.
func (h *taskHandle) killAll() {
	procs := taskProcesses(h.pid, h.startTicks)
	_ = syscall.Kill(-h.pid, syscall.SIGKILL)
	for _, p := range procs {
		_ = syscall.Kill(p.Pid, syscall.SIGKILL)
	}
}

// stop sends the kill signal, waits up to timeout for the task to end,
// then kills it.
func (h *taskHandle) stop(sig syscall.Signal, timeout time.Duration) error {
	h.mu.Lock()
	h.stopRequested = true
	h.mu.Unlock()
	if err := h.signal(sig, h.tc.SignalGroup); err != nil {
		return err
	}
	select {
	case <-h.done:
	case <-time.After(timeout):
		h.logger.Debug("task outlived its kill timeout, killing it", "timeout", timeout)
		h.killAll()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("task (pid %d) still running 10s after SIGKILL", h.pid)
		}
	}
	// Children left in the group after the main process ended.
	h.killAll()
	return nil
}

func (h *taskHandle) setGPU(u gpuUsage) {
	h.mu.Lock()
	h.lastGPU = &u
	h.mu.Unlock()
}
