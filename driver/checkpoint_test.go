package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/gpu-steward/steward/internal/safefs"
)

func TestCheckpointDir(t *testing.T) {
	// Names that are not safe path elements stay inside the root.
	cfg := &drivers.TaskConfig{Namespace: "research", JobID: "team/job", TaskGroupName: "g", Name: "..", AllocDir: "/alloc"}
	loc, persistent := checkpointLocation("/ckpt", cfg)
	if want := filepath.Join("/ckpt", "research", pathPart("team/job"), "g", pathPart("..")); loc.path() != want || !persistent {
		t.Errorf("checkpointDir = %s %v, want %s true", loc.path(), persistent, want)
	}
	loc, persistent = checkpointLocation("", cfg)
	if dir, want := loc.path(), filepath.Join("/alloc", "alloc", "data", "steward-checkpoint", pathPart("..")); dir != want || persistent {
		t.Errorf("checkpointDir without root = %s %v, want %s false", dir, persistent, want)
	}
}

// Nomad names become path elements that cannot collide: names that
// differ get different elements, none is "." or "..", none holds a "/",
// and none is longer than a file name may be.
func TestPathPartNoCollision(t *testing.T) {
	long := strings.Repeat("j", 300)
	for _, tc := range []struct {
		name string
		a, b string // two names that must not share a dir ("" b: a alone)
		want string // a's element, when it is kept as it is
	}{
		{name: "plain name kept", a: "train-llm_v2.1", want: "train-llm_v2.1"},
		{name: "slash and underscore", a: "team/job", b: "team_job"},
		{name: "dot-dot", a: "..", b: "_.."},
		{name: "dot", a: ".", b: "_."},
		{name: "hidden name", a: ".uids", b: "_.uids"},
		{name: "encoded form of another name", a: "a/b", b: pathPart("a/b")},
		{name: "long names differing at the end", a: long + "1", b: long + "2"},
		{name: "long plain name and its prefix", a: strings.Repeat("x", 129), b: strings.Repeat("x", 128)},
		{name: "backslash and NUL", a: "a\\b", b: "a\x00b"},
		{name: "empty", a: "", b: "_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pa := pathPart(tc.a)
			for _, p := range []string{pa, pathPart(tc.b)} {
				if p == "" || p == "." || p == ".." || strings.ContainsAny(p, "/\x00") || len(p) > 255 {
					t.Errorf("element %q is not a safe file name", p)
				}
			}
			if tc.want != "" && pa != tc.want {
				t.Errorf("pathPart(%q) = %q, want it kept", tc.a, pa)
			}
			if tc.b != "" && pa == pathPart(tc.b) {
				t.Errorf("%q and %q share the element %q", tc.a, tc.b, pa)
			}
		})
	}
}

// The marker's life across allocations: signal, (racing) replacement
// start, repeated signals, a second preemption, and a signal that did not
// end in a preemption.
func TestResumeMarker(t *testing.T) {
	dir, err := safefs.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	now := time.Unix(1_700_000_000, 0)
	step := func(name string, f func() (bool, int, error), wantResumed bool, wantCount int) {
		t.Helper()
		resumed, count, err := f()
		if err != nil || resumed != wantResumed || count != wantCount {
			t.Fatalf("%s: resumed %v count %d (%v), want %v %d", name, resumed, count, err, wantResumed, wantCount)
		}
	}
	start := func() (bool, int, error) { return consumeResume(dir, now) }
	signal := func(alloc string) func() (bool, int, error) {
		return func() (bool, int, error) {
			n, err := recordCheckpointSignal(dir, alloc, "SIGUSR1", now)
			return false, n, err
		}
	}

	step("first run", start, false, 0)
	step("signal alloc 1", signal("a1"), false, 1)
	step("signal alloc 1 again", signal("a1"), false, 1)
	step("alloc 2 starts (maybe before alloc 1 has stopped)", start, true, 1)
	step("alloc 2 restarts", start, false, 1)
	step("signal alloc 2", signal("a2"), false, 2)
	step("alloc 3 starts", start, true, 2)

	step("signal alloc 3", signal("a3"), false, 3)
	if err := cancelCheckpointSignal(dir, "a3"); err != nil {
		t.Fatal(err)
	}
	step("alloc 3 completed by itself: no resume", start, false, 2)

	// A corrupt marker is an error (the driver then starts the task as a
	// first run).
	if err := os.WriteFile(filepath.Join(dir.Path(), markerFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := consumeResume(dir, now); err == nil {
		t.Error("corrupt marker read without error")
	}
}
