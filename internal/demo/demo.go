// Package demo is `steward demo` (`make demo`): a Nomad dev agent with
// simulated GPUs and Steward's plugins, the controller with
// jobs/demo-policy.hcl, the tenants' namespaces, and a scripted scenario
// whose timeline it prints from what it sees in Nomad.
//
// Everything it starts lives under one directory (.demo/ by default): the
// agent's config, data dir and log, the controller's log, the simulated
// GPUs' state, the trainer's checkpoints and the pid files by which a later
// run finds and stops what a killed run left behind.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/internal/devagent"
	"github.com/gpu-steward/steward/internal/dockerd"
	"github.com/gpu-steward/steward/internal/procs"
)

// Config says where the demo finds what it runs and what it does.
type Config struct {
	// Root is the repository root: jobs/ and jobs/demo-policy.hcl are
	// read from it unless JobsDir or Policy say otherwise.
	Root string
	// Dir holds everything the demo writes (default <Root>/.demo).
	Dir string
	// NomadBin, PluginDir, StewardBin and TrainerBin default to
	// <Root>/bin/{nomad,plugins,steward,trainer}.
	NomadBin, PluginDir, StewardBin, TrainerBin string
	// Policy is the controller's policy (default
	// <Root>/jobs/demo-policy.hcl).
	Policy string
	// JobsDir holds the jobspecs (default <Root>/jobs).
	JobsDir string
	// Port is the agent's HTTP port (default 4646; RPC and Serf take the
	// next two). If one is taken the demo says so and uses free ones.
	Port int
	// GPUs is the number of simulated GPUs on the node (default 8).
	GPUs int
	// Exit ends the demo after the scenario (DEMO_EXIT=1); otherwise it
	// stays up until ctx is cancelled (Ctrl-C).
	Exit bool
	// Scenario is "" for the story on one node, "fleet" (DEMO=fleet):
	// two GPU models in two node pools (fleet.go), or "docker"
	// (DEMO=docker): the story on one node with the trainer and the
	// notebooks in containers, in a Docker daemon of the demo's own
	// (docker.go).
	Scenario string
	// Out receives the timeline (default os.Stdout).
	Out io.Writer
}

func (c *Config) defaults() error {
	if c.Root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		c.Root = wd
	}
	abs := func(p *string, def string) error {
		if *p == "" {
			*p = def
		}
		a, err := filepath.Abs(*p)
		*p = a
		return err
	}
	for _, f := range []struct {
		p   *string
		def string
	}{
		{&c.Root, c.Root},
		{&c.Dir, filepath.Join(c.Root, ".demo")},
		{&c.NomadBin, filepath.Join(c.Root, "bin", "nomad")},
		{&c.PluginDir, filepath.Join(c.Root, "bin", "plugins")},
		{&c.StewardBin, filepath.Join(c.Root, "bin", "steward")},
		{&c.TrainerBin, filepath.Join(c.Root, "bin", "trainer")},
		{&c.Policy, filepath.Join(c.Root, "jobs", c.policyFile())},
		{&c.JobsDir, filepath.Join(c.Root, "jobs")},
	} {
		if err := abs(f.p, f.def); err != nil {
			return err
		}
	}
	if c.Port == 0 {
		c.Port = 4646
	}
	switch c.Scenario {
	case "", ScenarioFleet, ScenarioDocker:
	default:
		return fmt.Errorf("unknown demo scenario %q: use %q, %q, or none for the story on one node", c.Scenario, ScenarioFleet, ScenarioDocker)
	}
	if c.GPUs == 0 {
		c.GPUs = 8
		if c.Scenario == ScenarioFleet {
			c.GPUs = fleetGPUs
		}
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	files := []struct{ path, what, target string }{
		{c.NomadBin, "the Nomad agent", "make nomad"},
		{filepath.Join(c.PluginDir, "steward-gpu"), "the steward-gpu plugin", "make plugins"},
		{filepath.Join(c.PluginDir, "steward-exec"), "the steward-exec plugin", "make plugins"},
		{c.StewardBin, "the steward binary", "make build"},
		{c.TrainerBin, "the example trainer", "make trainer"},
		{c.Policy, "the demo policy", ""},
		{filepath.Join(c.JobsDir, "gpu-work.nomad.hcl"), "jobs/gpu-work.nomad.hcl", ""},
		{filepath.Join(c.JobsDir, "trainer.nomad.hcl"), "jobs/trainer.nomad.hcl", ""},
	}
	if c.Scenario == ScenarioDocker {
		for _, f := range c.dockerFiles() {
			files = append(files, struct{ path, what, target string }{f, "jobs/" + filepath.Base(f), ""})
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f.path); err != nil {
			if f.target != "" {
				return fmt.Errorf("%s not found at %s: run `%s` (or just `make demo`)", f.what, f.path, f.target)
			}
			return fmt.Errorf("%s not found at %s", f.what, f.path)
		}
	}
	return nil
}

