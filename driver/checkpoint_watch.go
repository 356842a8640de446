package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpu-steward/steward/internal/safefs"
)

// The driver tells Steward's controller when a task last saved a
// checkpoint, so that among victims the policy ranks equal it can take the
// one with the least work since its checkpoint. The task says nothing
// itself: the driver watches the task's checkpoint dir and reports the
// newest modification time in it as a task event ("Driver" events carry
// their annotations to the allocation's TaskStates as Details, which the
// controller reads when it lists allocations).

const (
	// eventCheckpointSaved is the steward.event of a checkpoint report.
	eventCheckpointSaved = "checkpoint-saved"
	// AnnotationCheckpointAt holds the checkpoint's time, RFC 3339, UTC.
	AnnotationCheckpointAt = "steward.checkpoint_at"
	// eventCheckpointDone is the steward.event of a task saying that the
	// checkpoint its checkpoint signal asked for is written
	// (EnvCheckpointDone); AnnotationCheckpointDoneAt holds when, RFC 3339
	// with nanoseconds, UTC.
	eventCheckpointDone        = "checkpoint-done"
	AnnotationCheckpointDoneAt = "steward.checkpoint_done_at"

	// checkpointEventEvery is the least time between two reports: Nomad
	// keeps the last 10 events per task, and a task that checkpoints every
	// few seconds must not push out the others (checkpoint requests,
	// resumes, idle/busy).
	checkpointEventEvery = time.Minute
	// checkpointScanLimit bounds the entries read per scan: the task owns
	// the dir and could fill it.
	checkpointScanLimit = 4096
)

// checkpointWatch decides when a newly seen checkpoint is reported: once
// per new checkpoint, at most once per interval; a checkpoint seen within
// the interval is reported (or a newer one instead) when it has passed.
type checkpointWatch struct {
	every    time.Duration
	reported time.Time // newest checkpoint reported; the task's start at first
	lastSent time.Time // when the last report went out
}

// newCheckpointWatch starts a watch for a task started at start:
// checkpoints written before it are an earlier run's.
func newCheckpointWatch(start time.Time, every time.Duration) *checkpointWatch {
	return &checkpointWatch{every: every, reported: start}
}

// observe takes the newest checkpoint time in the dir (zero: none) at
// now, and returns the time to report, if any. A time after now (a task
// may set any mtime) is reported as now.
func (w *checkpointWatch) observe(now, newest time.Time) (time.Time, bool) {
	if newest.After(now) {
		newest = now
	}
	if !newest.After(w.reported) {
		return time.Time{}, false
	}
	if !w.lastSent.IsZero() && now.Sub(w.lastSent) < w.every {
		return time.Time{}, false
	}
	w.reported, w.lastSent = newest, now
	return newest, true
}

