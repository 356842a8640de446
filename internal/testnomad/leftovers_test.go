package testnomad

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A task that outlived its agent is found by its environment and killed;
// one of another agent is left alone.
func TestKillTasksUnder(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	start := func(dataDir string) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.Env = []string{"NOMAD_ALLOC_DIR=" + filepath.Join(dataDir, "alloc", "x", "alloc")}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	mine, theirs := start(dir), start(other)
	if n := killTasksUnder(dir); n != 1 {
		t.Errorf("killed %d processes, want 1", n)
	}
	done := make(chan error, 1)
	go func() { done <- mine.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the leftover task still runs")
	}
	if err := theirs.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("another agent's task was killed: %v", err)
	}
}
