package procs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

func TestHostReaders(t *testing.T) {
	self := os.Getpid()
	if got := CommandLine(self); !strings.Contains(got, filepath.Base(os.Args[0])) {
		t.Errorf("CommandLine(self) = %q, want it to name %s", got, filepath.Base(os.Args[0]))
	}
	if got := CommandLine(1 << 30); got != "" {
		t.Errorf("CommandLine(no such pid) = %q, want \"\"", got)
	}
	points, err := MountPoints()
	if err != nil || !slices.Contains(points, "/") {
		t.Errorf("MountPoints() = %d points, %v; want / among them", len(points), err)
	}
	p, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	me, _ := p.Self()
	cgs, err := me.Cgroups()
	if err != nil || len(cgs) == 0 {
		t.Fatalf("reading this process's cgroups: %v", err)
	}
	own := slices.MaxFunc(cgs, func(a, b procfs.Cgroup) int { return len(a.Path) - len(b.Path) }).Path
	pids, err := InCgroup([]string{own})
	if err != nil || !slices.Contains(pids, self) {
		t.Errorf("InCgroup(own cgroup %q) = %v, %v; want %d among them", own, pids, err, self)
	}
	if pids, _ := InCgroup([]string{"no-such-container-0123456789abcdef"}); len(pids) != 0 {
		t.Errorf("InCgroup(unknown) = %v, want none", pids)
	}
}

func TestCgroupNamed(t *testing.T) {
	cgs := []procfs.Cgroup{{Path: "/system.slice/docker-0123abcd.scope"}}
	for _, tc := range []struct {
		name  string
		names []string
		want  bool
	}{
		{"a container's ID in the path", []string{"0123abcd"}, true},
		{"another container", []string{"ffff"}, false},
		{"no names", nil, false},
	} {
		if got := cgroupNamed(cgs, tc.names); got != tc.want {
			t.Errorf("%s: cgroupNamed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