// newestCheckpoint returns the newest modification time of the entries of
// a checkpoint dir and of its subdirectories (one level: frameworks write
// a checkpoint as a file or as a dir of files), reading at most limit
// entries. Symlinks are not followed; the driver's own resume marker (and
// its temporary files) are not checkpoints.
func newestCheckpoint(dir *safefs.Dir, limit int) (time.Time, error) {
	var newest time.Time
	budget := limit
	var scan func(d *safefs.Dir, depth int) error
	scan = func(d *safefs.Dir, depth int) error {
		if budget <= 0 {
			return nil
		}
		names, err := d.NamesUpTo(budget)
		if err != nil {
			return fmt.Errorf("listing %s: %w", d.Path(), err)
		}
		budget -= len(names)
		for _, name := range names {
			if depth == 0 && (name == markerFile || strings.HasPrefix(name, "."+markerFile) || name == doneFile) {
				continue
			}
			st, err := d.Lstat(name)
			if err != nil {
				continue // removed while scanning
			}
			if t := time.Unix(st.Mtim.Unix()); t.After(newest) {
				newest = t
			}
			if depth == 0 && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				sub, err := d.Open(name)
				if err != nil {
					continue
				}
				err = scan(sub, depth+1)
				sub.Close()
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	return newest, scan(dir, 0)
}

// watchCheckpoints reports new checkpoints of a task every
// gpu_sample_period (the GPU monitor's tick) until ctx ends.
func (d *Driver) watchCheckpoints(ctx context.Context, h *taskHandle) {
	w := newCheckpointWatch(h.startedAt, checkpointEventEvery)
	everyPeriod(ctx, d.config().GPUSamplePeriod, h, "cannot scan the checkpoint dir "+h.ckptDir, func() error {
		scan, err := scanCheckpointDir(h.ckpt)
		if err != nil {
			return err
		}
		now := time.Now()
		if at, ok := w.observe(now, scan.newest); ok {
			d.emit(h.cfg, checkpointSavedMessage(at, h.ckptDir), map[string]string{
				"steward.event": eventCheckpointSaved, AnnotationCheckpointAt: at.UTC().Format(time.RFC3339),
			})
		}
		if at, ok := h.checkpointDone(now, scan.done); ok {
			d.emit(h.cfg, checkpointDoneMessage(at), map[string]string{
				"steward.event": eventCheckpointDone, AnnotationCheckpointDoneAt: at.UTC().Format(time.RFC3339Nano),
			})
		}
		return nil
	})
}

// doneSlack is how much earlier than the checkpoint request the done
// file's time may be and still answer it: file times are kept at the
// kernel's coarse clock, a few milliseconds behind.
const doneSlack = 20 * time.Millisecond

// noteCheckpointRequest notes that the checkpoint signal was forwarded at
// now: a done file touched from then on answers it. A second signal
// before the answer is the same request.
func (h *taskHandle) noteCheckpointRequest(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ckptRequestedAt.IsZero() || h.ckptDoneReported {
		h.ckptRequestedAt, h.ckptDoneReported = now, false
	}
}

// checkpointDone takes the done file's time (zero: none) at now and
// returns the time to report, once per checkpoint request: a time after
// now (a task may set any) is reported as now.
func (h *taskHandle) checkpointDone(now, done time.Time) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ckptRequestedAt.IsZero() || h.ckptDoneReported || done.IsZero() || done.Before(h.ckptRequestedAt.Add(-doneSlack)) {
		return time.Time{}, false
	}
	h.ckptDoneReported = true
	if done.After(now) {
		done = now
	}
	return done, true
}

// checkpointDoneMessage is the event of a task's done file.
func checkpointDoneMessage(at time.Time) string {
	return fmt.Sprintf("Checkpoint written at %s (the task says so): it may stop now", at.UTC().Format(time.RFC3339))
}

// ckptScan is what a scan of a checkpoint dir found: the newest
// checkpoint time, and the done file's (zero: none).
type ckptScan struct{ newest, done time.Time }

// scanCheckpointDir returns the newest checkpoint time in a task's
// checkpoint dir, and the time of its done file; zero when the dir does not
// exist. Unlike the other uses of the dir it creates nothing: a dir the
// task removed and is about to make again must not come back owned by the
// plugin, which would lock the task out of it.
func scanCheckpointDir(l ckptLoc) (ckptScan, error) {
	base, err := safefs.OpenDir(l.Base)
	if err != nil {
		return ckptScan{}, fmt.Errorf("opening %s: %w", l.Base, err)
	}
	defer base.Close()
	parts := append(append(append([]string{}, l.Trusted...), l.Private...), l.Owned...)
	dir, err := base.Walk(filepath.Join(parts...))
	if errors.Is(err, os.ErrNotExist) {
		return ckptScan{}, nil
	}
	if err != nil {
		return ckptScan{}, err
	}
	defer dir.Close()
	var scan ckptScan
	if st, err := dir.Lstat(doneFile); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		scan.done = time.Unix(st.Mtim.Unix())
	}
	scan.newest, err = newestCheckpoint(dir, checkpointScanLimit)
	return scan, err
}

// checkpointSavedMessage is the event of a new checkpoint.
func checkpointSavedMessage(at time.Time, dir string) string {
	return fmt.Sprintf("Checkpoint saved at %s in %s", at.UTC().Format(time.RFC3339), dir)
}
