package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// cluster is a dev agent with simulated GPUs and the tenants' namespaces.
type cluster struct {
	*testnomad.Agent
	t        testing.TB
	stateDir string
	// controllerToken is the NOMAD_TOKEN controllers get ("" for none).
	controllerToken string
	// controllerEnv is added to the environment of the next controllers
	// started (e.g. STEWARD_CRASH_AT).
	controllerEnv []string
	// prod is the production-shaped cluster this is (startProdCluster),
	// nil for a dev agent.
	prod *testnomad.Cluster
}

func startCluster(t testing.TB, gpus int, namespaces ...string) *cluster {
	return startClusterWith(t, gpus, testnomad.Options{}, namespaces...)
}

func startClusterWith(t testing.TB, gpus int, opts testnomad.Options, namespaces ...string) *cluster {
	t.Helper()
	return startClusterSim(t, simGPUs{count: gpus}, opts, namespaces...)
}

// simGPUs are the simulated GPUs of a test node: how many, and optionally
// their model and memory (the steward-gpu plugin's sim_model and
// sim_memory_mib) and the node's node pool.
type simGPUs struct {
	count    int
	model    string
	memory   int // MiB
	nodePool string
	// migProfile and migCount split each GPU into MIG-shaped devices
	// (sim_mig_profile, sim_mig_count): count is then the whole GPUs.
	migProfile string
	migCount   int
	// statsShape is the plugin's sim_stats_shape: "nomad-device-nvidia"
	// makes the node's GPU stats those of HashiCorp's stock plugin.
	statsShape string
	// noTaskMounts: sim_task_mounts = false, for containers that mount a
	// host volume (Nomad drops it when the device plugin mounts anything).
	noTaskMounts bool
}

// devices is how many GPU devices the node shows: its GPUs, or their MIG
// instances.
func (g simGPUs) devices() int {
	if g.migProfile != "" {
		return g.count * g.migCount
	}
	return g.count
}

// plugin is the steward-gpu plugin block for these GPUs.
func (g simGPUs) plugin(stateDir string) testnomad.Plugin {
	cfg := fmt.Sprintf(`    backend        = "sim"
    sim_count      = %d
    sim_state_dir  = %q
    stats_period   = "1s"`, g.count, stateDir)
	if g.model != "" {
		cfg += fmt.Sprintf("\n    sim_model      = %q", g.model)
	}
	if g.memory != 0 {
		cfg += fmt.Sprintf("\n    sim_memory_mib = %d", g.memory)
	}
	if g.migProfile != "" {
		cfg += fmt.Sprintf("\n    sim_mig_profile = %q\n    sim_mig_count = %d", g.migProfile, g.migCount)
	}
	if g.statsShape != "" {
		cfg += fmt.Sprintf("\n    sim_stats_shape = %q", g.statsShape)
	}
	if g.noTaskMounts {
		cfg += "\n    sim_task_mounts = false"
	}
	return testnomad.Plugin{Name: "steward-gpu", Config: cfg}
}

// options adds the node's plugin and node pool to opts.
func (g simGPUs) options(opts testnomad.Options, stateDir string) testnomad.Options {
	opts.Plugins = append(slices.Clone(opts.Plugins), g.plugin(stateDir))
	if g.nodePool != "" {
		opts.ClientConfig += fmt.Sprintf("\n  node_pool = %q", g.nodePool)
	}
	return opts
}

