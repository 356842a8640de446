package driver

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/gpu-steward/steward/internal/safefs"
)

// Task events the driver emits. Nomad shows them as "Driver" events on the
// allocation (UI and `nomad alloc status`) and keeps only the last 10 per
// task, so there are few: one per checkpoint request, one on a resume, one
// per idle/busy transition.

// preemptionInfo is what the task's preemption file says: the controller
// writes reason and grace into the job's Nomad variable, and a template in
// the job renders them into the file. The driver has no Nomad token to read
// the variable itself.
type preemptionInfo struct {
	Reason      string
	Grace       string
	Preemptions string
	// IdleWarning, IdleWarningAt and IdleWarningAllocs are an idle rule's
	// warning before a release (idle_warning.go).
	IdleWarning       string
	IdleWarningAt     string
	IdleWarningAllocs string
}

// preemptionFileLimit bounds what is read of a preemption file.
const preemptionFileLimit = 64 << 10

// readPreemptionInfo reads key=value lines from the file rel in the task
// dir. The task can write there, so the path is walked without following
// symlinks: the driver (root) must not read another file for it. A
// missing or unreadable file is no information (the event is then
// shorter), never an error.
func readPreemptionInfo(taskDir, rel string) preemptionInfo {
	var info preemptionInfo
	raw, err := readNoFollow(taskDir, rel, preemptionFileLimit)
	if err != nil {
		return info
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		if v == "<no value>" {
			v = "" // a key the record lacks, as a template renders it
		}
		switch strings.TrimSpace(k) {
		case "reason":
			info.Reason = v
		case "grace":
			info.Grace = v
		case "preemptions":
			info.Preemptions = v
		case "idle_warning":
			info.IdleWarning = v
		case "idle_warning_at":
			info.IdleWarningAt = v
		case "idle_warning_allocs":
			info.IdleWarningAllocs = v
		}
	}
	return info
}

// checkpointMessage is the event for a forwarded checkpoint signal, e.g.
// "checkpoint requested (SIGUSR1): preemption in 2m: <reason>; save state
// now".
func checkpointMessage(signal string, info preemptionInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint requested (%s): ", signal)
	if info.Grace != "" {
		fmt.Fprintf(&b, "preemption in %s", info.Grace)
	} else {
		b.WriteString("preemption expected")
	}
	if info.Reason != "" {
		fmt.Fprintf(&b, ": %s", info.Reason)
	}
	b.WriteString("; save state now, the task will be stopped after its grace")
	return b.String()
}

// resumeMessage is the event of a start after a preemption.
func resumeMessage(count int, dir string, persistent bool) string {
	where := dir
	if !persistent {
		where += " (alloc dir: kept only if the disk migrated)"
	}
	return fmt.Sprintf("resuming after preemption %d: %s=1, checkpoints in %s", count, EnvResumed, where)
}

func idleMessage(u gpuUsage, threshold float64, idleFor time.Duration, gpus []string) string {
	return fmt.Sprintf("GPU idle: the task's processes use %.0f%% of %s (under %.0f%%) for %s",
		u.Util, strings.Join(gpus, ","), threshold, idleFor.Round(time.Second))
}

func busyMessage(u gpuUsage, threshold float64, gpus []string) string {
	return fmt.Sprintf("GPU busy again: the task's processes use %.0f%% of %s (%.0f%% or more)",
		u.Util, strings.Join(gpus, ","), threshold)
}

// emit sends a task event; a failure is logged, never fatal to the task.
func (d *Driver) emit(cfg *drivers.TaskConfig, msg string, annotations map[string]string) {
	err := d.eventer.EmitEvent(&drivers.TaskEvent{
		TaskID:      cfg.ID,
		TaskName:    cfg.Name,
		AllocID:     cfg.AllocID,
		Timestamp:   time.Now(),
		Message:     msg,
		Annotations: annotations,
	})
	if err != nil {
		d.logger.Warn("cannot emit task event", "task_id", cfg.ID, "message", msg, "error", err)
	}
}

// preemptionFileRel is the task's preemption file, relative to its task
// dir.
func preemptionFileRel(tc *TaskConfig) string {
	if tc.PreemptionFile == "" {
		return defaultPreemptionFile
	}
	return filepath.Clean(tc.PreemptionFile)
}

// readNoFollow reads the regular file rel below the trusted dir base,
// following no symlink on the way.
func readNoFollow(base, rel string, limit int64) ([]byte, error) {
	root, err := safefs.OpenDir(base)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, name := root, filepath.Base(rel)
	if parent := filepath.Dir(rel); parent != "." {
		if dir, err = root.Walk(parent); err != nil {
			return nil, err
		}
		defer dir.Close()
	}
	return dir.ReadFile(name, limit)
}
