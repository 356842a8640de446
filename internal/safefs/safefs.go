// Package safefs opens, creates, chowns, reads and writes files below a
// trusted directory without following symbolic links.
//
// Steward's plugins run as root and work in directories that tasks can
// write to (a job's checkpoint dir, a task dir). A task could plant a
// symlink there to make root read, write or chown a file elsewhere (/etc,
// another job's checkpoints). Every name below the trusted directory is
// therefore opened relative to an open directory with O_NOFOLLOW, and
// ownership and mode are changed through the open descriptor (fchown,
// fchmod), never through a path. os.Root is not enough: it follows
// symlinks that stay inside the root, such as one job's dir pointing at
// another's.
package safefs

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrSymlink is returned (wrapped) when a name is a symbolic link.
var ErrSymlink = errors.New("is a symbolic link, not followed")

// Dir is an open directory. Close it when done.
type Dir struct {
	f    *os.File
	path string
}

// OpenDir opens a trusted directory (an operator's configured path): its
// ancestors are resolved normally, its last element must not be a symlink.
func OpenDir(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if info, lerr := os.Lstat(path); lerr == nil && info.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s: %w", path, ErrSymlink)
		}
		return nil, pathErr("open", path, err)
	}
	return &Dir{f: os.NewFile(uintptr(fd), path), path: path}, nil
}

// Path is the directory's path, for messages and for handing to tasks.
func (d *Dir) Path() string { return d.path }

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Stat describes the directory itself (through its descriptor).
func (d *Dir) Stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.f.Fd()), &st); err != nil {
		return st, pathErr("stat", d.path, err)
	}
	return st, nil
}

// Chown changes the directory's owner through its descriptor.
func (d *Dir) Chown(uid, gid int) error {
	if err := d.f.Chown(uid, gid); err != nil {
		return fmt.Errorf("chown %s to %d:%d: %w", d.path, uid, gid, err)
	}
	return nil
}

// Chmod changes the directory's mode through its descriptor.
func (d *Dir) Chmod(mode os.FileMode) error {
	if err := d.f.Chmod(mode); err != nil {
		return fmt.Errorf("chmod %s: %w", d.path, err)
	}
	return nil
}

// Sub opens the subdirectory name, creating it with mode when missing. A
// symlink in its place is an error wrapping ErrSymlink.
func (d *Dir) Sub(name string, mode os.FileMode) (*Dir, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	p := filepath.Join(d.path, name)
	err := unix.Mkdirat(int(d.f.Fd()), name, uint32(mode.Perm()))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, pathErr("mkdir", p, err)
	}
	fd, err := unix.Openat(int(d.f.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.openErr(name, err)
	}
	return &Dir{f: os.NewFile(uintptr(fd), p), path: p}, nil
}

