package leakcheck

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/procs"
)

func TestWhy(t *testing.T) {
	since := time.Date(2026, 11, 23, 19, 0, 0, 0, time.UTC)
	r := Run{
		ID:      "1795462990.100",
		TempDir: "/tmp/steward-test.1795462990.100",
		Since:   since,
		Bins:    []string{"/src/bin/nomad", "/src/bin/plugins"},
		Exclude: map[int]bool{10: true},
	}
	after, before := since.Add(time.Minute), since.Add(-time.Minute)
	for _, tc := range []struct {
		name string
		p    procs.Proc
		want string // part of Why; "" for not the run's
	}{
		{"marked by the run", procs.Proc{Pid: 1, State: "S", Env: []string{"STEWARD_TEST_RUN=1795462990.100"}, Started: after}, "STEWARD_TEST_RUN=1795462990.100"},
		{"marked, started before (a task keeps its env)", procs.Proc{Pid: 1, State: "S", Env: []string{"STEWARD_TEST_RUN=1795462990.100"}, Started: before}, "STEWARD_TEST_RUN"},
		{"leakcheck and its ancestors", procs.Proc{Pid: 10, State: "S", Env: []string{"STEWARD_TEST_RUN=1795462990.100"}}, ""},
		{"a zombie", procs.Proc{Pid: 1, State: "Z", Env: []string{"STEWARD_TEST_RUN=1795462990.100"}}, ""},
		{"cwd under the run's temp dir", procs.Proc{Pid: 1, State: "S", Cwd: "/tmp/steward-test.1795462990.100/TestX1/001/data-1/alloc/a/t"}, "under /tmp/steward-test"},
		{"executor naming the run's temp dir", procs.Proc{Pid: 1, State: "S", Cmdline: []string{"nomad", "executor", `{"LogFile":"/tmp/steward-test.1795462990.100/TestX/001/data-1/alloc/x/executor.out"}`}}, "under"},
		{"another run's temp dir", procs.Proc{Pid: 1, State: "S", Cwd: "/tmp/steward-test.1795462990.1001/TestX"}, ""},
		{"a build output started since", procs.Proc{Pid: 1, State: "S", Exe: "/src/bin/nomad", Started: after}, "started from /src/bin/nomad"},
		{"a plugin started since", procs.Proc{Pid: 1, State: "S", Exe: "/src/bin/plugins/steward-gpu", Started: after}, "started from /src/bin/plugins/steward-gpu"},
		{"a build output started before (make demo)", procs.Proc{Pid: 1, State: "S", Exe: "/src/bin/nomad", Started: before}, ""},
		{"a build output of another run", procs.Proc{Pid: 1, State: "S", Exe: "/src/bin/nomad", Started: after, Env: []string{"STEWARD_TEST_RUN=1795462999.200"}}, ""},
		{"another checkout's nomad", procs.Proc{Pid: 1, State: "S", Exe: "/other/bin/nomad", Started: after}, ""},
		{"a file beside bin/plugins", procs.Proc{Pid: 1, State: "S", Exe: "/src/bin/plugins-old/x", Started: after}, ""},
		{"someone else's test under /tmp", procs.Proc{Pid: 1, State: "S", Cwd: "/tmp/TestSimGPUs123/001/data-1", Exe: "/bin/sh", Started: after}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.Why(tc.p)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Why = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFindAndReport(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 19, 0, 0, 0, time.UTC)
	r := Run{ID: "x", Since: t0}
	ps := []procs.Proc{
		{Pid: 3, State: "S", Env: []string{"STEWARD_TEST_RUN=x"}, Started: t0.Add(2 * time.Second), Cmdline: []string{"sleep", "600"}, Cwd: "/t"},
		{Pid: 2, State: "S", Started: t0},
		{Pid: 1, State: "S", Env: []string{"STEWARD_TEST_RUN=x"}, Started: t0.Add(time.Second), Exe: "/bin/nomad"},
	}
	leaks := r.Find(ps)
	if len(leaks) != 2 || leaks[0].Pid != 1 || leaks[1].Pid != 3 {
		t.Fatalf("Find = %+v, want pids 1 and 3, oldest first", leaks)
	}
	rep := Report(leaks)
	for _, want := range []string{"pid 1 ", "(nomad)", "pid 3 ", "cwd /t", "sleep 600", "[STEWARD_TEST_RUN=x]"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}
