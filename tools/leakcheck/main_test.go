package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestUsageErrors(t *testing.T) {
	t.Setenv("STEWARD_TEST_RUN", "")
	for _, args := range [][]string{
		{},                                 // no run ID
		{"-run", "x.1", "-since", "today"}, // not Unix seconds
		{"-run", "notanumber"},             // no start time in the ID
		{"-nosuchflag"},
	} {
		if got := run(args); got != 2 {
			t.Errorf("run(%q) = %d, want 2", args, got)
		}
	}
}

// A process carrying the run's ID is reported and killed (exit 1); with
// another run's ID, nothing is (exit 0).
func TestFindsAndKillsTheRunsProcess(t *testing.T) {
	id := fmt.Sprintf("%d.%d", time.Now().Unix(), os.Getpid())
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), "STEWARD_TEST_RUN="+id)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	// Start returns once the child's exec is past the point of no return,
	// but the kernel sets up the new program's environment after that: a
	// check made in that window reads an empty /proc/<pid>/environ and
	// finds nothing (CI, under load). Wait until the mark can be read.
	waitForEnv(t, cmd.Process.Pid, "STEWARD_TEST_RUN="+id)

	if got := run([]string{"-run", id + "0", "-grace", "0s"}); got != 0 {
		t.Errorf("another run's check = %d, want 0", got)
	}
	if got := run([]string{"-run", id, "-grace", "300ms"}); got != 1 {
		t.Errorf("the run's check = %d, want 1", got)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Errorf("leakcheck did not kill the run's process")
	}
}

// waitForEnv waits until the process's environment, as /proc shows it,
// has kv.
func waitForEnv(t *testing.T, pid int, kv string) {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/environ", pid)
	for deadline := time.Now().Add(10 * time.Second); ; {
		env, err := os.ReadFile(path)
		if err == nil && slices.ContainsFunc(bytes.Split(env, []byte{0}), func(e []byte) bool { return string(e) == kv }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %s (last read: %d bytes, %v)", path, kv, len(env), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
