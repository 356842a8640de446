package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Every operation on a planted symlink fails or replaces the link; none
// reaches its target.
func TestNoFollow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      func(d *Dir) error
		wantErr error // nil: the op succeeds (and must not touch the target)
	}{
		{"Sub", func(d *Dir) error { _, err := d.Sub("link", 0o700); return err }, ErrSymlink},
		{"Open", func(d *Dir) error { _, err := d.Open("link"); return err }, ErrSymlink},
		{"Walk", func(d *Dir) error { _, err := d.Walk("link/x"); return err }, ErrSymlink},
		{"ReadFile", func(d *Dir) error { _, err := d.ReadFile("filelink", 100); return err }, ErrSymlink},
		{"OpenFile", func(d *Dir) error { _, err := d.OpenFile("filelink", os.O_WRONLY); return err }, ErrSymlink},
		{"CreateExclusive", func(d *Dir) error { return d.CreateExclusive("filelink", []byte("x"), 0o600) }, os.ErrExist},
		{"WriteFileAtomic", func(d *Dir) error { return d.WriteFileAtomic("filelink", []byte("new"), 0o600) }, nil},
		{"Remove", func(d *Dir) error { return d.Remove("link") }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, target := t.TempDir(), t.TempDir()
			targetFile := filepath.Join(target, "f")
			if err := os.WriteFile(targetFile, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(base, "link")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(targetFile, filepath.Join(base, "filelink")); err != nil {
				t.Fatal(err)
			}
			d, err := OpenDir(base)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			err = tc.op(d)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if raw, _ := os.ReadFile(targetFile); string(raw) != "old" {
				t.Errorf("target written: %q", raw)
			}
			if entries, _ := os.ReadDir(target); len(entries) != 1 {
				t.Errorf("target dir holds %d entries", len(entries))
			}
		})
	}
}

func TestCheckNotShared(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    os.FileMode
		uid     int
		wantErr string
	}{
		{"private", 0o711, 0, ""},
		{"world-writable", 0o777, 0, "mode 0777"},
		{"another user's", 0o700, 65534, "owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "d")
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, tc.uid, tc.uid); err != nil {
				t.Fatal(err)
			}
			d, err := OpenDir(p)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			err = d.CheckNotShared(os.Geteuid())
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// A FIFO is refused without blocking; CreateExclusive sets the mode
// exactly, whatever the umask.
func TestFilesKinds(t *testing.T) {
	base := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(base, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(base)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.ReadFile("fifo", 10); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("ReadFile(fifo): %v", err)
	}
	if err := d.CreateExclusive("f", []byte("x"), 0o622); err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(filepath.Join(base, "f")); info.Mode().Perm() != 0o622 {
		t.Errorf("mode %v, want 0622", info.Mode().Perm())
	}
}

func TestNamesUpToAndLstat(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(root, n), []byte(n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tt := range []struct{ n, want int }{{2, 2}, {10, 4}, {0, 4}, {-1, 4}} {
		if names, err := d.NamesUpTo(tt.n); err != nil || len(names) != tt.want {
			t.Errorf("NamesUpTo(%d) = %v, %v; want %d names", tt.n, names, err, tt.want)
		}
	}
	empty, err := d.Sub("empty", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if names, err := empty.NamesUpTo(5); err != nil || len(names) != 0 {
		t.Errorf("NamesUpTo of an empty dir = %v, %v", names, err)
	}
	st, err := d.Lstat("link")
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("Lstat(link) = mode %o, %v; want the link itself", st.Mode, err)
	}
	if _, err := d.Lstat("../a"); err == nil {
		t.Error("Lstat accepted a name with a slash")
	}
}
