// Package procs is Steward's one reader of /proc (Linux only, as Steward's
// drivers and tests are): the driver's view of a task's processes (Stat,
// Stats, IDs), and the test harness's and `make leakcheck`'s of what tests
// left running (List). It reads through github.com/prometheus/procfs
// (stat.go).
package procs

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
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

// List reads every process it can from the host's /proc. Processes that
// end while it reads are left out.
func List() ([]Proc, error) {
	h, err := Host()
	if err != nil {
		return nil, err
	}
	return h.List()
}

// List reads every process it can. Processes that end while it reads are
// left out; another user's may lack their cwd, exe and environment.
func (f FS) List() ([]Proc, error) {
	ps, err := f.fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	ks, err := f.fs.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading boot time: %w", err)
	}
	boot := time.Unix(int64(ks.BootTime), 0)
	var out []Proc
	for _, p := range ps {
		st, err := stat(p)
		if err != nil {
			continue
		}
		out = append(out, proc(p, st, boot))
	}
	return out, nil
}

// proc reads the rest of a process whose stat was read.
func proc(p procfs.Proc, st Stat, boot time.Time) Proc {
	out := Proc{Pid: st.Pid, PPid: st.PPid, Pgid: st.Pgid, State: string(st.State),
		Started: boot.Add(time.Duration(st.StartTicks) * time.Second / ClockTicks)}
	if exe, err := p.Executable(); err == nil {
		out.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	out.Cwd, _ = p.Cwd()
	if cl, err := p.CmdLine(); err == nil && len(cl) > 0 {
		out.Cmdline = cl
	}
	if env, err := p.Environ(); err == nil && len(env) > 0 {
		out.Env = env
	}
	return out
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