// Open opens the existing subdirectory name; a symlink is an error
// wrapping ErrSymlink.
func (d *Dir) Open(name string) (*Dir, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(int(d.f.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.openErr(name, err)
	}
	return &Dir{f: os.NewFile(uintptr(fd), filepath.Join(d.path, name)), path: filepath.Join(d.path, name)}, nil
}

// Walk opens the existing relative directory path rel below d, one
// element at a time, following no symlink. It returns the last one.
func (d *Dir) Walk(rel string) (*Dir, error) {
	cur := d
	for _, name := range strings.Split(filepath.Clean(rel), string(filepath.Separator)) {
		next, err := cur.Open(name)
		if cur != d {
			cur.Close()
		}
		if err != nil {
			return nil, err
		}
		cur = next
	}
	if cur == d {
		return nil, fmt.Errorf("walk %s: empty path", d.path)
	}
	return cur, nil
}

// ReadFile reads the regular file name, at most limit bytes. A symlink is
// an error wrapping ErrSymlink; a FIFO or device is refused without
// blocking.
func (d *Dir) ReadFile(name string, limit int64) ([]byte, error) {
	f, err := d.openFile(name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// CreateExclusive creates name (it must not exist, and is never a
// symlink's target) holding data, with perm exactly (not masked by the
// umask). The file appears whole or not at all: it is written under a
// temporary name and linked to name, which fails if name exists. So a
// reader that finds name never sees it empty or half written, which an
// O_EXCL create followed by a write would let it (two tasks of one job
// claiming a uid would then each take one). link(2) is atomic on NFS too.
func (d *Dir) CreateExclusive(name string, data []byte, perm os.FileMode) error {
	if err := checkName(name); err != nil {
		return err
	}
	tmp, err := d.createTemp(name, data, perm)
	if err != nil {
		return err
	}
	defer func() { _ = d.Remove(tmp) }()
	if err := unix.Linkat(int(d.f.Fd()), tmp, int(d.f.Fd()), name, 0); err != nil {
		return d.openErr(name, err)
	}
	return nil
}

// createTemp writes data to a new file with a unique name derived from
// name and returns that name.
func (d *Dir) createTemp(name string, data []byte, perm os.FileMode) (string, error) {
	var tmp string
	var err error
	for i := 0; i < 10; i++ {
		tmp = fmt.Sprintf(".%s.tmp%d-%d", name, os.Getpid(), randUint())
		if err = d.createNew(tmp, data, perm); !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	return tmp, err
}

// createNew creates name with O_EXCL, writes data and sets perm.
func (d *Dir) createNew(name string, data []byte, perm os.FileMode) error {
	fd, err := unix.Openat(int(d.f.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return d.openErr(name, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.path, name))
	_, werr := f.Write(data)
	cerr := f.Chmod(perm)
	if err := errors.Join(werr, cerr, f.Close()); err != nil {
		_ = d.Remove(name)
		return fmt.Errorf("writing %s: %w", filepath.Join(d.path, name), err)
	}
	return nil
}

// WriteFileAtomic replaces name with a new file holding data: a temporary
// file created exclusively, renamed over name. A symlink at name is
// replaced, never written through.
func (d *Dir) WriteFileAtomic(name string, data []byte, perm os.FileMode) error {
	if err := checkName(name); err != nil {
		return err
	}
	tmp, err := d.createTemp(name, data, perm)
	if err != nil {
		return err
	}
	if err := unix.Renameat(int(d.f.Fd()), tmp, int(d.f.Fd()), name); err != nil {
		_ = d.Remove(tmp)
		return pathErr("rename", filepath.Join(d.path, name), err)
	}
	return nil
}

// Remove removes the file (or symlink) name; a missing name is not an
// error.
func (d *Dir) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := unix.Unlinkat(int(d.f.Fd()), name, 0)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return pathErr("remove", filepath.Join(d.path, name), err)
	}
	return nil
}

// Names lists the directory's entries.
func (d *Dir) Names() ([]string, error) { return d.NamesUpTo(-1) }

// NamesUpTo lists at most n of the directory's entries (all when n <= 0):
// a task may fill a directory the plugin scans with entries.
func (d *Dir) NamesUpTo(n int) ([]string, error) {
	// A second descriptor, so that reading does not move d's offset.
	fd, err := unix.Openat(int(d.f.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr("open", d.path, err)
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(n)
	if n > 0 && errors.Is(err, io.EOF) {
		return names, nil // an empty directory
	}
	return names, err
}

// Lstat describes the entry name without following it when it is a
// symlink.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := checkName(name); err != nil {
		return st, err
	}
	if err := unix.Fstatat(int(d.f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, pathErr("lstat", filepath.Join(d.path, name), err)
	}
	return st, nil
}

// OpenFile opens the regular file name with flags (O_NOFOLLOW is always
// added). A symlink is an error wrapping ErrSymlink, anything but a
// regular file an error.
func (d *Dir) OpenFile(name string, flags int) (*os.File, error) {
	return d.openFile(name, flags, 0)
}

func (d *Dir) openFile(name string, flags int, perm uint32) (*os.File, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(int(d.f.Fd()), name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, d.openErr(name, err)
	}
	p := filepath.Join(d.path, name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, pathErr("stat", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	if flags&unix.O_NONBLOCK != 0 {
		// Regular files never block; clear it for ordinary reads.
		_ = unix.SetNonblock(fd, false)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// openErr turns openat's ELOOP (and ENOTDIR with O_DIRECTORY on a
// symlink) into ErrSymlink when name is a symlink.
func (d *Dir) openErr(name string, err error) error {
	p := filepath.Join(d.path, name)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(int(d.f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%s: %w", p, ErrSymlink)
		}
	}
	return pathErr("open", p, err)
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%q: not a single path element", name)
	}
	return nil
}

func pathErr(op, path string, err error) error {
	return &os.PathError{Op: op, Path: path, Err: err}
}

func randUint() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// CheckNotShared returns an error unless the directory is owned by uid
// and writable by no one else: a directory someone else controls could
// be emptied and refilled with symlinks or files of their choosing.
func (d *Dir) CheckNotShared(uid int) error {
	st, err := d.Stat()
	if err != nil {
		return err
	}
	if int(st.Uid) != uid {
		return fmt.Errorf("%s is owned by uid %d, not %d: refusing to use a directory someone else controls", d.path, st.Uid, uid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("%s has mode %#o: refusing a directory that group or others can write", d.path, st.Mode&0o7777)
	}
	return nil
}
