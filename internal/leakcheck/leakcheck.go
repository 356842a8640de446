// Package leakcheck finds the processes a `make test` run started that are
// still running at its end (`make leakcheck`, tools/leakcheck): agents,
// plugins, tasks and their Nomad executors, controllers, Consul agents,
// browsers. It must not flag anything else, as the machine may run other
// people's tests and demos at the same time.
package leakcheck

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpu-steward/steward/internal/procs"
)

// EnvRun is the environment variable that marks a run's processes: `make
// test` sets it to an ID of its own, and every process it starts inherits
// it (Nomad passes the agent's environment on to raw_exec and steward-exec
// tasks, chromedp to the browser).
const EnvRun = "STEWARD_TEST_RUN"

// Run says which processes belong to a run.
type Run struct {
	// ID is the run's EnvRun value.
	ID string
	// TempDir is the run's TMPDIR, under which its tests' temp dirs (agent
	// data dirs, task dirs, browser profiles) are: a process whose command
	// line, cwd or environment names it is the run's. Empty: none.
	TempDir string
	// Since is when the run began.
	Since time.Time
	// Bins are the build outputs the run's processes are started from
	// (bin/nomad, bin/steward...): files, or directories whose files count
	// (bin/plugins). A process started from one after Since is the run's,
	// unless it carries another run's ID.
	Bins []string
	// Exclude are processes never to flag: leakcheck itself and its
	// ancestors (make, the shell), which carry the run's ID.
	Exclude map[int]bool
}

// Why says why p belongs to the run, or "" when it does not.
func (r Run) Why(p procs.Proc) string {
	if !p.Running() || r.Exclude[p.Pid] {
		return ""
	}
	id, marked := p.Getenv(EnvRun)
	switch {
	case r.ID != "" && marked && id == r.ID:
		return EnvRun + "=" + id
	case r.TempDir != "" && p.Mentions(r.TempDir):
		return "under " + r.TempDir
	case marked:
		// Another run's (say, a `make test` in another checkout).
		return ""
	case !p.Started.Before(r.Since) && r.fromBin(p.Exe):
		return "started from " + p.Exe + " since " + r.Since.Format("15:04:05")
	}
	return ""
}

func (r Run) fromBin(exe string) bool {
	if exe == "" {
		return false
	}
	for _, b := range r.Bins {
		if exe == b || strings.HasPrefix(exe, strings.TrimSuffix(b, "/")+"/") {
			return true
		}
	}
	return false
}

// Leak is a process of the run still running, and why it is the run's.
type Leak struct {
	procs.Proc
	Why string
}

// Find returns the run's processes among ps, oldest first.
func (r Run) Find(ps []procs.Proc) []Leak {
	var out []Leak
	for _, p := range ps {
		if why := r.Why(p); why != "" {
			out = append(out, Leak{Proc: p, Why: why})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.Before(out[j].Started)
		}
		return out[i].Pid < out[j].Pid
	})
	return out
}

// Report lists leaks for a person: pid, start time, cwd, why, command
// line.
func Report(leaks []Leak) string {
	var b strings.Builder
	for _, l := range leaks {
		cmd := l.CommandLine()
		if len(cmd) > 400 {
			cmd = cmd[:400] + "..."
		}
		if cmd == "" {
			cmd = "(" + filepath.Base(l.Exe) + ")"
		}
		fmt.Fprintf(&b, "  pid %-7d started %s  cwd %s  [%s]\n      %s\n", l.Pid, l.Started.Format("15:04:05"), l.Cwd, l.Why, cmd)
	}
	return b.String()
}
