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
			if depth == 0 && (name == markerFile || strings.HasPrefix(name, "."+markerFile)) {
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
		newest, err := scanCheckpointDir(h.ckpt)
		if err != nil {
			return err
		}
		if at, ok := w.observe(time.Now(), newest); ok {
			d.emit(h.cfg, checkpointSavedMessage(at, h.ckptDir), map[string]string{
				"steward.event": eventCheckpointSaved, AnnotationCheckpointAt: at.UTC().Format(time.RFC3339),
			})
		}
		return nil
	})
}

// scanCheckpointDir returns the newest checkpoint time in a task's
// checkpoint dir; zero when the dir does not exist. Unlike the other uses
// of the dir it creates nothing: a dir the task removed and is about to
// make again must not come back owned by the plugin, which would lock the
// task out of it.
func scanCheckpointDir(l ckptLoc) (time.Time, error) {
	base, err := safefs.OpenDir(l.Base)
	if err != nil {
		return time.Time{}, fmt.Errorf("opening %s: %w", l.Base, err)
	}
	defer base.Close()
	parts := append(append(append([]string{}, l.Trusted...), l.Private...), l.Owned...)
	dir, err := base.Walk(filepath.Join(parts...))
	if errors.Is(err, os.ErrNotExist) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	defer dir.Close()
	return newestCheckpoint(dir, checkpointScanLimit)
}

// checkpointSavedMessage is the event of a new checkpoint.
func checkpointSavedMessage(at time.Time, dir string) string {
	return fmt.Sprintf("Checkpoint saved at %s in %s", at.UTC().Format(time.RFC3339), dir)
}
