package driver

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/gpu-steward/steward/internal/safefs"
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
	// EnvCheckpointDone is a file in the checkpoint dir that the task
	// touches (creates, or sets the time of) once it has written the
	// checkpoint a checkpoint signal asked for. The driver reports it
	// (event checkpoint-done) and Steward stops the task then, instead of
	// at the end of its grace: the work after the checkpoint would be lost
	// anyway, and the GPUs go sooner to the work they are freed for.
	// Optional: a task that never touches it runs out its grace.
	EnvCheckpointDone = "STEWARD_CHECKPOINT_DONE"
	// EnvResumed is "1" when the task runs again after a preemption.
	EnvResumed = "STEWARD_RESUMED"
	// EnvResumeCount is how many times the task has been preempted after
	// a checkpoint signal (the count so far; 0 on a first run).
	EnvResumeCount = "STEWARD_RESUME_COUNT"

	// markerFile, in the checkpoint dir, records preemptions across
	// allocations.
	markerFile = ".steward-preemption.json"
	// doneFile is EnvCheckpointDone's name in the checkpoint dir.
	doneFile = ".steward-checkpoint-done"
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

// ckptLoc is where a task's checkpoint dir is: a trusted base (the
// operator's checkpoint_root, or Nomad's alloc dir) and the path elements
// below it, which are walked one by one without following symlinks:
// Nomad's own dirs (Trusted, e.g. alloc/data), dirs only the plugin may
// write (Private: mode 0711, so tasks can pass but neither list nor
// write), and the task user's own dirs (Owned: mode 0700, chowned to the
// task's user; the first is the per-job boundary).
type ckptLoc struct {
	Base    string
	Trusted []string
	Private []string
	Owned   []string
}

// path is the checkpoint dir, as the task sees it.
func (l ckptLoc) path() string {
	parts := append([]string{l.Base}, l.Trusted...)
	parts = append(parts, l.Private...)
	return filepath.Join(append(parts, l.Owned...)...)
}

// checkpointLocation returns a task's checkpoint dir and whether it
// outlives the allocation: <root>/<namespace>/<job>/<group>/<task> with a
// checkpoint_root, where <job> is the job's private dir, else
// <alloc dir>/alloc/data/steward-checkpoint/<task> (kept only when Nomad
// migrates a sticky ephemeral disk).
func checkpointLocation(root string, cfg *drivers.TaskConfig) (ckptLoc, bool) {
	if root == "" {
		return ckptLoc{
			Base:    cfg.AllocDir,
			Trusted: []string{"alloc", "data"},
			Private: []string{checkpointFallbackSubdir},
			Owned:   []string{pathPart(cfg.Name)},
		}, false
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	return ckptLoc{
		Base:    root,
		Private: []string{pathPart(ns)},
		Owned:   []string{pathPart(cfg.JobID), pathPart(cfg.TaskGroupName), pathPart(cfg.Name)},
	}, true
}

// pathPart makes a Nomad name one path element, and distinct names
// distinct elements: a job named "a/b" and one named "a_b", or a name
// of "..", must never share a checkpoint dir, and a name too long for a
// file name must still get one. A name of letters, digits, '.', '_' and
// '-' that starts with a letter or digit, up to plainNameMax bytes, is
// kept as it is (the dirs of most jobs read as their names); any other
// is "~" and its bytes in base32 (lower case, unpadded), or, when that
// would be too long for a file name, "~~" and the SHA-256 of the name.
// A kept name never starts with "~", and base32 never with "~", so no
// two forms meet.
func pathPart(s string) string {
	if plainName(s) {
		return s
	}
	if len(s) <= encodedNameMax {
		return "~" + strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(s)))
	}
	sum := sha256.Sum256([]byte(s))
	return "~~" + hex.EncodeToString(sum[:])
}

const (
	// plainNameMax is the longest name kept as it is.
	plainNameMax = 128
	// encodedNameMax is the longest name encoded in base32: 1+240 bytes,
	// under the 255 of a file name.
	encodedNameMax = 150
)