// startClusterSim starts a dev agent whose client node has the GPUs g.
func startClusterSim(t testing.TB, g simGPUs, opts testnomad.Options, namespaces ...string) *cluster {
	t.Helper()
	gpus := g.devices()
	stateDir := t.TempDir()
	opts = g.options(opts, stateDir)
	if opts.LogLevel == "" {
		opts.LogLevel = "INFO"
	}
	a := testnomad.Start(t, opts)
	c := &cluster{Agent: a, t: t, stateDir: stateDir}
	t.Cleanup(func() {
		if dir := os.Getenv("STEWARD_E2E_LOGDIR"); dir != "" {
			if b, err := os.ReadFile(a.LogPath); err == nil {
				name := strings.NewReplacer("/", "_").Replace(t.Name()) + "-agent.log"
				_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
			}
		}
	})
	// Steward's own namespace for its state, then the tenants'.
	if _, err := a.Client.Namespaces().Register(&api.Namespace{Name: "steward", Description: "Steward's state"}, nil); err != nil {
		t.Fatalf("create namespace steward: %v", err)
	}
	for _, ns := range namespaces {
		if _, err := a.Client.Namespaces().Register(&api.Namespace{Name: ns, Description: "tenant " + ns}, nil); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	c.waitGPUs(a.NodeID, gpus)
	return c
}

// waitGPUs waits until the node fingerprints gpus simulated GPUs.
func (c *cluster) waitGPUs(node string, gpus int) {
	c.t.Helper()
	testnomad.WaitFor(c.t, 60*time.Second, fmt.Sprintf("%d simulated GPUs on node %s", gpus, node), func() (bool, string) {
		n, _, err := c.Client.Nodes().Info(node, nil)
		if err != nil || n.NodeResources == nil {
			return false, fmt.Sprint(err)
		}
		for _, d := range n.NodeResources.Devices {
			if d.Type == "gpu" && len(d.Instances) == gpus {
				return true, ""
			}
		}
		return false, "no GPUs yet"
	})
}

// waitDriver waits until the node's task driver is detected and healthy.
func (c *cluster) waitDriver(node, driver string) {
	c.t.Helper()
	testnomad.WaitFor(c.t, 60*time.Second, driver+" healthy on node "+node, func() (bool, string) {
		n, _, err := c.Client.Nodes().Info(node, nil)
		if err != nil {
			return false, err.Error()
		}
		d := n.Drivers[driver]
		return d != nil && d.Detected && d.Healthy, fmt.Sprintf("%s: %+v", driver, d)
	})
}

// work registers jobs/gpu-work.nomad.hcl with the given variables.
func (c *cluster) work(name, ns, tier string, gpus, count int, extra ...string) {
	c.t.Helper()
	vars := map[string]string{"name": name, "namespace": ns, "tier": tier, "gpus": fmt.Sprint(gpus), "count": fmt.Sprint(count)}
	for i := 0; i+1 < len(extra); i += 2 {
		vars[extra[i]] = extra[i+1]
	}
	c.RegisterJobFile(c.t, filepath.Join(testnomad.RepoRoot(c.t), "jobs", "gpu-work.nomad.hcl"), vars)
}

// running counts the job's running allocations.
func (c *cluster) running(ns, job string) int {
	allocs, _, err := c.Client.Jobs().Allocations(job, false, &api.QueryOptions{Namespace: ns})
	if err != nil {
		return -1
	}
	n := 0
	for _, a := range allocs {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			n++
		}
	}
	return n
}

// waitRunning waits until each job (ns/job=count) runs exactly that many
// allocations, and the state holds still for a moment.
func (c *cluster) waitRunning(timeout time.Duration, want map[string]int) {
	c.t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	testnomad.WaitFor(c.t, timeout, fmt.Sprintf("running allocations %v", want), func() (bool, string) {
		var got []string
		ok := true
		for _, k := range keys {
			ns, job, _ := strings.Cut(k, "/")
			n := c.running(ns, job)
			got = append(got, fmt.Sprintf("%s=%d", k, n))
			if n != want[k] {
				ok = false
			}
		}
		return ok, strings.Join(got, " ")
	})
}

// record reads Steward's record of a job (nomad/jobs/<job>).
func (c *cluster) record(ns, job string) map[string]string {
	v, _, err := c.Client.Variables().Read("nomad/jobs/"+job, &api.QueryOptions{Namespace: ns})
	if err != nil {
		return nil
	}
	return v.Items
}

func (c *cluster) waitRecord(timeout time.Duration, ns, job, key, contains string) map[string]string {
	c.t.Helper()
	var rec map[string]string
	testnomad.WaitFor(c.t, timeout, fmt.Sprintf("record of %s/%s with %s containing %q", ns, job, key, contains), func() (bool, string) {
		rec = c.record(ns, job)
		return strings.Contains(rec[key], contains), fmt.Sprint(rec)
	})
	return rec
}

// controllerProc is `steward controller` as an operator runs it.
type controllerProc struct {
	t    testing.TB
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	name string
}

func (p *controllerProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *controllerProc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *controllerProc) Contains(s string) bool { return strings.Contains(p.Log(), s) }

// startController runs the controller against the cluster with settings
// fit for tests (fast resync and stats, no lock delay).
func (c *cluster) startController(name, policyPath string, extra ...string) *controllerProc {
	c.t.Helper()
	return c.startControllerAt(name, policyPath, c.Address, extra...)
}

