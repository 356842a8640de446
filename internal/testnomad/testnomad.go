// Package testnomad starts a real Nomad agent (the pinned build in
// bin/nomad, `nomad agent -dev`) for tests, with Steward's plugins loaded
// from bin/plugins.
//
// A missing agent binary or plugin dir fails the test with the make target
// that builds it; it never skips. Each agent gets its own loopback ports
// and data dir, so tests may run in parallel. The agent's log is written to
// a file in the test's temp dir and its tail printed when the test fails.
// t.Cleanup stops the agent and everything it started, failed test or not:
// its jobs' tasks and their Nomad executors included (see Agent.Stop).
//
//	a := testnomad.Start(t, testnomad.Options{
//		Plugins: []testnomad.Plugin{{Name: "steward-gpu", Config: `backend = "sim"`}},
//	})
//	jobs, _, err := a.Client.Jobs().List(nil)
package testnomad

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/devagent"
	"github.com/gpu-steward/steward/internal/procs"
)

// Environment variables that point the harness at the binaries (the
// GNUmakefile exports them).
const (
	EnvNomadBin   = "STEWARD_NOMAD_BIN"
	EnvPluginDir  = "STEWARD_PLUGIN_DIR"
	EnvStewardBin = "STEWARD_BIN"
)

// Plugin is one plugin "<Name>" { config { <Config> } } block.
type Plugin struct {
	// Name is the plugin's executable file name in the plugin dir, e.g.
	// "steward-gpu".
	Name string
	// Config is the HCL body of the plugin's config block; may be empty.
	Config string
}

// Options configure the agent. The zero value starts a dev agent with no
// external plugins.
type Options struct {
	// Plugins are the external plugins to load. Each must exist in the
	// plugin dir (Nomad 1.11 loads only plugins that have a block).
	Plugins []Plugin
	// ClientOptions are added to the client's options map (next to the
	// mandatory fingerprint.denylist).
	ClientOptions map[string]string
	// ClientConfig is extra HCL inside the client block.
	ClientConfig string
	// ExtraConfig is extra top-level HCL for the agent config file.
	ExtraConfig string
	// LogLevel of the agent; default "DEBUG" (plugin logs included).
	LogLevel string
	// StartTimeout bounds the wait for a leader and a ready node;
	// default 90s.
	StartTimeout time.Duration
	// Env is added to the agent's environment (NOMAD_* variables of the
	// test's own environment are not passed on).
	Env []string
	// ACLBootstrapToken, when set, enables ACLs and bootstraps them with
	// this secret as the management token, which Agent.Client then uses.
	ACLBootstrapToken string
	// TLS, when set, turns on mTLS for HTTP and RPC with these files
	// (verify_server_hostname, verify_https_client): Agent.Client then
	// talks HTTPS with the CLI certificate.
	TLS *TLS
	// NoRawExec leaves raw_exec off on a client that joins a server
	// (StartClient turns it on otherwise): a node that runs no host
	// binaries, say a docker-only one.
	NoRawExec bool
	// join, set by StartClient, is the agent whose servers a client-only
	// agent joins; nodeName is its node's name. server, set by
	// StartServer, makes a server-only agent (no -dev, no client).
	join     *Agent
	nodeName string
	server   bool
}

// Ports are the agent's loopback ports.
type Ports struct {
	HTTP, RPC, Serf int
}

// Agent is a running dev agent. It is stopped by t.Cleanup.
type Agent struct {
	// Client talks to the agent's HTTP API.
	Client *api.Client
	// Address is the HTTP API address, e.g. "http://127.0.0.1:31337".
	Address string
	// NodeID is the ID of the agent's (only) client node.
	NodeID string
	Ports  Ports

	DataDir    string
	ConfigPath string
	LogPath    string
	PluginDir  string
	NomadBin   string

	// Killed are the processes Stop found still running under the data
	// dir after the agent stopped, and killed.
	Killed []procs.Proc

	// TLS is the cluster's certificates (nil: plain HTTP).
	TLS *TLS

	aclToken string
	aclDone  bool
	// args and env start the agent again after Kill (Restart).
	args     []string
	env      []string
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error
	stopOnce sync.Once
	// logf is the test's Logf, for what Stop finds.
	logf func(format string, args ...any)
}

