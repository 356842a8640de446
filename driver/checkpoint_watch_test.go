package driver

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/gpu-steward/steward/internal/safefs"
)

func TestCheckpointWatch(t *testing.T) {
	start := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	type obs struct {
		now, newest time.Time
		want        time.Time // zero: no report
	}
	tests := []struct {
		name string
		obs  []obs
	}{
		{"nothing in the dir", []obs{{at(10), time.Time{}, time.Time{}}}},
		{"an earlier run's checkpoint is not reported", []obs{{at(10), at(-60), time.Time{}}}},
		{"a new checkpoint is reported once", []obs{
			{at(10), at(5), at(5)},
			{at(20), at(5), time.Time{}},
			{at(200), at(5), time.Time{}},
		}},
		{"a second within the minute waits for it; the newest is reported", []obs{
			{at(10), at(5), at(5)},
			{at(30), at(25), time.Time{}},
			{at(60), at(55), time.Time{}},
			{at(70), at(65), at(65)},
			{at(80), at(65), time.Time{}},
		}},
		{"a future mtime is reported as now, and not again", []obs{
			{at(10), at(3600), at(10)},
			{at(100), at(3600), at(100)},
			{at(200), at(3600), at(200)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newCheckpointWatch(start, time.Minute)
			for i, o := range tt.obs {
				got, ok := w.observe(o.now, o.newest)
				if ok != !o.want.IsZero() || !got.Equal(o.want) {
					t.Fatalf("observation %d (now %v, newest %v): got %v, %v; want %v", i, o.now, o.newest, got, ok, o.want)
				}
			}
		})
	}
}

func TestNewestCheckpoint(t *testing.T) {
	base := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	farFuture := time.Now().Add(1000 * time.Hour)
	touch := func(t *testing.T, path string, at time.Time) {
		t.Helper()
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write := func(t *testing.T, path string, at time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		touch(t, path, at)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		limit int
		want  time.Time
	}{
		{"empty", func(t *testing.T, dir string) {}, 100, time.Time{}},
		{"newest file", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "a"), base)
			write(t, filepath.Join(dir, "b"), base.Add(time.Minute))
		}, 100, base.Add(time.Minute)},
		{"the resume marker and its temporary files are not checkpoints", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "a"), base)
			write(t, filepath.Join(dir, markerFile), base.Add(time.Hour))
			write(t, filepath.Join(dir, "."+markerFile+".tmp1-2"), base.Add(time.Hour))
		}, 100, base},
		{"the done file is no checkpoint", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "a"), base)
			write(t, filepath.Join(dir, doneFile), base.Add(time.Hour))
		}, 100, base},
		{"a file in a checkpoint subdir", func(t *testing.T, dir string) {
			sub := filepath.Join(dir, "step-100")
			if err := os.Mkdir(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(sub, "model.pt"), base.Add(2*time.Minute))
			touch(t, sub, base)
		}, 100, base.Add(2 * time.Minute)},
		{"a symlink counts by its own time, its target is not followed", func(t *testing.T, dir string) {
			outside := filepath.Join(t.TempDir(), "outside")
			write(t, outside, farFuture)
			if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
		}, 100, time.Time{} /* the link's own time, now: checked below */},
		{"a full dir is read only up to the limit", func(t *testing.T, dir string) {
			for i := range 50 {
				write(t, filepath.Join(dir, "f"+strconv.Itoa(i)), base)
			}
		}, 10, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			d, err := safefs.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			got, err := newestCheckpoint(d, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want.IsZero() && tt.name != "empty" {
				if got.IsZero() || !got.Before(farFuture) {
					t.Errorf("newest %v: want the symlink's own time, not its target's", got)
				}
				return
			}
			if !got.Equal(tt.want) {
				t.Errorf("newest = %v, want %v", got, tt.want)
			}
		})
	}
}

// A checkpoint dir that does not exist is no checkpoint, and scanning it
// creates nothing: the task may be about to make it itself.
func TestScanCheckpointDirCreatesNothing(t *testing.T) {
	root := t.TempDir()
	l := ckptLoc{Base: root, Private: []string{"default"}, Owned: []string{"job", "group", "task"}}
	got, err := scanCheckpointDir(l)
	if err != nil || got != (ckptScan{}) {
		t.Fatalf("scan of a missing dir = %+v, %v; want zero, nil", got, err)
	}
	if names, _ := os.ReadDir(root); len(names) != 0 {
		t.Errorf("the scan created %v", names)
	}
}