// startControllerAt runs the controller against a given Nomad address.
func (c *cluster) startControllerAt(name, policyPath, address string, extra ...string) *controllerProc {
	c.t.Helper()
	args := []string{"controller", "-policy", policyPath, "-id", name, "-listen", "",
		"-resync", "2s", "-stats-interval", "1s", "-lock-ttl", "10s", "-lock-delay", "0s", "-log-level", "debug"}
	return c.startControllerArgs(name, address, append(args, extra...)...)
}

// startControllerArgs runs `steward` with args (the first "controller")
// against a Nomad address, as startControllerAt does.
func (c *cluster) startControllerArgs(name, address string, args ...string) *controllerProc {
	c.t.Helper()
	p := &controllerProc{t: c.t, done: make(chan struct{}), name: name}
	p.cmd = exec.Command(testnomad.StewardBin(c.t), args...)
	p.cmd.Env = append(append(append(os.Environ(), "NOMAD_ADDR="+address), c.TLS.Env()...), c.controllerEnv...)
	if c.controllerToken != "" {
		p.cmd.Env = append(p.cmd.Env, "NOMAD_TOKEN="+c.controllerToken)
	}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		c.t.Fatalf("start controller: %v", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	c.t.Cleanup(func() {
		p.Stop()
		if dir := os.Getenv("STEWARD_E2E_LOGDIR"); dir != "" {
			name := strings.NewReplacer("/", "_").Replace(c.t.Name()) + "-" + name + ".log"
			_ = os.WriteFile(filepath.Join(dir, name), []byte(p.Log()), 0o644)
		}
		if c.t.Failed() {
			c.t.Logf("controller %s log:\n%s", name, tail(p.Log(), 120))
		}
	})
	return p
}

// Stop ends the controller gracefully (SIGTERM).
func (p *controllerProc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill ends the controller abruptly, as a crash would.
func (p *controllerProc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *controllerProc) Signal(s os.Signal) { _ = p.cmd.Process.Signal(s) }

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func writePolicy(t testing.TB, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// allocIDs lists the job's running allocations.
func (c *cluster) allocIDs(ns, job string) []string {
	allocs, _, err := c.Client.Jobs().Allocations(job, false, &api.QueryOptions{Namespace: ns})
	if err != nil {
		c.t.Fatalf("allocations of %s/%s: %v", ns, job, err)
	}
	var ids []string
	for _, a := range allocs {
		if a.ClientStatus == "running" {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// waitTaskEvent waits for a task event of a type whose text mentions want.
func (c *cluster) waitTaskEvent(timeout time.Duration, ns, allocID, typ, want string) {
	c.t.Helper()
	testnomad.WaitFor(c.t, timeout, fmt.Sprintf("task event %s mentioning %q on %s", typ, want, allocID), func() (bool, string) {
		a, _, err := c.Client.Allocations().Info(allocID, &api.QueryOptions{Namespace: ns})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ts := range a.TaskStates {
			for _, e := range ts.Events {
				seen = append(seen, e.Type+": "+e.DisplayMessage)
				if e.Type == typ && strings.Contains(e.DisplayMessage+e.Details["signal"], want) {
					return true, ""
				}
			}
		}
		return false, strings.Join(seen, "; ")
	})
}

func readAll(r io.ReadCloser) string {
	defer r.Close()
	b, _ := io.ReadAll(r)
	return string(b)
}

// twoTiers are the tiers most controller tests use: interactive work
// preempts training.
const twoTiers = `
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
}

# These tests' namespaces have no tenant blocks: they may use every tier.
defaults {
  unnamed_tiers = ["interactive", "training"]
}
`

// Exited reports whether the controller process has ended.
func (p *controllerProc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startLeaderAndFollower starts controller a and waits until it leads,
// then b and waits until it waits for the lock.
func (c *cluster) startLeaderAndFollower(policy string, extra ...string) (a, b *controllerProc) {
	c.t.Helper()
	a = c.startController("a", policy, extra...)
	testnomad.WaitFor(c.t, 30*time.Second, "controller a leads", func() (bool, string) { return a.Contains("leading: this controller acts"), "" })
	b = c.startController("b", policy, extra...)
	testnomad.WaitFor(c.t, 30*time.Second, "controller b waits", func() (bool, string) { return b.Contains("waiting to lead"), "" })
	return a, b
}
