package procs

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestMentions(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Proc
		want bool
	}{
		{"cwd below", Proc{Cwd: "/tmp/a/data-1/alloc/x"}, true},
		{"cwd itself", Proc{Cwd: "/tmp/a/data-1"}, true},
		{"argument", Proc{Cmdline: []string{"nomad", "-data-dir", "/tmp/a/data-1"}}, true},
		{"in JSON", Proc{Cmdline: []string{"nomad", "executor", `{"LogFile":"/tmp/a/data-1/alloc/x/executor.out"}`}}, true},
		{"environment", Proc{Env: []string{"NOMAD_TASK_DIR=/tmp/a/data-1/alloc/x/t/local"}}, true},
		{"a longer name", Proc{Cwd: "/tmp/a/data-10/alloc"}, false},
		{"elsewhere", Proc{Cwd: "/tmp/b", Cmdline: []string{"sleep", "1"}, Env: []string{"HOME=/root"}}, false},
	} {
		if got := tc.p.Mentions("/tmp/a/data-1"); got != tc.want {
			t.Errorf("%s: Mentions = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// List reads a child's command line, cwd, environment, group and start.
func TestListReadsAChild(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sleep", "30")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROCS_TEST_MARK=yes")
	before := time.Now().Add(-time.Second)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	ps, err := List()
	if err != nil {
		t.Fatal(err)
	}
	var p *Proc
	for i := range ps {
		if ps[i].Pid == cmd.Process.Pid {
			p = &ps[i]
		}
	}
	if p == nil {
		t.Fatalf("List lacks the child %d", cmd.Process.Pid)
	}
	if v, ok := p.Getenv("PROCS_TEST_MARK"); !ok || v != "yes" {
		t.Errorf("Getenv = %q, %v", v, ok)
	}
	if p.Cwd != dir || p.CommandLine() != "sleep 30" || p.PPid != os.Getpid() || !p.Running() || !p.Mentions(dir) {
		t.Errorf("child read as %+v", *p)
	}
	if p.Started.Before(before) || p.Started.After(time.Now().Add(time.Second)) {
		t.Errorf("started %v, want about now", p.Started)
	}
	if !Ancestors(ps, p.Pid)[os.Getpid()] {
		t.Errorf("Ancestors of the child lack this process")
	}
	if err := Kill(*p); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}