// Namespaces are the tenants of jobs/demo-policy.hcl (and example.hcl).
var Namespaces = []string{"product", "research", "platform"}

// Run plays the demo. It returns when the scenario is over (Exit) or ctx is
// cancelled, after stopping everything it started. An error means the demo
// could not start, or (with Exit) the scenario did not go as scripted.
func Run(ctx context.Context, cfg Config) (err error) {
	if err := cfg.defaults(); err != nil {
		return err
	}
	d := &demo{cfg: cfg, out: cfg.Out, started: time.Now()}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	d.stopStale()
	defer d.cleanup()

	if cfg.Scenario == ScenarioDocker {
		if err := d.startDocker(); err != nil {
			return err
		}
	}
	if err := d.startAgent(ctx); err != nil {
		return err
	}
	if cfg.Scenario == ScenarioFleet {
		if err := d.startCloud(ctx); err != nil {
			return err
		}
	}
	if err := d.setup(ctx); err != nil {
		return err
	}
	if err := d.startController(); err != nil {
		return err
	}

	w := newWatcher(d)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); w.run(watchCtx) }()
	d.w = w

	scenarioErr := d.play(ctx)
	if ctx.Err() != nil {
		stopWatch()
		<-watchDone
		d.printf("\ninterrupted: stopping the controller and the agent\n")
		return nil
	}
	time.Sleep(1500 * time.Millisecond) // the watcher's last round
	stopWatch()
	<-watchDone
	d.summary(w)
	if scenarioErr != nil {
		d.printf("\nscenario: %v\n", scenarioErr)
	}
	if cfg.Exit {
		d.printf("\nDEMO_EXIT set: stopping after %v\n", time.Since(d.started).Round(time.Second))
		return scenarioErr
	}
	d.printf("\nThe cluster stays up: browse %s/ui/jobs?namespace=*  (Ctrl-C stops everything)\n", d.addr)
	// Keep printing what happens (the user may submit jobs of their own).
	go w.run(ctx)
	<-ctx.Done()
	d.printf("\nstopping the controller and the agent\n")
	return nil
}

type demo struct {
	cfg     Config
	out     io.Writer
	started time.Time

	addr   string // http://127.0.0.1:PORT
	ports  [3]int
	client *api.Client
	nodeID string

	agent, controller *exec.Cmd
	agentDone         chan struct{}
	// cloud is the fleet scenario's second client agent (fleet.go).
	cloud     *exec.Cmd
	cloudDone chan struct{}
	// dockerd is the docker scenario's Docker daemon (docker.go).
	dockerd *dockerd.Daemon
	ctlDone chan struct{}
	w       *watcher
	grace   string // the policy's grace, for the timeline
}

func (d *demo) printf(format string, args ...any) { fmt.Fprintf(d.out, format, args...) }

func (d *demo) path(name string) string { return filepath.Join(d.cfg.Dir, name) }

// Runtime bits under the demo dir, removed at the start and at the end.
var runtimeBits = []string{"data", "data-cloud", "alloc_mounts", "sim", "sim-cloud", "checkpoints", "agent.pid",
	"cloud.pid", "controller.pid"}

// stopStale stops what an earlier run left behind (killed without its
// clean-up): the processes named by its pid files, if they are still the
// demo's, and the tasks still running from its data dir.
func (d *demo) stopStale() {
	for _, name := range []string{"controller.pid", "cloud.pid", "agent.pid"} {
		b, err := os.ReadFile(d.path(name))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			continue
		}
		if !strings.Contains(procs.CommandLine(pid), d.cfg.Dir) {
			continue // gone, or the pid now belongs to someone else
		}
		d.printf("==> stopping %s (pid %d) left by an earlier demo run\n", strings.TrimSuffix(name, ".pid"), pid)
		_ = syscall.Kill(-pid, syscall.SIGKILL) // its process group: the agent's plugins too
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitGone(pid, 10*time.Second)
	}
	d.killTasks()
	d.stopStaleDocker()
	d.removeRuntime()
}

// killTasks kills processes still running from the demo's data dir (the
// demo's own tasks, which a killed agent does not stop).
func (d *demo) killTasks() {
	ps, _ := procs.List()
	self := os.Getpid()
	for _, p := range ps {
		if p.Pid == self {
			continue
		}
		for _, dir := range []string{"data", "data-cloud"} {
			data := d.path(dir) + string(filepath.Separator)
			if strings.HasPrefix(p.Cwd+"/", data) || strings.Contains(strings.Join(p.Cmdline, "\x00"), data) {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
				break
			}
		}
	}
}

func (d *demo) removeRuntime() {
	devagent.UnmountUnder(d.path("data"))
	devagent.UnmountUnder(d.path("data-cloud"))
	for _, name := range runtimeBits {
		_ = os.RemoveAll(d.path(name))
	}
}

