package driver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/gpu-steward/steward/internal/safefs"
)

// ownerMode is a path's uid and permission bits, not following a symlink.
func ownerMode(t *testing.T, p string) (int, os.FileMode) {
	t.Helper()
	info, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.Sys().(*syscall.Stat_t).Uid), info.Mode()
}

// Checkpoint dirs: the namespace dir is the plugin's (0711), the job's dir
// and below are the task user's (0700).
func TestCheckpointDirModes(t *testing.T) {
	root := t.TempDir()
	cfg := &drivers.TaskConfig{Namespace: "research", JobID: "train", TaskGroupName: "g", Name: "t", AllocDir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(cfg.AllocDir, "alloc", "data"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		root     string
		plugin   []string // dirs that must be root's, 0711
		owned    []string // dirs that must be the user's, 0700
		uid, gid int
	}{
		{"checkpoint_root", root, []string{"research"}, []string{"research/train", "research/train/g", "research/train/g/t"}, 65534, 65534},
		{"alloc dir", "", []string{"alloc/data/steward-checkpoint"}, []string{"alloc/data/steward-checkpoint/t"}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc, _ := checkpointLocation(tc.root, cfg)
			dir, err := loc.prepare(tc.uid, tc.gid)
			if err != nil {
				t.Fatal(err)
			}
			dir.Close()
			for _, p := range tc.plugin {
				if uid, mode := ownerMode(t, filepath.Join(loc.Base, p)); uid != 0 || mode.Perm() != 0o711 || !mode.IsDir() {
					t.Errorf("%s: uid %d mode %v, want root's 0711 dir", p, uid, mode)
				}
			}
			for _, p := range tc.owned {
				if uid, mode := ownerMode(t, filepath.Join(loc.Base, p)); uid != tc.uid || mode.Perm() != 0o700 || !mode.IsDir() {
					t.Errorf("%s: uid %d mode %v, want uid %d's 0700 dir", p, uid, mode, tc.uid)
				}
			}
		})
	}
}

// A symlink planted at any level of the checkpoint dir is not followed:
// prepare fails, and the link's target is neither chowned nor written.
func TestCheckpointDirSymlinkPlanted(t *testing.T) {
	cfg := &drivers.TaskConfig{Namespace: "ns", JobID: "job", TaskGroupName: "g", Name: "t"}
	for _, at := range []string{"ns", "ns/job", "ns/job/g", "ns/job/g/t"} {
		t.Run(at, func(t *testing.T) {
			root, victim := t.TempDir(), t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, filepath.Dir(at)), 0o711); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, filepath.Join(root, at)); err != nil {
				t.Fatal(err)
			}
			loc, _ := checkpointLocation(root, cfg)
			_, err := loc.prepare(65534, 65534)
			if !errors.Is(err, safefs.ErrSymlink) {
				t.Fatalf("prepare with a symlink at %s: %v, want a symlink error", at, err)
			}
			if uid, mode := ownerMode(t, victim); uid != 0 || mode.Perm() != 0o755 {
				t.Errorf("symlink target: uid %d mode %v, want untouched", uid, mode)
			}
			if entries, _ := os.ReadDir(victim); len(entries) != 0 {
				t.Errorf("symlink target now holds %d entries", len(entries))
			}
		})
	}
	// A namespace dir someone else owns (or can write) is refused.
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "ns"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "ns"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	loc, _ := checkpointLocation(root, cfg)
	if _, err := loc.prepare(65534, 65534); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("prepare under a namespace dir of another user: %v", err)
	}
}

// The resume marker as a symlink: it is not read (a first run), and
// writing the marker replaces the link; its target is never written.
func TestResumeMarkerSymlink(t *testing.T) {
	d := t.TempDir()
	target := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(target, []byte(`{"pending": true, "preemptions": 7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(d, markerFile)); err != nil {
		t.Fatal(err)
	}
	dir, err := safefs.OpenDir(d)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if resumed, count, err := consumeResume(dir, time.Now()); err != nil || resumed || count != 0 {
		t.Errorf("consumeResume through a symlink: %v %d %v, want a first run (the link is not read)", resumed, count, err)
	}
	if n, err := recordCheckpointSignal(dir, "a1", "SIGUSR1", time.Now()); err != nil || n != 1 {
		t.Fatalf("recordCheckpointSignal over a symlink: %d %v", n, err)
	}
	if raw, _ := os.ReadFile(target); string(raw) != `{"pending": true, "preemptions": 7}` {
		t.Errorf("symlink target written: %s", raw)
	}
	if _, mode := ownerMode(t, filepath.Join(d, markerFile)); !mode.IsRegular() || mode.Perm() != 0o600 {
		t.Errorf("marker mode %v, want a regular 0600 file", mode)
	}
}

// The preemption file is read without following symlinks, in the file or
// in a dir on its way; a FIFO does not block the driver.
func TestPreemptionFileNoFollow(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.env")
	if err := os.WriteFile(secret, []byte("reason=SECRET\ngrace=1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		setup      func(t *testing.T, taskDir string)
		wantReason string
	}{
		{"regular file", func(t *testing.T, d string) {
			if err := os.WriteFile(filepath.Join(d, "local", "steward-preemption.env"), []byte("reason=r1\ngrace=2m\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "r1"},
		{"file is a symlink", func(t *testing.T, d string) {
			if err := os.Symlink(secret, filepath.Join(d, "local", "steward-preemption.env")); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"dir is a symlink", func(t *testing.T, d string) {
			if err := os.Remove(filepath.Join(d, "local")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Dir(secret), filepath.Join(d, "local")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(secret, filepath.Join(filepath.Dir(secret), "steward-preemption.env")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Rename(filepath.Join(filepath.Dir(secret), "steward-preemption.env"), secret) })
		}, ""},
		{"a FIFO", func(t *testing.T, d string) {
			if err := syscall.Mkfifo(filepath.Join(d, "local", "steward-preemption.env"), 0o666); err != nil {
				t.Fatal(err)
			}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			taskDir := t.TempDir()
			if err := os.Mkdir(filepath.Join(taskDir, "local"), 0o777); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, taskDir)
			done := make(chan preemptionInfo)
			go func() { done <- readPreemptionInfo(taskDir, defaultPreemptionFile) }()
			select {
			case info := <-done:
				if info.Reason != tc.wantReason {
					t.Errorf("reason %q, want %q", info.Reason, tc.wantReason)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("reading the preemption file blocked")
			}
		})
	}
}

// checkpoint_root: created 0711; a symlink the plugin's user made is
// followed (once, to its target); a shared or foreign root is refused.
func TestPrepareCheckpointRoot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, root string) (want string)
		wantErr string
	}{
		{"created", func(t *testing.T, root string) string { return root }, ""},
		{"operator's symlink", func(t *testing.T, root string) string {
			target := t.TempDir()
			if err := os.Symlink(target, root); err != nil {
				t.Fatal(err)
			}
			return target
		}, ""},
		{"another user's symlink", func(t *testing.T, root string) string {
			if err := os.Symlink(t.TempDir(), root); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(root, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return ""
		}, "symlink owned by uid 65534"},
		{"world-writable", func(t *testing.T, root string) string {
			if err := os.Mkdir(root, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(root, 0o777); err != nil {
				t.Fatal(err)
			}
			return ""
		}, "group or others can write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "ckpt")
			want := tc.setup(t, root)
			got, err := prepareCheckpointRoot(root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != want {
				t.Fatalf("prepareCheckpointRoot = %q, %v; want %q", got, err, want)
			}
		})
	}
}
