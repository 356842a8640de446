package driver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Linux reports process times in clock ticks of USER_HZ, which is 100 on
// every architecture Nomad supports.
const clockTicksPerSecond = 100

var pageSize = uint64(os.Getpagesize())

// procStat is what the driver reads from /proc/<pid>/stat.
type procStat struct {
	pid, ppid, pgrp int
	state           byte
	// cpu is user and system time.
	user, system time.Duration
	// startTicks is when the process started, in clock ticks after boot:
	// with the pid it identifies a process across pid reuse.
	startTicks uint64
	rssBytes   uint64
}

var errNoProcess = errors.New("no such process")

// readProcStat reads one process's stat line.
func readProcStat(pid int) (procStat, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if os.IsNotExist(err) {
			return procStat{}, errNoProcess
		}
		return procStat{}, fmt.Errorf("reading /proc/%d/stat: %w", pid, err)
	}
	return parseProcStat(pid, raw)
}

// parseProcStat parses a /proc/<pid>/stat line. The command name is in
// parentheses and may itself contain spaces and parentheses, so fields are
// counted from the last ')'.
func parseProcStat(pid int, raw []byte) (procStat, error) {
	rp := bytes.LastIndexByte(raw, ')')
	if rp < 0 || rp+2 >= len(raw) {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(raw[rp+2:])
	// f[0] is field 3 (state); field n is f[n-3].
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(field int) uint64 {
		v, _ := strconv.ParseUint(string(f[field-3]), 10, 64)
		return v
	}
	tick := time.Second / clockTicksPerSecond
	return procStat{
		pid:        pid,
		state:      f[0][0],
		ppid:       int(num(4)),
		pgrp:       int(num(5)),
		user:       time.Duration(num(14)) * tick,
		system:     time.Duration(num(15)) * tick,
		startTicks: num(22),
		rssBytes:   num(24) * pageSize,
	}, nil
}

// alive reports whether the process that started at startTicks still runs
// (a zombie has ended: only its exit status is left).
func alive(pid int, startTicks uint64) bool {
	st, err := readProcStat(pid)
	if err != nil {
		return false
	}
	return st.startTicks == startTicks && st.state != 'Z' && st.state != 'X'
}

// taskProcesses returns the live processes of a task: its process group,
// and any descendant of its main process that left the group (a child that
// called setsid is still the task's, as long as its parent chain is).
// Descendants count only while the main process that started at
// leaderStart runs: after it ends, its pid may belong to someone else.
func taskProcesses(leader int, leaderStart uint64) []procStat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	all := make(map[int]procStat, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.state == 'Z' || st.state == 'X' {
			continue
		}
		all[pid] = st
	}
	l, ok := all[leader]
	withDescendants := ok && l.startTicks == leaderStart
	var out []procStat
	for pid, st := range all {
		if st.pgrp == leader || withDescendants && descendsFrom(all, pid, leader) {
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
		pid = st.ppid
	}
	return false
}