// Start starts a dev agent and waits for a leader and a ready node. It
// fails the test (never skips) when the agent binary or the plugin dir is
// missing.
func Start(t testing.TB, opts Options) *Agent {
	t.Helper()
	bin := NomadBin(t)
	pluginDir := PluginDir(t)
	for _, p := range opts.Plugins {
		path := filepath.Join(pluginDir, p.Name)
		info, err := os.Stat(path)
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			t.Fatalf("plugin %q not found (or not executable) at %s: run `make plugins`", p.Name, path)
		}
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "DEBUG"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 90 * time.Second
	}

	dir := t.TempDir()
	// The test's temp dirs share a parent that t.TempDir makes 0700; tasks
	// that do not run as the test's user (steward-exec's default user is
	// nobody) must pass through it to their task, checkpoint and sim
	// dirs. 0711: they can pass, not list.
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatalf("opening the test's temp dir to task users: %v", err)
	}
	// A client that joins a server keeps its data right under /tmp: a
	// task's API socket (<data dir>/alloc/<id>/<task>/secrets/api.sock)
	// must fit the 108 bytes of a unix socket's path, which a test's temp
	// dir under make test's TMPDIR does not leave room for (the shipped
	// controller job, which reaches Nomad through its socket, got
	// "connect: invalid argument").
	if opts.join != nil {
		short, err := os.MkdirTemp("/tmp", "sw-")
		if err != nil {
			t.Fatal(err)
		}
		// Removed after the agent stopped (clean-ups run last first).
		t.Cleanup(func() { _ = os.RemoveAll(short) })
		if err := os.Chmod(short, 0o711); err != nil {
			t.Fatal(err)
		}
		dir = short
	}
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		a, err := launch(t, bin, pluginDir, dir, attempt, opts)
		if err == nil {
			return a
		}
		lastErr = err
		if !errors.Is(err, errPortInUse) {
			break
		}
		t.Logf("nomad agent: ports taken, retrying (%v)", err)
	}
	t.Fatalf("starting nomad agent: %v", lastErr)
	return nil
}

// StartClient starts a second client node, named name, that joins the
// dev agent server's cluster: a client-only agent on loopback with its own
// data dir, ports and plugins (opts.Plugins). Its Client talks to its own
// HTTP API, which forwards to the server. It is stopped by t.Cleanup,
// before the server.
func StartClient(t testing.TB, server *Agent, name string, opts Options) *Agent {
	t.Helper()
	opts.join, opts.nodeName = server, name
	opts.ACLBootstrapToken = ""
	// Outside -dev, Nomad will not advertise loopback on its own, and
	// raw_exec is off.
	opts.ExtraConfig += advertiseLoopback
	if !opts.NoRawExec {
		opts.ExtraConfig += "\nplugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n"
	}
	return Start(t, opts)
}

// advertiseLoopback: outside -dev, Nomad will not advertise loopback on
// its own.
const advertiseLoopback = "\nadvertise {\n  http = \"127.0.0.1\"\n  rpc  = \"127.0.0.1\"\n  serf = \"127.0.0.1\"\n}\n"

var errPortInUse = errors.New("address already in use")

