package driver

import "github.com/gpu-steward/steward/internal/procs"

// procStat is what the driver reads of a process (internal/procs, Steward's
// one /proc reader).
type procStat = procs.Stat

// readProcStat reads one process's stat: procs.ErrNoProcess when it is gone.
func readProcStat(pid int) (procStat, error) { return procs.ReadStat(pid) }

// alive reports whether the process that started at startTicks still runs
// (a zombie has ended: only its exit status is left).
func alive(pid int, startTicks uint64) bool {
	st, err := readProcStat(pid)
	if err != nil {
		return false
	}
	return st.StartTicks == startTicks && st.Running()
}

// taskProcesses returns the live processes of a task: its process group,
// and any descendant of its main process that left the group (a child that
// called setsid is still the task's, as long as its parent chain is).
// Descendants count only while the main process that started at
// leaderStart runs: after it ends, its pid may belong to someone else.
func taskProcesses(leader int, leaderStart uint64) []procStat {
	h, err := procs.Host()
	if err != nil {
		return nil
	}
	stats, err := h.Stats()
	if err != nil {
		return nil
	}
	all := make(map[int]procStat, len(stats))
	for _, st := range stats {
		if st.Running() {
			all[st.Pid] = st
		}
	}
	l, ok := all[leader]
	withDescendants := ok && l.StartTicks == leaderStart
	var out []procStat
	for pid, st := range all {
		if st.Pgid == leader || withDescendants && descendsFrom(all, pid, leader) {
			out = append(out, st)
		}
	}
	return out
}

func descendsFrom(all map[int]procStat, pid, ancestor int) bool {
	for depth := 0; depth < 64 && pid > 1; depth++ {
		if pid == ancestor {
			return true
		}
		st, ok := all[pid]
		if !ok {
			return false
		}
		pid = st.PPid
	}
	return false
}