func waitGone(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if st, err := procs.ReadStat(pid); err == nil && st.State == 'Z' {
			return // a zombie of ours
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// choosePorts takes Port, Port+1, Port+2 when all are free, else three
// free ports, and says so.
func (d *demo) choosePorts() error {
	want := [3]int{d.cfg.Port, d.cfg.Port + 1, d.cfg.Port + 2}
	free := true
	for _, p := range want {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			free = false
			break
		}
		l.Close()
	}
	if free {
		d.ports = want
		return nil
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range d.ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		d.ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	d.printf("==> port %d (or %d/%d) is taken on 127.0.0.1: using %d for the Nomad API and UI instead (RPC %d, Serf %d)\n",
		want[0], want[1], want[2], d.ports[0], d.ports[1], d.ports[2])
	return nil
}

// agentConfig is the demo agent's configuration file.
func (d *demo) agentConfig() string {
	return fmt.Sprintf(`# Written by steward demo; removed with its data dir.
disable_update_check = true
log_level            = "INFO"

ports {
  http = %d
  rpc  = %d
  serf = %d
}

client {
  options = {
    # Without it the agent probes cloud metadata addresses and fails to
    # start on machines without network access.
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }%s
}

plugin "steward-gpu" {
  config {
    backend       = "sim"
    sim_count     = %d
    sim_state_dir = %q
    stats_period  = "1s"%s
  }
}

plugin "steward-exec" {
  config {
    checkpoint_root   = %q
    gpu_backend       = "sim"
    gpu_sample_period = "1s"
    idle_after        = "15s"
    busy_after        = "3s"
  }
}
%s`, d.ports[0], d.ports[1], d.ports[2], d.nodeExtra(), d.cfg.GPUs, d.path("sim"), d.simExtra(), d.path("checkpoints"), d.pluginExtra())
}

func (d *demo) startAgent(ctx context.Context) error {
	if err := d.choosePorts(); err != nil {
		return err
	}
	d.addr = fmt.Sprintf("http://127.0.0.1:%d", d.ports[0])
	for _, dir := range []string{"data", "sim", "checkpoints"} {
		if err := os.MkdirAll(d.path(dir), 0o755); err != nil {
			return err
		}
	}
	if err := checkReachableByTasks(d.path("data"), d.path("checkpoints"), d.cfg.TrainerBin); err != nil {
		return err
	}
	if err := os.WriteFile(d.path("agent.hcl"), []byte(d.agentConfig()), 0o644); err != nil {
		return err
	}
	logFile, err := os.Create(d.path("agent.log"))
	if err != nil {
		return err
	}
	d.printf("==> starting a Nomad dev agent on %s with %d simulated GPUs (log: %s)\n", d.addr, d.cfg.GPUs, rel(d.cfg.Root, logFile.Name()))
	cmd := exec.Command(d.cfg.NomadBin, "agent", "-dev", "-bind", "127.0.0.1",
		"-data-dir", d.path("data"), "-config", d.path("agent.hcl"), "-plugin-dir", d.cfg.PluginDir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = devagent.Env()
	// Its own process group: Ctrl-C reaches the demo, which stops it in
	// order; its plugins are stopped with the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", d.cfg.NomadBin, err)
	}
	d.agent, d.agentDone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(d.agentDone) }()
	_ = os.WriteFile(d.path("agent.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)

	cfg := api.DefaultConfig()
	cfg.Address, cfg.SecretID, cfg.Region, cfg.Namespace = d.addr, "", "", ""
	cfg.TLSConfig = &api.TLSConfig{}
	if d.client, err = api.NewClient(cfg); err != nil {
		return err
	}
	return d.waitAgent(ctx)
}

// waitAgent waits for a leader, a ready node with the simulated GPUs and a
// healthy steward-exec driver.
func (d *demo) waitAgent(ctx context.Context) error {
	deadline := time.Now().Add(120 * time.Second)
	status := "starting"
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.agentDone:
			return fmt.Errorf("the Nomad agent exited during start; last lines of %s:\n%s", d.path("agent.log"), fileTail(d.path("agent.log"), 30))
		case <-time.After(300 * time.Millisecond):
		}
		if leader, err := d.client.Status().Leader(); err != nil || leader == "" {
			status = fmt.Sprintf("no leader (%v)", err)
			continue
		}
		nodes, _, err := d.client.Nodes().List(nil)
		if err != nil || len(nodes) == 0 || nodes[0].Status != api.NodeStatusReady {
			status = "no ready client node"
			continue
		}
		node, _, err := d.client.Nodes().Info(nodes[0].ID, nil)
		if err != nil {
			continue
		}
		if drv := node.Drivers["steward-exec"]; drv == nil || !drv.Healthy {
			status = "steward-exec driver not healthy yet"
			continue
		}
		if drv := node.Drivers["docker"]; d.cfg.Scenario == ScenarioDocker && (drv == nil || !drv.Healthy) {
			status = "docker driver not healthy yet"
			continue
		}
		gpus := 0
		if node.NodeResources != nil {
			for _, dev := range node.NodeResources.Devices {
				if dev.Type == "gpu" {
					gpus += len(dev.Instances)
				}
			}
		}
		if gpus != d.cfg.GPUs {
			status = fmt.Sprintf("%d of %d GPUs fingerprinted", gpus, d.cfg.GPUs)
			continue
		}
		d.nodeID = node.ID
		d.printf("==> Nomad is up: node %s with %d simulated GPUs; the UI is at %s/ui/\n", node.Name, gpus, d.addr)
		return nil
	}
	return fmt.Errorf("the Nomad agent was not ready within 2m (%s); see %s", status, d.path("agent.log"))
}

// setup creates the tenants' namespaces, and Steward's own for its state.
func (d *demo) setup(ctx context.Context) error {
	if _, err := d.client.Namespaces().Register(&api.Namespace{Name: controller.DefaultStateNamespace,
		Description: "Steward's own state (no tenant may write here)"}, nil); err != nil {
		return fmt.Errorf("creating namespace %s: %w", controller.DefaultStateNamespace, err)
	}
	for _, ns := range Namespaces {
		if _, err := d.client.Namespaces().Register(&api.Namespace{Name: ns, Description: "Steward tenant " + ns + " (demo)"}, nil); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	d.printf("==> namespaces (tenants): %s\n", strings.Join(Namespaces, ", "))
	return ctx.Err()
}

func (d *demo) startController() error {
	logFile, err := os.Create(d.path("controller.log"))
	if err != nil {
		return err
	}
	args := []string{"controller", "-policy", d.cfg.Policy, "-address", d.addr, "-id", "demo:" + d.cfg.Dir,
		"-listen", "", "-resync", "2s", "-stats-interval", "1s", "-lock-ttl", "10s", "-lock-delay", "0s"}
	cmd := exec.Command(d.cfg.StewardBin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(devagent.Env(), "NOMAD_ADDR="+d.addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting the controller: %w", err)
	}
	d.controller, d.ctlDone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(d.ctlDone) }()
	// Its -id names the demo dir: stopStale checks for it in the command
	// line before killing a pid from a stale pid file.
	_ = os.WriteFile(d.path("controller.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	d.printf("==> steward controller -policy %s (log: %s)\n", rel(d.cfg.Root, d.cfg.Policy), rel(d.cfg.Root, d.path("controller.log")))
	// Wait until it leads (its status variable appears) or fails.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.ctlDone:
			return fmt.Errorf("the controller exited; last lines of %s:\n%s", d.path("controller.log"), fileTail(d.path("controller.log"), 20))
		case <-time.After(300 * time.Millisecond):
		}
		if strings.Contains(fileTail(d.path("controller.log"), 200), "leading: this controller acts") {
			return nil
		}
	}
	return nil
}

// cleanup stops the controller, the demo's jobs and the agent, and removes
// the runtime bits of the demo dir (its logs stay).
func (d *demo) cleanup() {
	if d.controller != nil {
		_ = d.controller.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.ctlDone:
		case <-time.After(10 * time.Second):
			_ = d.controller.Process.Kill()
			<-d.ctlDone
		}
	}
	if d.agent != nil {
		select {
		case <-d.agentDone:
		default:
			d.stopJobs()
			d.stopCloud()
			_ = d.agent.Process.Signal(os.Interrupt)
			select {
			case <-d.agentDone:
			case <-time.After(20 * time.Second):
			}
		}
		_ = syscall.Kill(-d.agent.Process.Pid, syscall.SIGKILL)
		select {
		case <-d.agentDone:
		case <-time.After(10 * time.Second):
		}
	}
	d.killTasks()
	d.stopDocker()
	d.removeRuntime()
	if d.agent != nil {
		d.printf("==> stopped the controller and the agent; their logs are in %s\n", rel(d.cfg.Root, d.cfg.Dir))
	}
}

// stopJobs deregisters every job in the demo's namespaces and waits (a
// little) for their tasks to stop, so that none outlives the agent.
func (d *demo) stopJobs() {
	q := &api.QueryOptions{Namespace: "*"}
	jobs, _, err := d.client.Jobs().List(q)
	if err != nil {
		return
	}
	for _, j := range jobs {
		_, _, _ = d.client.Jobs().Deregister(j.ID, true, &api.WriteOptions{Namespace: j.Namespace})
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		allocs, _, err := d.client.Allocations().List(q)
		if err != nil {
			return
		}
		live := 0
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
				live++
			}
		}
		if live == 0 {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}