func plainName(s string) bool {
	if s == "" || len(s) > plainNameMax {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// prepare creates the checkpoint dir, owned by the task's user (uid -1:
// the plugin's user), and returns it open. Modes and owners are set
// through descriptors, so a symlink planted anywhere below the base makes
// this fail instead of chowning or creating something elsewhere.
func (l ckptLoc) prepare(uid, gid int) (*safefs.Dir, error) {
	return l.walk(func(d *safefs.Dir, kind string) error {
		switch kind {
		case "private":
			if err := d.CheckNotShared(os.Geteuid()); err != nil {
				return err
			}
			return d.Chmod(0o711)
		case "owned":
			if uid >= 0 {
				if err := d.Chown(uid, gid); err != nil {
					return err
				}
			}
			return d.Chmod(0o700)
		}
		return nil
	})
}

// open opens the checkpoint dir without following symlinks, creating
// what is missing (with the modes prepare sets, owned by the plugin).
func (l ckptLoc) open() (*safefs.Dir, error) {
	return l.walk(func(*safefs.Dir, string) error { return nil })
}

func (l ckptLoc) walk(fix func(d *safefs.Dir, kind string) error) (*safefs.Dir, error) {
	cur, err := safefs.OpenDir(l.Base)
	if err != nil {
		return nil, fmt.Errorf("preparing checkpoint dir %s: %w", l.path(), err)
	}
	type step struct {
		name, kind string
		mode       os.FileMode
	}
	var steps []step
	for _, n := range l.Trusted {
		steps = append(steps, step{n, "trusted", 0o755})
	}
	for _, n := range l.Private {
		steps = append(steps, step{n, "private", 0o711})
	}
	for _, n := range l.Owned {
		steps = append(steps, step{n, "owned", 0o700})
	}
	for _, s := range steps {
		next, err := cur.Sub(s.name, s.mode)
		cur.Close()
		if err != nil {
			return nil, fmt.Errorf("preparing checkpoint dir %s: %w", l.path(), err)
		}
		if err := fix(next, s.kind); err != nil {
			next.Close()
			return nil, fmt.Errorf("preparing checkpoint dir %s: %w", l.path(), err)
		}
		cur = next
	}
	return cur, nil
}

// withCheckpointDir runs f on the task's checkpoint dir, opened without
// following symlinks.
func (h *taskHandle) withCheckpointDir(f func(dir *safefs.Dir) error) error {
	dir, err := h.ckpt.open()
	if err != nil {
		return err
	}
	defer dir.Close()
	return f(dir)
}

// prepareCheckpointRoot creates checkpoint_root (mode 0711: tasks pass
// through to their own dir but cannot list or write it) and refuses a
// root that another user owns or can write: whoever can write it can
// redirect every task's checkpoints. A root that is a symlink the
// plugin's user made (an operator's /var/lib/... -> /mnt/nfs/...) is
// resolved once, here; the returned path is the one to use.
func prepareCheckpointRoot(root string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return "", err
	}
	if err := os.Mkdir(root, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if info, err := os.Lstat(root); err == nil && info.Mode()&os.ModeSymlink != 0 {
		if uid := int(info.Sys().(*syscall.Stat_t).Uid); uid != os.Geteuid() {
			return "", fmt.Errorf("%s is a symlink owned by uid %d, not by this plugin's user: refusing to follow it", root, uid)
		}
		resolved, err := filepath.EvalSymlinks(root)
		if err != nil {
			return "", err
		}
		root = resolved
	}
	dir, err := safefs.OpenDir(root)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	return root, dir.CheckNotShared(os.Geteuid())
}

// markerLimit bounds what is read of a resume marker (a few hundred bytes).
const markerLimit = 64 << 10

func readMarker(dir *safefs.Dir) (marker, error) {
	var m marker
	raw, err := dir.ReadFile(markerFile, markerLimit)
	// A symlink (planted by the task) is not read, and counts as no
	// marker: the next write replaces it.
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, safefs.ErrSymlink) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("reading resume marker: %w", err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return marker{}, fmt.Errorf("resume marker %s is corrupt: %w", filepath.Join(dir.Path(), markerFile), err)
	}
	return m, nil
}

// writeMarker replaces the marker atomically, so a crash never leaves half
// a file for the next allocation to read; a symlink planted in its place
// is replaced, not written through.
func writeMarker(dir *safefs.Dir, m marker) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := dir.WriteFileAtomic(markerFile, append(raw, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing resume marker: %w", err)
	}
	return nil
}

// consumeResume is called when a task starts: a pending preemption makes
// this start a resume. It returns whether it is and the preemption count.
func consumeResume(dir *safefs.Dir, now time.Time) (resumed bool, count int, err error) {
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
func recordCheckpointSignal(dir *safefs.Dir, allocID, signal string, now time.Time) (int, error) {
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
func cancelCheckpointSignal(dir *safefs.Dir, allocID string) error {
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
