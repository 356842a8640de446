package driver

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"
)

// The preemption file as the job's template renders it, step by step: a
// warning is emitted once per warning, only for the allocations it names.
func TestIdleWarningFromFile(t *testing.T) {
	const alloc = "abcd1234-0000-4000-8000-000000000001"
	steps := []struct {
		name string
		file string
		want string // "": no event
	}{
		{"no warning in the record", "reason=\ngrace=\npreemptions=0\nidle_warning=<no value>\nidle_warning_at=<no value>\n", ""},
		{"a warning about another allocation", "idle_warning=idle for 10m\nidle_warning_at=2026-11-26T07:00:00Z\nidle_warning_allocs=ffff0000\n", ""},
		{"a warning about this one", "idle_warning=GPU utilisation 2% for 10m: its 1 GPU goes back in 5m unless it gets busy\n" +
			"idle_warning_at=2026-11-26T07:00:00Z\nidle_warning_allocs=ffff0000,abcd1234\n",
			"Idle warning: GPU utilisation 2% for 10m: its 1 GPU goes back in 5m unless it gets busy"},
		{"the same warning rendered again", "idle_warning=GPU utilisation 2% for 11m\nidle_warning_at=2026-11-26T07:00:00Z\nidle_warning_allocs=abcd1234\n", ""},
		{"withdrawn (busy again)", "reason=\n", ""},
		{"a new warning, for the whole job", "idle_warning=idle again\nidle_warning_at=2026-11-26T08:00:00Z\n", "Idle warning: idle again"},
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "local"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := &taskHandle{cfg: &drivers.TaskConfig{AllocID: alloc}}
	for _, s := range steps {
		if err := os.WriteFile(filepath.Join(dir, defaultPreemptionFile), []byte(s.file), 0o644); err != nil {
			t.Fatal(err)
		}
		msg, ok := h.idleWarning(readPreemptionInfo(dir, defaultPreemptionFile))
		if ok != (s.want != "") || msg != s.want {
			t.Fatalf("%s: event %q (%v), want %q", s.name, msg, ok, s.want)
		}
	}
	// A recovered task does not emit the warning its file already holds.
	r := &taskHandle{cfg: &drivers.TaskConfig{AllocID: alloc}}
	r.primeIdleWarning(readPreemptionInfo(dir, defaultPreemptionFile))
	if msg, ok := r.idleWarning(readPreemptionInfo(dir, defaultPreemptionFile)); ok {
		t.Fatalf("recovered task emitted %q again", msg)
	}
}

// Under Nomad's driver harness: a warning rendered into the task's file
// becomes one "Driver" event with its annotations.
func TestIdleWarningEvent(t *testing.T) {
	td := newTestDriver(t, func(c *Config) { c.GPUSamplePeriod = 50 * time.Millisecond })
	events := td.events()
	cfg := td.task("nb", sh(`trap 'exit 0' INT TERM
echo > ready
while :; do sleep 0.05; done`))
	td.start(cfg)
	waitFile(t, filepath.Join(cfg.TaskDir().Dir, "ready"), 5*time.Second)
	file := filepath.Join(cfg.TaskDir().Dir, defaultPreemptionFile)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	content := "idle_warning=GPU utilisation 2% (under 10%) for 10m: its 1 GPU goes back in 5m unless it gets busy\n" +
		"idle_warning_at=2026-11-26T07:00:00Z\nidle_warning_allocs=" + cfg.AllocID[:8] + "\n"
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ev := expectEvent(t, events, cfg.ID, "Idle warning: GPU utilisation 2% (under 10%) for 10m", 5*time.Second)
	if ev.Annotations["steward.event"] != eventIdleWarning || ev.Annotations[AnnotationIdleWarningAt] != "2026-11-26T07:00:00Z" {
		t.Errorf("annotations %v", ev.Annotations)
	}
	noEvent(t, events, cfg.ID, 300*time.Millisecond) // once
}