// launch makes one attempt to start the agent with fresh ports.
func launch(t testing.TB, bin, pluginDir, dir string, attempt int, opts Options) (*Agent, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, fmt.Errorf("finding free ports: %w", err)
	}
	scheme := "http"
	if opts.TLS != nil {
		scheme = "https"
	}
	a := &Agent{
		Address:    fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0]),
		TLS:        opts.TLS,
		aclToken:   opts.ACLBootstrapToken,
		Ports:      Ports{HTTP: ports[0], RPC: ports[1], Serf: ports[2]},
		DataDir:    filepath.Join(dir, fmt.Sprintf("data-%d", attempt)),
		ConfigPath: filepath.Join(dir, fmt.Sprintf("agent-%d.hcl", attempt)),
		LogPath:    filepath.Join(dir, fmt.Sprintf("agent-%d.log", attempt)),
		PluginDir:  pluginDir,
		NomadBin:   bin,
		logf:       t.Logf,
	}
	if err := os.MkdirAll(a.DataDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(a.ConfigPath, []byte(agentConfig(a.Ports, opts)), 0o644); err != nil {
		return nil, fmt.Errorf("writing agent config: %w", err)
	}
	args := []string{"agent", "-dev"}
	switch {
	case opts.server:
		args = []string{"agent", "-server", "-bootstrap-expect", "1", "-node", "server"}
	case opts.join != nil:
		args = []string{"agent", "-client", "-servers", fmt.Sprintf("127.0.0.1:%d", opts.join.Ports.RPC), "-node", opts.nodeName}
	}
	a.args = append(args,
		"-bind", "127.0.0.1",
		"-data-dir", a.DataDir,
		"-config", a.ConfigPath,
		"-plugin-dir", pluginDir,
	)
	a.env = append(devagent.Env(), opts.Env...)
	if err := a.start(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nomad agent log %s (last 80 lines):\n%s", a.LogPath, a.LogTail(80))
		}
		a.Stop()
	})

	var err2 error
	a.Client, err2 = api.NewClient(a.APIConfig(""))
	if err2 != nil {
		a.Stop()
		return nil, fmt.Errorf("creating API client: %w", err2)
	}
	if opts.join != nil && opts.join.aclToken != "" {
		a.Client.SetSecretID(opts.join.aclToken)
		a.aclToken, a.aclDone = opts.join.aclToken, true
	}
	node := opts.nodeName
	if opts.server {
		node = noNode
	}
	if err := a.waitReady(opts.StartTimeout, node); err != nil {
		a.Stop()
		if strings.Contains(a.LogTail(200), "address already in use") {
			return nil, fmt.Errorf("%w: %v", errPortInUse, err)
		}
		return nil, fmt.Errorf("%w\nagent log %s (last 40 lines):\n%s", err, a.LogPath, a.LogTail(40))
	}
	t.Logf("nomad agent ready at %s (node %s, log %s)", a.Address, a.NodeID, a.LogPath)
	return a, nil
}

// start runs the agent process (again, after Kill) with its log appended
// to LogPath.
func (a *Agent) start() error {
	logFile, err := os.OpenFile(a.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("creating agent log: %w", err)
	}
	cmd := exec.Command(a.NomadBin, a.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = a.env
	// Its own process group, so that plugins it leaves behind can be
	// stopped with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("running %s: %w", a.NomadBin, err)
	}
	exited := make(chan struct{})
	a.mu.Lock()
	a.cmd, a.exited = cmd, exited
	a.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logFile.Close()
		a.mu.Lock()
		a.exitErr = err
		a.mu.Unlock()
		close(exited)
	}()
	return nil
}

