package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"
)

// Environment variables the driver gives every task.
const (
	// EnvCheckpointDir is where the task keeps its checkpoints.
	EnvCheckpointDir = "STEWARD_CHECKPOINT_DIR"
	// EnvCheckpointDirPersistent is "1" when the dir outlives the
	// allocation (checkpoint_root is set), "0" when it is the alloc dir.
	EnvCheckpointDirPersistent = "STEWARD_CHECKPOINT_DIR_PERSISTENT"
	// EnvCheckpointSignal is the signal that asks the task to checkpoint
	// ("none" when it has none).
	EnvCheckpointSignal = "STEWARD_CHECKPOINT_SIGNAL"
	// EnvResumed is "1" when the task runs again after a preemption.
	EnvResumed = "STEWARD_RESUMED"
	// EnvResumeCount is how many times the task has been preempted after
	// a checkpoint signal (the count so far; 0 on a first run).
	EnvResumeCount = "STEWARD_RESUME_COUNT"

	// markerFile, in the checkpoint dir, records preemptions across
	// allocations.
	markerFile = ".steward-preemption.json"
)

// marker is the resume state of one job/group/task. It lives in the
// checkpoint dir because a resumed task runs in a new allocation: nothing
// else the driver owns survives from one allocation to the next.
type marker struct {
	// Preemptions counts checkpoint signals that ended the allocation
	// they were sent to.
	Preemptions int `json:"preemptions"`
	// Pending: the next start is a resume.
	Pending bool `json:"pending"`
	// SignalledAlloc is the allocation the last checkpoint signal went
	// to; a second signal to it is not a second preemption.
	SignalledAlloc string    `json:"signalled_alloc,omitempty"`
	Signal         string    `json:"signal,omitempty"`
	SignalledAt    time.Time `json:"signalled_at,omitempty"`
	ResumedAt      time.Time `json:"resumed_at,omitempty"`
}

// checkpointDir returns a task's checkpoint dir and whether it outlives
// the allocation: <root>/<namespace>/<job>/<group>/<task> with a
// checkpoint_root, else <alloc dir>/alloc/data/steward-checkpoint/<task>
// (kept only when Nomad migrates a sticky ephemeral disk).
func checkpointDir(root string, cfg *drivers.TaskConfig) (string, bool) {
	if root == "" {
		return filepath.Join(cfg.AllocDir, "alloc", "data", checkpointFallbackSubdir, pathPart(cfg.Name)), false
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	return filepath.Join(root, pathPart(ns), pathPart(cfg.JobID), pathPart(cfg.TaskGroupName), pathPart(cfg.Name)), true
}

// pathPart makes a Nomad name safe as one path element.
func pathPart(s string) string {
	s = strings.NewReplacer("/", "_", "\\", "_", "\x00", "_").Replace(s)
	if s == "" || s == "." || s == ".." {
		return "_" + s
	}
	return s
}

// prepareCheckpointDir creates the dir, owned by the task's user.
func prepareCheckpointDir(dir string, uid, gid int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating checkpoint dir %s: %w", dir, err)
	}
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			return fmt.Errorf("giving checkpoint dir %s to uid %d: %w", dir, uid, err)
		}
	}
	return nil
}

func readMarker(dir string) (marker, error) {
	var m marker
	raw, err := os.ReadFile(filepath.Join(dir, markerFile))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("reading resume marker: %w", err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return marker{}, fmt.Errorf("resume marker %s is corrupt: %w", filepath.Join(dir, markerFile), err)
	}
	return m, nil
}

// writeMarker replaces the marker atomically, so a crash never leaves half
// a file for the next allocation to read.
func writeMarker(dir string, m marker) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, markerFile+".tmp*")
	if err != nil {
		return fmt.Errorf("writing resume marker: %w", err)
	}
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing resume marker: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing resume marker: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, markerFile)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing resume marker: %w", err)
	}
	return nil
}

// consumeResume is called when a task starts: a pending preemption makes
// this start a resume. It returns whether it is and the preemption count.
func consumeResume(dir string, now time.Time) (resumed bool, count int, err error) {
	m, err := readMarker(dir)
	if err != nil {
		return false, 0, err
	}
	if !m.Pending {
		return false, m.Preemptions, nil
	}
	m.Pending, m.ResumedAt = false, now
	if err := writeMarker(dir, m); err != nil {
		return false, 0, err
	}
	return true, m.Preemptions, nil
}

// recordCheckpointSignal marks a preemption in progress for allocID. It is
// written when the signal is forwarded, not when the task ends: a
// replacement allocation may start before the old one has stopped. It
// returns the preemption count.
func recordCheckpointSignal(dir, allocID, signal string, now time.Time) (int, error) {
	m, err := readMarker(dir)
	if err != nil {
		return 0, err
	}
	if m.SignalledAlloc == allocID {
		// A repeated signal to the same allocation: one preemption.
		return m.Preemptions, nil
	}
	m.Preemptions++
	m.Pending = true
	m.SignalledAlloc, m.Signal, m.SignalledAt = allocID, signal, now
	return m.Preemptions, writeMarker(dir, m)
}

// cancelCheckpointSignal undoes recordCheckpointSignal when the signalled
// task then finished its work by itself (exit 0, not stopped): it was not
// preempted and must not be told it resumes.
func cancelCheckpointSignal(dir, allocID string) error {
	m, err := readMarker(dir)
	if err != nil {
		return err
	}
	if !m.Pending || m.SignalledAlloc != allocID {
		return nil
	}
	m.Pending = false
	m.Preemptions--
	return writeMarker(dir, m)
}
