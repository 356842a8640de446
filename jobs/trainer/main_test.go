package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary runs the trainer itself when asked to, so the tests need
// no separate build.
func TestMain(m *testing.M) {
	if os.Getenv("TRAINER_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"trainer"}, os.Args[1:]...)
		main()
	}
	os.Exit(m.Run())
}

// lockedBuffer is the trainer's stdout, read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startTrainer(t *testing.T, dir string, env ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-dir", dir, "-step-time", "10ms", "-checkpoint-every", "10", "-steps", "100000", "-save-on-stop=false")
	cmd.Env = append(os.Environ(), append([]string{"TRAINER_TEST_RUN_MAIN=1", "STEWARD_CHECKPOINT_SIGNAL=SIGUSR1"}, env...)...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

func waitOutput(t *testing.T, out *lockedBuffer, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %q in the trainer's output:\n%s", re, out.String())
	return nil
}

// Checkpoint on the signal, be killed without warning some steps later,
// resume: the loss is reported and at most one checkpoint interval.
func TestCheckpointKillResume(t *testing.T) {
	dir := t.TempDir()
	done := filepath.Join(t.TempDir(), "done")
	cmd, out := startTrainer(t, dir, "STEWARD_CHECKPOINT_DONE="+done)
	waitOutput(t, out, regexp.MustCompile(`trainer: step 25\n`))
	if _, err := os.Stat(done); err == nil {
		t.Fatal("the done file exists before any checkpoint signal")
	}
	signalled := time.Now()
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	m := waitOutput(t, out, regexp.MustCompile(`checkpoint at step (\d+) \(SIGUSR1 received\)`))
	// It says the checkpoint is written: the done file is touched after
	// that line is printed, and this line follows it (a loaded machine ran
	// the stat between the two).
	waitOutput(t, out, regexp.MustCompile(`trainer: checkpoint written at `))
	if st, err := os.Stat(done); err != nil || st.ModTime().Before(signalled.Add(-time.Second)) {
		t.Errorf("done file after the signalled checkpoint: %v, %v", st, err)
	}
	ckpt, _ := strconv.Atoi(m[1])
	waitOutput(t, out, regexp.MustCompile(`trainer: step `+strconv.Itoa(ckpt+15)+`\n`))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	reached, _ := strconv.Atoi(string(bytes.TrimSpace(must(os.ReadFile(filepath.Join(dir, progressFile))))))

	_, out = startTrainer(t, dir, "STEWARD_RESUMED=1", "STEWARD_RESUME_COUNT=1")
	m = waitOutput(t, out, regexp.MustCompile(`resuming from checkpoint at step (\d+) .*previous run reached step (\d+): lost (\d+) steps \(checkpoint interval 10\)`))
	from, prev, lost := atoi(m[1]), atoi(m[2]), atoi(m[3])
	// It resumes from a periodic checkpoint taken after the signalled one
	// (at most one interval old: the kill comes 15 steps after it). Not
	// necessarily from one 10 steps after the signal: with the signal at
	// step 25, the only one is the checkpoint of step 40, and the kill at
	// step 40 may come before it is written.
	if prev != reached || lost != reached-from || lost > 10 || from <= ckpt {
		t.Errorf("resumed from %d (checkpoint on the signal at %d), previous run reached %d (really %d), lost %d:\n%s", from, ckpt, prev, reached, lost, out)
	}
	waitOutput(t, out, regexp.MustCompile(`STEWARD_RESUMED=1 STEWARD_RESUME_COUNT=1`))
	waitOutput(t, out, regexp.MustCompile(`trainer: step `+strconv.Itoa(from+1)+`\n`))
}

// Under any driver (no STEWARD_CHECKPOINT_DONE: a container), the
// trainer says a signalled checkpoint is written in its task dir, the
// file Steward's controller reads; not before the signal.
func TestSaysWrittenInTaskDir(t *testing.T) {
	taskDir := t.TempDir()
	written := filepath.Join(taskDir, "steward-checkpoint-written")
	cmd, out := startTrainer(t, t.TempDir(), "NOMAD_TASK_DIR="+taskDir, "STEWARD_CHECKPOINT_DONE=")
	waitOutput(t, out, regexp.MustCompile(`trainer: step 5\n`))
	if _, err := os.Stat(written); err == nil {
		t.Fatal("the checkpoint-written file exists before any checkpoint signal")
	}
	signalled := time.Now()
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	m := waitOutput(t, out, regexp.MustCompile(`trainer: checkpoint written at (\S+)\n`))
	st, err := os.Stat(written)
	if err != nil || st.ModTime().Before(signalled.Add(-time.Second)) {
		t.Fatalf("checkpoint-written file after the signalled checkpoint: %v, %v", st, err)
	}
	if at, err := time.Parse(time.RFC3339Nano, m[1]); err != nil || !at.Equal(st.ModTime()) {
		t.Errorf("printed time %s (%v), the file's %s", m[1], err, st.ModTime())
	}
}

// writtenFiles: the contract's file in the task dir (or where
// STEWARD_CHECKPOINT_WRITTEN says); under steward-exec its done file alone,
// which the driver reports as a task event.
func TestWrittenFiles(t *testing.T) {
	tests := []struct {
		name                   string
		taskDir, written, done string
		want                   []string
	}{
		{"no driver at all (a shell)", "", "", "", nil},
		{"any driver: the task dir", "/local", "", "", []string{"/local/steward-checkpoint-written"}},
		{"the path overridden", "/local", "/alloc/w", "", []string{"/alloc/w"}},
		{"steward-exec: its done file alone", "/t/local", "", "/ck/.steward-checkpoint-done", []string{"/ck/.steward-checkpoint-done"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NOMAD_TASK_DIR", tt.taskDir)
			t.Setenv("STEWARD_CHECKPOINT_WRITTEN", tt.written)
			t.Setenv("STEWARD_CHECKPOINT_DONE", tt.done)
			if got := writtenFiles(); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("writtenFiles() = %q, want %q", got, tt.want)
			}
		})
	}
}

// Stopped with SIGTERM (save-on-stop), the trainer loses nothing.
func TestStopSavesCheckpoint(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-dir", dir, "-step-time", "10ms", "-steps", "100000")
	cmd.Env = append(os.Environ(), "TRAINER_TEST_RUN_MAIN=1")
	out := &lockedBuffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, regexp.MustCompile(`trainer: step 13\n`))
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("trainer exit: %v\n%s", err, out)
	}
	m := waitOutput(t, out, regexp.MustCompile(`stopping at step (\d+) \(terminated\): checkpoint saved`))
	ck, err := load(dir)
	if err != nil || ck == nil || strconv.Itoa(ck.Step) != m[1] {
		t.Errorf("checkpoint %+v (%v), want step %s", ck, err, m[1])
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
