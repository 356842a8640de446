package procs

import (
	"fmt"
	"strings"

	"github.com/prometheus/procfs"
)

// CommandLine reads one process's command line from the host's /proc,
// its arguments joined by spaces ("" when the process is gone: the
// callers ask whether a pid they recorded still runs their program).
func CommandLine(pid int) string {
	h, err := Host()
	if err != nil {
		return ""
	}
	p, err := h.fs.Proc(pid)
	if err != nil {
		return ""
	}
	args, err := p.CmdLine()
	if err != nil {
		return ""
	}
	return strings.Join(args, " ")
}

// InCgroup lists the host's processes whose cgroup path contains any of
// names (a container's ID, for one): what a killed Docker daemon left
// running in its containers.
func InCgroup(names []string) ([]int, error) {
	h, err := Host()
	if err != nil {
		return nil, err
	}
	ps, err := h.fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var out []int
	for _, p := range ps {
		cgs, err := p.Cgroups()
		if err != nil {
			continue // ended while read, or not ours to read
		}
		if cgroupNamed(cgs, names) {
			out = append(out, p.PID)
		}
	}
	return out, nil
}

func cgroupNamed(cgs []procfs.Cgroup, names []string) bool {
	for _, cg := range cgs {
		for _, n := range names {
			if strings.Contains(cg.Path, n) {
				return true
			}
		}
	}
	return false
}

// MountPoints lists the mount points this process sees
// (/proc/self/mountinfo).
func MountPoints() ([]string, error) {
	ms, err := procfs.GetMounts()
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.MountPoint)
	}
	return out, nil
}
