// Package procs reads the machine's processes from /proc, for the test
// harness and `make leakcheck` to find what tests left running. Linux only,
// as Steward's tests are.
package procs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is one process, as much of it as could be read: another user's
// process may hide its cwd, exe and environment.
type Proc struct {
	Pid, PPid, Pgid int
	// State is the one-letter state of /proc/<pid>/stat ("Z": a zombie).
	State string
	// Exe is the executable's path, without the " (deleted)" the kernel
	// adds when the file was replaced since (`make plugins` does that).
	Exe     string
	Cmdline []string
	Cwd     string
	Env     []string
	// Started is when the process started, to the clock tick.
	Started time.Time
}

// Running reports whether the process still runs: zombies and dead ones
// have exited and only wait for their parent.
func (p Proc) Running() bool { return p.State != "Z" && p.State != "X" }

// CommandLine is the command line as a shell would show it.
func (p Proc) CommandLine() string { return strings.Join(p.Cmdline, " ") }

// Getenv returns the value of the environment variable key, and whether
// the process has it.
func (p Proc) Getenv(key string) (string, bool) {
	for _, kv := range p.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Mentions reports whether the process's command line, working directory
// or environment names path or something below it.
func (p Proc) Mentions(path string) bool {
	path = filepath.Clean(path)
	under := func(s string) bool {
		i := strings.Index(s, path)
		if i < 0 {
			return false
		}
		// data-1 is not data-10.
		rest := s[i+len(path):]
		return rest == "" || !isNameByte(rest[0])
	}
	if under(p.Cwd) {
		return true
	}
	for _, s := range p.Cmdline {
		if under(s) {
			return true
		}
	}
	for _, s := range p.Env {
		if under(s) {
			return true
		}
	}
	return false
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// List reads every process it can. Processes that end while it reads are
// left out.
func List() ([]Proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	boot, err := bootTime()
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := read(pid, boot); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// read reads one process; ok is false when it is gone.
func read(pid int, boot time.Time) (Proc, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Proc{}, false
	}
	// The command name is in parentheses and may hold spaces: the fields
	// after it start at the last ')'.
	s := string(stat)
	rp := strings.LastIndexByte(s, ')')
	if rp < 0 || rp+2 > len(s) {
		return Proc{}, false
	}
	fields := strings.Fields(s[rp+2:])
	if len(fields) < 20 {
		return Proc{}, false
	}
	p := Proc{Pid: pid, State: fields[0]}
	p.PPid, _ = strconv.Atoi(fields[1])
	p.Pgid, _ = strconv.Atoi(fields[2])
	if ticks, err := strconv.ParseInt(fields[19], 10, 64); err == nil {
		p.Started = boot.Add(time.Duration(ticks) * time.Second / clockTicks)
	}
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		p.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	p.Cwd, _ = os.Readlink(filepath.Join(dir, "cwd"))
	p.Cmdline = nulSplit(filepath.Join(dir, "cmdline"))
	p.Env = nulSplit(filepath.Join(dir, "environ"))
	return p, true
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

func nulSplit(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return nil
	}
	var out []string
	for _, f := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}) {
		out = append(out, string(f))
	}
	return out
}

// bootTime is when the machine booted (/proc/stat's btime).
func bootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("reading boot time: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("reading boot time: %w", err)
			}
			return time.Unix(secs, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("reading boot time: no btime in /proc/stat")
}

// Ancestors returns the process IDs of pid's parent, its parent's parent,
// and so on, from the processes in ps.
func Ancestors(ps []Proc, pid int) map[int]bool {
	parent := make(map[int]int, len(ps))
	for _, p := range ps {
		parent[p.Pid] = p.PPid
	}
	out := map[int]bool{}
	for pp := parent[pid]; pp > 1 && !out[pp]; pp = parent[pp] {
		out[pp] = true
	}
	return out
}

// Kill sends SIGKILL to the process, and to its process group when it
// leads one other than the caller's: what a task or an executor started
// goes with it.
func Kill(p Proc) error {
	if p.Pgid == p.Pid && p.Pgid != syscall.Getpgrp() {
		_ = syscall.Kill(-p.Pgid, syscall.SIGKILL)
	}
	if err := syscall.Kill(p.Pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("killing %d (%s): %w", p.Pid, p.CommandLine(), err)
	}
	return nil
}