// Under Nomad's driver harness: a task that saves a checkpoint gets one
// "Checkpoint saved" event whose details carry the time; a second one
// within the minute gets none.
func TestCheckpointSavedEvent(t *testing.T) {
	root := t.TempDir()
	td := newTestDriver(t, func(c *Config) { c.CheckpointRoot = root })
	events := td.events()
	cfg := td.task("train", sh(`trap 'exit 0' INT
sleep 0.2; echo 1 > "$STEWARD_CHECKPOINT_DIR/step-1"; echo > ready
while [ ! -e again ]; do sleep 0.05; done
echo 2 > "$STEWARD_CHECKPOINT_DIR/step-2"; echo > saved
while :; do sleep 0.05; done`))
	before := time.Now().Add(-time.Second)
	td.start(cfg)
	at := eventTime(t, expectEvent(t, events, cfg.ID, "Checkpoint saved at ", 5*time.Second), "checkpoint-saved", AnnotationCheckpointAt)
	if at.Before(before.Truncate(time.Second)) || at.After(time.Now()) {
		t.Errorf("checkpoint at %v, want between %v and now", at, before)
	}

	if err := os.WriteFile(filepath.Join(cfg.TaskDir().Dir, "again"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(cfg.TaskDir().Dir, "saved"), 5*time.Second)
	noEvent(t, events, cfg.ID, 500*time.Millisecond) // ten scans: rate-limited
}

// A done file answers the checkpoint request it follows, once: not one
// older than the request (a run before), not twice, and a new request gets
// its own answer.
func TestCheckpointDoneAnswersTheRequest(t *testing.T) {
	req := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		request bool
		done    time.Time
		want    time.Time // zero: nothing to report
	}{
		{"no request: nothing, whatever the file", false, req.Add(time.Second), time.Time{}},
		{"no done file", true, time.Time{}, time.Time{}},
		{"a done file older than the request", true, req.Add(-time.Minute), time.Time{}},
		{"touched after the request", true, req.Add(30 * time.Second), req.Add(30 * time.Second)},
		{"touched within the kernel clock's lag", true, req.Add(-5 * time.Millisecond), req.Add(-5 * time.Millisecond)},
		{"a time in the future is now", true, req.Add(time.Hour), req.Add(time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &taskHandle{}
			if tt.request {
				h.noteCheckpointRequest(req)
			}
			now := req.Add(time.Minute)
			got, ok := h.checkpointDone(now, tt.done)
			if ok != !tt.want.IsZero() || !got.Equal(tt.want) {
				t.Fatalf("checkpointDone = %v, %v; want %v", got, ok, tt.want)
			}
			if _, again := h.checkpointDone(now, tt.done); again {
				t.Fatalf("reported twice")
			}
		})
	}
	// A new request after an answer gets its own answer; a second signal
	// before the answer is the same request.
	h := &taskHandle{}
	h.noteCheckpointRequest(req)
	h.noteCheckpointRequest(req.Add(10 * time.Second))
	if _, ok := h.checkpointDone(req.Add(time.Minute), req.Add(5*time.Second)); !ok {
		t.Fatal("a second signal before the answer moved the request")
	}
	h.noteCheckpointRequest(req.Add(2 * time.Minute))
	if _, ok := h.checkpointDone(req.Add(3*time.Minute), req.Add(5*time.Second)); ok {
		t.Fatal("the first answer answered the second request")
	}
	if got, ok := h.checkpointDone(req.Add(3*time.Minute), req.Add(150*time.Second)); !ok || !got.Equal(req.Add(150*time.Second)) {
		t.Fatalf("second answer = %v, %v", got, ok)
	}
}

// Under Nomad's driver harness: a task that touches $STEWARD_CHECKPOINT_DONE
// after its checkpoint signal gets a "checkpoint-done" event with the time;
// one that touched it before the signal gets none until the signal.
func TestCheckpointDoneEvent(t *testing.T) {
	root := t.TempDir()
	td := newTestDriver(t, func(c *Config) { c.CheckpointRoot = root; c.GPUSamplePeriod = 50 * time.Millisecond })
	events := td.events()
	cfg := td.task("train", sh(`trap 'touch "$STEWARD_CHECKPOINT_DONE"; echo > done' USR1
trap 'exit 0' INT TERM
touch "$STEWARD_CHECKPOINT_DONE"; echo > ready
while :; do sleep 0.05; done`))
	td.start(cfg)
	waitFile(t, filepath.Join(cfg.TaskDir().Dir, "ready"), 5*time.Second)
	noEvent(t, events, cfg.ID, 300*time.Millisecond) // touched before any request: no answer
	before := time.Now()
	if err := td.h.SignalTask(cfg.ID, "SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	at := eventTime(t, expectEvent(t, events, cfg.ID, "Checkpoint written at ", 5*time.Second), "checkpoint-done", AnnotationCheckpointDoneAt)
	if at.Before(before.Add(-doneSlack)) || at.After(time.Now()) {
		t.Errorf("done at %v, want between %v and now", at, before)
	}
}

// eventTime checks an event's kind (annotation steward.event) and returns
// the time in its annotation field.
func eventTime(t *testing.T, ev *drivers.TaskEvent, kind, field string) time.Time {
	t.Helper()
	if ev.Annotations["steward.event"] != kind {
		t.Errorf("annotations %v: want steward.event %s", ev.Annotations, kind)
	}
	at, err := time.Parse(time.RFC3339, ev.Annotations[field])
	if err != nil {
		t.Fatalf("%s = %q: %v", field, ev.Annotations[field], err)
	}
	return at
}
