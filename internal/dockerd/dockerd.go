// Package dockerd runs a Docker daemon of its own for the tests
// (internal/testdocker) and `DEMO=docker make demo`: Debian's dockerd with
// no network at all (--bridge=none --iptables=false: containers get no
// address, and jobs use network_mode = "none"), its own data and exec
// roots, socket, pid file and log in one directory, and Steward's images
// built into it from images/*.Dockerfile with the static binaries `make
// image-bins` puts in bin/image. Nothing is pulled from any registry.
// The daemon inherits the caller's environment (STEWARD_TEST_RUN under
// make test, so `make leakcheck` finds it if a run is killed first).
package dockerd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-steward/steward/internal/devagent"
	"github.com/gpu-steward/steward/internal/procs"
)

// Images are the images built into the daemon, by name: each from
// images/<name>.Dockerfile.
var Images = []string{"shell", "trainer", "controller"}

// Image is the reference of one of Images with a tag.
func Image(name, tag string) string { return "steward/" + name + ":" + tag }

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

// Start starts dockerd with its roots in a new directory under dir ("":
// the TMPDIR), and builds Images into it from <root>/images/*.Dockerfile
// and the static binaries in <root>/bin/image, tagged steward/<name>:tag.
func Start(dir, root, tag string) (*Daemon, error) {
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
	dir, err = os.MkdirTemp(dir, "dockerd-")
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
			d.Stop()
			return nil, fmt.Errorf("dockerd not ready within 60s (%v: %s):\n%s", err, out, tailFile(filepath.Join(dir, "dockerd.log"), 20))
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, name := range Images {
		// --network none: a build step runs with no network either.
		out, err := d.Docker("build", "--network", "none", "-q", "-t", Image(name, tag),
			"-f", filepath.Join(root, "images", name+".Dockerfile"), ctx)
		if err != nil {
			d.Stop()
			return nil, fmt.Errorf("building image %s: %v\n%s", Image(name, tag), err, out)
		}
	}
	return d, nil
}

// Stop stops the daemon (its containers with it) and removes its roots.
func (d *Daemon) Stop() {
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

// StopStale stops what a daemon Start started in dir left running when its
// owner died without Stop (a demo killed with SIGKILL), and removes dir:
// the daemon first with SIGTERM, so that it stops its containers, then
// whatever names dir (dockerd, containerd, the shims), then any container
// process left (by its cgroup, named after the container's ID). It
// reports whether anything was running.
func StopStale(dir string) bool {
	found := false
	var ids []string
	if entries, err := os.ReadDir(filepath.Join(dir, "root", "containers")); err == nil {
		for _, e := range entries {
			if len(e.Name()) == 64 {
				ids = append(ids, e.Name())
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "dockerd.pid")); err == nil {
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 1 {
			if strings.Contains(procs.CommandLine(pid), dir) && syscall.Kill(pid, syscall.SIGTERM) == nil {
				found = true
				for end := time.Now().Add(45 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
					if st, err := procs.ReadStat(pid); err != nil || st.State == 'Z' {
						break
					}
				}
			}
		}
	}
	if len(devagent.KillUnder(dir)) > 0 {
		found = true
	}
	if len(ids) > 0 {
		pids, _ := procs.InCgroup(ids)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			found = true
		}
	}
	devagent.UnmountUnder(dir)
	_ = os.RemoveAll(dir)
	return found
}