// agentConfig renders the agent configuration file.
func agentConfig(p Ports, opts Options) string {
	options := map[string]string{
		// Without it the agent probes cloud metadata endpoints, which
		// fails the start on machines without network access.
		"fingerprint.denylist": "env_aws,env_gce,env_azure,env_digitalocean",
	}
	for k, v := range opts.ClientOptions {
		options[k] = v
	}
	keys := make([]string, 0, len(options))
	for k := range options {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	var b strings.Builder
	fmt.Fprintf(&b, "disable_update_check = true\nlog_level = %q\n\n", opts.LogLevel)
	fmt.Fprintf(&b, "ports {\n  http = %d\n  rpc  = %d\n  serf = %d\n}\n\n", p.HTTP, p.RPC, p.Serf)
	// Nomad allows 100 HTTP connections per client IP. On loopback every
	// client is 127.0.0.1: the test, its controllers and the harness. The
	// api package opens a new connection for each AllocFS call (a transport
	// per node client), so a test polling a task's logs ran into 429s, and
	// the harness could not stop the jobs at the end. Nomad allows as many
	// RPC connections per client IP, and every simulated client node of
	// internal/nodesim needs one of its own.
	b.WriteString("limits {\n  http_max_conns_per_client = 0\n  rpc_max_conns_per_client  = 0\n}\n\n")
	b.WriteString("client {\n  options = {\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "    %q = %q\n", k, options[k])
	}
	b.WriteString("  }\n")
	if opts.ClientConfig != "" {
		b.WriteString(opts.ClientConfig + "\n")
	}
	b.WriteString("}\n")
	for _, pl := range opts.Plugins {
		fmt.Fprintf(&b, "\nplugin %q {\n  config {\n%s\n  }\n}\n", pl.Name, pl.Config)
	}
	if opts.ACLBootstrapToken != "" || opts.join != nil && opts.join.aclToken != "" {
		b.WriteString("\nacl {\n  enabled = true\n}\n")
	}
	if opts.TLS != nil {
		b.WriteString(opts.TLS.agentBlock(opts.server))
	}
	if opts.ExtraConfig != "" {
		b.WriteString("\n" + opts.ExtraConfig + "\n")
	}
	return b.String()
}

// noNode tells waitReady that a server-only agent has no node to wait for.
const noNode = "\x00none"

// waitReady waits for the HTTP API, a leader and a ready client node (the
// one named node, when node is not ""; none for noNode).
func (a *Agent) waitReady(timeout time.Duration, node string) error {
	deadline := time.Now().Add(timeout)
	status := "agent starting"
	for time.Now().Before(deadline) {
		_, exited := a.proc()
		select {
		case <-exited:
			return fmt.Errorf("nomad agent exited during start (%v)", a.exitError())
		case <-time.After(250 * time.Millisecond):
		}
		leader, err := a.Client.Status().Leader()
		if err != nil || leader == "" {
			status = fmt.Sprintf("no leader yet (%v)", err)
			continue
		}
		if a.aclToken != "" && !a.aclDone {
			if _, _, err := a.Client.ACLTokens().BootstrapOpts(a.aclToken, nil); err != nil {
				status = fmt.Sprintf("bootstrapping ACLs: %v", err)
				continue
			}
			a.Client.SetSecretID(a.aclToken)
			a.aclDone = true
		}
		if node == noNode {
			return nil
		}
		nodes, _, err := a.Client.Nodes().List(nil)
		if err != nil {
			status = fmt.Sprintf("listing nodes: %v", err)
			continue
		}
		var mine *api.NodeListStub
		for _, n := range nodes {
			if node == "" || n.Name == node {
				mine = n
				break
			}
		}
		if mine == nil {
			status = "no client node registered yet"
			continue
		}
		if mine.Status != api.NodeStatusReady {
			status = fmt.Sprintf("node %s is %s", mine.ID, mine.Status)
			continue
		}
		a.NodeID = mine.ID
		return nil
	}
	return fmt.Errorf("nomad agent not ready within %v: %s", timeout, status)
}

// Stop stops the agent and everything it started, even when the test
// failed: it stops every job and waits for their tasks to end (see
// stopJobs), interrupts the agent (SIGKILL after 30s, to its process group
// and so to its plugins), then kills any process still under the agent's
// data dir: tasks and Nomad executors, which run in sessions of their own
// and outlive an agent that did not stop them. It is safe to call more than
// once; t.Cleanup calls it.
func (a *Agent) Stop() {
	a.stopOnce.Do(func() {
		cmd, exited := a.proc()
		if cmd == nil || cmd.Process == nil {
			return
		}
		pgid := cmd.Process.Pid
		// An agent that never had a ready node ran no task.
		if !a.Exited() && a.Client != nil && a.NodeID != "" {
			a.stopJobs(jobsStopTimeout)
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
		}
		// Plugins the agent did not stop share its process group.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if killed := devagent.KillUnder(a.DataDir); len(killed) > 0 {
			a.Killed = killed
			a.logf("nomad agent: killed %d processes it left running under %s:%s", len(killed), a.DataDir, procList(killed))
		}
		// Task secrets dirs (tmpfs) can outlive a dev agent's shutdown and
		// would stop the test's temp dir from being removed.
		devagent.UnmountUnder(a.DataDir)
	})
}

// Exited reports whether the agent process has ended.
func (a *Agent) Exited() bool {
	_, exited := a.proc()
	select {
	case <-exited:
		return true
	default:
		return false
	}
}

// Pid is the agent's process ID.
func (a *Agent) Pid() int {
	cmd, _ := a.proc()
	return cmd.Process.Pid
}

// proc is the agent's current process and the channel closed when it
// ends (both change on Restart).
func (a *Agent) proc() (*exec.Cmd, chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cmd, a.exited
}

func (a *Agent) exitError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exitErr
}

// LogTail returns the last n lines of the agent log.
func (a *Agent) LogTail(n int) string {
	f, err := os.Open(a.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read agent log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// LogContains reports whether the agent log has a line containing s.
func (a *Agent) LogContains(s string) bool {
	data, err := os.ReadFile(a.LogPath)
	return err == nil && strings.Contains(string(data), s)
}

// freePorts returns n distinct free loopback TCP ports. (They are free
// now; Start retries with new ones if another process takes one first.)
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
