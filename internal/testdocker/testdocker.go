// Package testdocker runs a Docker daemon of the test run's own, for
// tests that run Nomad's docker driver: Debian's dockerd with no network
// at all (--bridge=none --iptables=false: containers get no address, and
// jobs use network_mode = "none"), its own data and exec roots and socket
// under the run's TMPDIR, and Steward's images built into it from
// images/*.Dockerfile with the static binaries `make image-bins` puts in
// bin/image. Nothing is pulled from any registry.
//
// One daemon serves every test of a test binary: Shared starts it on first
// use and Stop (from TestMain) stops it, removing its roots. A missing
// dockerd or bin/image fails the test with the make target that provides
// it; it never skips. The daemon inherits STEWARD_TEST_RUN, so `make
// leakcheck` finds it, and what it started, if a run is killed before
// Stop.
package testdocker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/devagent"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// Images are the images built into the daemon, by name: each from
// images/<name>.Dockerfile, tagged steward/<name>:test.
var Images = []string{"shell", "trainer", "controller"}

// Image is the tag of one of Images in the test daemon.
func Image(name string) string { return "steward/" + name + ":test" }

// Daemon is a running dockerd.
type Daemon struct {
	// Host is its socket, as DOCKER_HOST and Nomad's docker plugin
	// (endpoint) take it: unix:///…/docker.sock.
	Host string
	// Dir holds its data and exec roots, socket, pid file and log.
	Dir string

	cmd    *exec.Cmd
	exited chan struct{}
}

var (
	shared    *Daemon
	sharedErr error
	once      sync.Once
)

// Shared returns the test binary's daemon, starting it and building the
// images on first use; it fails the test when that cannot be done.
func Shared(t testing.TB) *Daemon {
	t.Helper()
	once.Do(func() { shared, sharedErr = start(testnomad.RepoRoot(t)) })
	if sharedErr != nil {
		t.Fatalf("docker daemon for the tests: %v", sharedErr)
	}
	return shared
}

// Stop stops the shared daemon, if one was started, and removes its
// roots. TestMain calls it after the tests.
func Stop() {
	if shared != nil {
		shared.stop()
	}
}

// PluginConfig is the agent configuration that points Nomad's docker
// driver at the daemon: no privileged containers, no host-path volumes
// beyond Nomad's own mounts, the image kept (never pulled: it is local).
// A task given GPUs (NVIDIA_VISIBLE_DEVICES in its device environment)
// runs under the driver's nvidia_runtime, which on a real GPU node is
// NVIDIA's container runtime; the tests' GPUs are simulated (steward-gpu's
// sim backend: an environment and a mounted activity file), so runc,
// the daemon's own, serves.
func (d *Daemon) PluginConfig() string {
	return fmt.Sprintf(`
plugin "docker" {
  config {
    endpoint         = %q
    allow_privileged = false
    nvidia_runtime   = "runc"
    gc {
      image = false
    }
    volumes {
      enabled = false
    }
  }
}
`, d.Host)
}

// Docker runs the docker CLI against the daemon and returns its output.
func (d *Daemon) Docker(args ...string) (string, error) {
	cmd := exec.Command(dockerCLI(), args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+d.Host)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func dockerCLI() string {
	// Debian's docker.io client first: it matches its daemon.
	if _, err := os.Stat("/usr/bin/docker"); err == nil {
		return "/usr/bin/docker"
	}
	return "docker"
}

func start(root string) (*Daemon, error) {
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		return nil, errors.New("dockerd not found: run `make docker` (installs Debian's docker.io)")
	}
	ctx := filepath.Join(root, "bin", "image")
	for _, f := range []string{"busybox", "trainer", "steward", "passwd", "group"} {
		if _, err := os.Stat(filepath.Join(ctx, f)); err != nil {
			return nil, fmt.Errorf("%s missing: run `make image-bins`", filepath.Join(ctx, f))
		}
	}
	dir, err := os.MkdirTemp("", "dockerd-")
	if err != nil {
		return nil, err
	}
	d := &Daemon{Dir: dir, Host: "unix://" + filepath.Join(dir, "docker.sock"), exited: make(chan struct{})}
	log, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		return nil, err
	}
	d.cmd = exec.Command(bin,
		"--bridge=none", "--iptables=false", "--ip-masq=false",
		"--data-root", filepath.Join(dir, "root"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"),
		"-H", d.Host,
		"--log-level", "warn",
	)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	d.cmd.Env = os.Environ()
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("running %s: %w", bin, err)
	}
	go func() { _ = d.cmd.Wait(); log.Close(); close(d.exited) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := d.Docker("version", "--format", "{{.Server.Version}}")
		if err == nil {
			break
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("dockerd exited during start:\n%s", tailFile(filepath.Join(dir, "dockerd.log"), 20))
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("dockerd not ready within 60s (%v: %s):\n%s", err, out, tailFile(filepath.Join(dir, "dockerd.log"), 20))
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, name := range Images {
		// --network none: a build step runs with no network either.
		out, err := d.Docker("build", "--network", "none", "-q", "-t", Image(name),
			"-f", filepath.Join(root, "images", name+".Dockerfile"), ctx)
		if err != nil {
			d.stop()
			return nil, fmt.Errorf("building image %s: %v\n%s", Image(name), err, out)
		}
	}
	return d, nil
}

func (d *Daemon) stop() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	// dockerd stops its containers (10 s each at most) when it is
	// interrupted.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(45 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.exited
	}
	// containerd and its shims name the exec root on their command lines.
	devagent.KillUnder(d.Dir)
	devagent.UnmountUnder(d.Dir)
	_ = os.RemoveAll(d.Dir)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(string(bytes.Join(lines, []byte("\n"))))
}
