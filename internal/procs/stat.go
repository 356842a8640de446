package procs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// Steward reads /proc through github.com/prometheus/procfs (in the module
// graph through client_golang): the library owns the file formats (a
// command name with spaces and parentheses in stat, the fields of status),
// this package only what Steward makes of them. The driver (a task's
// processes, their CPU and memory, whether a task still runs, the ids a
// job's processes hold) and the test harness (List) both read here.

// ErrNoProcess is the error for a process that is not there (or no longer).
var ErrNoProcess = errors.New("no such process")

// ClockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every
// Linux architecture Go supports.
const ClockTicks = 100

var pageSize = uint64(os.Getpagesize())

// Stat is what Steward uses of a process's /proc/<pid>/stat.
type Stat struct {
	Pid, PPid, Pgid int
	// State is the one-letter state ('Z': a zombie, 'X': dead).
	State byte
	// User and System are the CPU time it used.
	User, System time.Duration
	// StartTicks is when the process started, in clock ticks after boot:
	// with the pid it identifies a process across pid reuse.
	StartTicks uint64
	RSSBytes   uint64
}

// Running reports whether the process still runs: zombies and dead ones
// have exited and only wait for their parent.
func (s Stat) Running() bool { return s.State != 'Z' && s.State != 'X' }

// FS is a proc file system: the host's (Host), or a copy of one that a test
// writes.
type FS struct {
	fs procfs.FS
}

// NewFS reads the proc file system mounted at root.
func NewFS(root string) (FS, error) {
	f, err := procfs.NewFS(root)
	if err != nil {
		return FS{}, fmt.Errorf("opening the proc file system at %s: %w", root, err)
	}
	return FS{f}, nil
}

// Host is the host's /proc, opened once: the driver reads it every second.
func Host() (FS, error) { return host() }

var host = sync.OnceValues(func() (FS, error) { return NewFS(procfs.DefaultMountPoint) })

// ReadStat reads one process's stat from the host's /proc.
func ReadStat(pid int) (Stat, error) {
	h, err := Host()
	if err != nil {
		return Stat{}, err
	}
	return h.Stat(pid)
}

// Stat reads one process's stat: ErrNoProcess when it is gone.
func (f FS) Stat(pid int) (Stat, error) {
	p, err := f.fs.Proc(pid)
	if err != nil {
		return Stat{}, notThere(pid, err)
	}
	return stat(p)
}

// Stats reads the stat of every process it can; processes that end while
// it reads, or whose stat does not parse, are left out.
func (f FS) Stats() ([]Stat, error) {
	ps, err := f.fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	out := make([]Stat, 0, len(ps))
	for _, p := range ps {
		if s, err := stat(p); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

func stat(p procfs.Proc) (Stat, error) {
	ps, err := p.Stat()
	if err != nil {
		return Stat{}, notThere(p.PID, err)
	}
	var state byte
	if ps.State != "" {
		state = ps.State[0]
	}
	tick := time.Second / ClockTicks
	return Stat{
		Pid:        p.PID,
		PPid:       ps.PPID,
		Pgid:       ps.PGRP,
		State:      state,
		User:       time.Duration(ps.UTime) * tick,
		System:     time.Duration(ps.STime) * tick,
		StartTicks: ps.Starttime,
		RSSBytes:   uint64(max(ps.RSS, 0)) * pageSize,
	}, nil
}

// notThere turns "no such file" into ErrNoProcess and names the process in
// any other error.
func notThere(pid int, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNoProcess
	}
	return fmt.Errorf("reading /proc/%d/stat: %w", pid, err)
}

// IDs returns every uid and gid (real, effective, saved, filesystem) that
// a process on the host runs as. Processes that end while it reads are
// left out.
func (f FS) IDs() (map[uint32]bool, error) {
	ps, err := f.fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	out := map[uint32]bool{}
	for _, p := range ps {
		st, err := p.NewStatus()
		if err != nil {
			continue // ended meanwhile
		}
		for _, id := range append(st.UIDs[:], st.GIDs[:]...) {
			if id <= 1<<32-1 {
				out[uint32(id)] = true
			}
		}
	}
	return out, nil
}

// ReadChars is the bytes a process read with read calls, /proc/<pid>/io's
// rchar (its sockets too, counted by the kernel): the scale test's measure
// of what the controller reads from Nomad.
func (f FS) ReadChars(pid int) (uint64, error) {
	p, err := f.fs.Proc(pid)
	if err != nil {
		return 0, notThere(pid, err)
	}
	io, err := p.IO()
	if err != nil {
		return 0, fmt.Errorf("reading /proc/%d/io: %w", pid, err)
	}
	return io.RChar, nil
}
