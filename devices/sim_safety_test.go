package devices

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobody is the unprivileged user the safety tests act as.
const nobodyUID, nobodyGID = 65534, 65534

// asNobody runs a shell command as nobody and returns its error.
func asNobody(t *testing.T, script string) error {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test acts as another user and must run as root (as `make test` does here)")
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyGID}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("as nobody: %s: %v: %s", script, err, out)
	}
	return err
}

// reachableTempDir is a temp dir other users can pass through (t.TempDir's
// parent is 0700).
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The state dir is the plugin's own: someone else's is refused, an older
// version's shared one is tightened and its shared files removed.
func TestSimStateDirOwnership(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir string)
		wantErr string
	}{
		{"created by the plugin", func(*testing.T, string) {}, ""},
		{"another user's dir", func(t *testing.T, dir string) {
			if err := os.Chown(dir, nobodyUID, nobodyGID); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
		{"a symlink to a dir", func(t *testing.T, dir string) {
			target := t.TempDir()
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link, not followed"},
		{"an older version's 0777 dir", func(t *testing.T, dir string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "sim")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			d, err := openSimStateDir(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("openSimStateDir: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d.Close()
			if info, err := os.Lstat(dir); err != nil || info.Mode().Perm() != 0o711 {
				t.Errorf("state dir %v %v, want mode 0711", info, err)
			}
		})
	}
}

// Symlinks planted in the sim dir are never followed: not for a GPU's dir,
// not for its activity file, neither when reading nor when Reserve
// replaces the file.
func TestSimSymlinkPlanted(t *testing.T) {
	dir := t.TempDir()
	ids := []string{SimUUID(dir, 0), SimUUID(dir, 1)}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("77\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Planted before the plugin starts: GPU 0's dir is a symlink to a dir
	// holding a file named like the old shared activity file.
	victimDir := filepath.Dir(victim)
	if err := os.Symlink(victimDir, filepath.Join(dir, ids[0])); err != nil {
		t.Fatal(err)
	}
	p, _ := newTestPlugin(t, nil, map[string]interface{}{"backend": "sim", "sim_state_dir": dir, "sim_count": 2})
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)
	if info, err := os.Lstat(filepath.Join(dir, ids[0])); err != nil || !info.IsDir() {
		t.Fatalf("GPU dir %v %v: want the symlink replaced by a dir", info, err)
	}

	res, err := p.Reserve(ids)
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Split(res.Envs[EnvSimActivityFiles], ",")
	stats := mustStats(t, p)
	util := func(id string) int64 {
		s := nextStats(t, stats)
		return statInt(t, s.Groups[0].InstanceStats[id], StatGPUUtilization)
	}
	if err := os.WriteFile(files[1], []byte("30\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	waitUtil(t, util, ids[1], 30)
	// The activity file replaced by a symlink to a file saying 77: the
	// plugin keeps the last value, it does not read through the link.
	// Swapped in at once (a rename): removed first, a sample between the
	// two steps read the missing file as idle, and the test failed under
	// load for want of the last value.
	planted := files[1] + ".planted"
	if err := os.Symlink(victim, planted); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(planted, files[1]); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if got := util(ids[1]); got != 30 {
			t.Fatalf("utilisation %d through a planted symlink, want the last value 30", got)
		}
	}
	// Reserve again: the link is removed, the victim not written (reset).
	if _, err := p.Reserve(ids[1:]); err != nil {
		t.Fatal(err)
	}
	if raw, err := os.ReadFile(victim); err != nil || string(raw) != "77\n" {
		t.Errorf("symlink target now %q (%v), want it untouched", raw, err)
	}
	if _, err := os.Lstat(files[1]); !os.IsNotExist(err) {
		t.Errorf("planted symlink %s still there (%v)", files[1], err)
	}
	entries, _ := os.ReadDir(victimDir)
	if len(entries) != 1 {
		t.Errorf("the planted dir's target holds %d entries, want only the victim file", len(entries))
	}
}

// A task (any user) can write the activity file it was given, but cannot
// list the dirs to find another task's, nor create files there.
func TestSimTaskWritesOnlyItsOwnFile(t *testing.T) {
	dir := reachableTempDir(t)
	p, _ := newTestPlugin(t, nil, map[string]interface{}{"backend": "sim", "sim_state_dir": dir, "sim_count": 2})
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)
	res, err := p.Reserve([]string{SimUUID(dir, 0)})
	if err != nil {
		t.Fatal(err)
	}
	mine := res.Envs[EnvSimActivityFile]
	other, err := p.Reserve([]string{SimUUID(dir, 1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, script string
		ok           bool
	}{
		{"write its own file", "echo 80 > " + mine, true},
		{"list the state dir", "ls " + dir, false},
		{"list another GPU's dir", "ls " + filepath.Dir(other.Envs[EnvSimActivityFile]), false},
		{"create a file in a GPU's dir", "echo 1 > " + filepath.Join(filepath.Dir(mine), "utilization-forged"), false},
		{"read its own file back (only the plugin reads)", "cat " + mine, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := asNobody(t, tc.script); (err == nil) != tc.ok {
				t.Errorf("%s as nobody: err %v, want success %t", tc.script, err, tc.ok)
			}
		})
	}
}

// After a plugin restart, a running task's file is still the one read.
func TestSimRestartKeepsCurrentFile(t *testing.T) {
	dir := t.TempDir()
	values := map[string]interface{}{"backend": "sim", "sim_state_dir": dir, "sim_count": 1}
	p, _ := newTestPlugin(t, nil, values)
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)
	id := SimUUID(dir, 0)
	var file string
	for i := 0; i < 2; i++ { // two reservations: only the newest file stays
		res, err := p.Reserve([]string{id})
		if err != nil {
			t.Fatal(err)
		}
		file = res.Envs[EnvSimActivityFile]
	}
	if err := os.WriteFile(file, []byte("64\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	p2, _ := newTestPlugin(t, nil, values)
	ch2, _ := p2.Fingerprint(testContext(t))
	nextFingerprint(t, ch2)
	stats := mustStats(t, p2)
	waitUtil(t, func(id string) int64 {
		return statInt(t, nextStats(t, stats).Groups[0].InstanceStats[id], StatGPUUtilization)
	}, id, 64)
	entries, _ := os.ReadDir(filepath.Dir(file))
	if len(entries) != 1 {
		t.Errorf("%d files in the GPU's dir, want the current one", len(entries))
	}
}
