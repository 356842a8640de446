package testnomad

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// A production-shaped cluster, as HashiCorp's production guide runs one
// and as issue 29 asks Steward to be tested on: one server agent and
// client agents, each a process of its own (no -dev), ACLs bootstrapped,
// mTLS on for HTTP and RPC with certificates made by `nomad tls` at test
// time, host volumes and node pools on the clients. Loopback only.
//
//	pc := testnomad.StartCluster(t, testnomad.ClusterOptions{
//		MgmtToken: "...",
//		Clients: []testnomad.ClientSpec{{Name: "gpu-1", Options: ...}, {Name: "ctl-1", NodePool: "steward"}},
//	})

// TLS is a cluster's certificates: its CA, the agents' server and client
// certificates and a CLI certificate for API callers (tests, controllers
// run as processes, the steward CLI).
type TLS struct {
	Dir                   string
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	CLICert, CLIKey       string
}

// MakeTLS makes a CA and certificates with the agent's own `nomad tls`
// commands, in a temp dir of the test, for region global on loopback.
func MakeTLS(t testing.TB) *TLS {
	t.Helper()
	bin := NomadBin(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"tls", "ca", "create"},
		{"tls", "cert", "create", "-server", "-region", "global"},
		{"tls", "cert", "create", "-client", "-region", "global"},
		{"tls", "cert", "create", "-cli", "-region", "global"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	return &TLS{Dir: dir, CA: f("nomad-agent-ca.pem"),
		ServerCert: f("global-server-nomad.pem"), ServerKey: f("global-server-nomad-key.pem"),
		ClientCert: f("global-client-nomad.pem"), ClientKey: f("global-client-nomad-key.pem"),
		CLICert: f("global-cli-nomad.pem"), CLIKey: f("global-cli-nomad-key.pem")}
}

// agentBlock is the agent's tls block: mTLS on HTTP and RPC, server names
// checked, client certificates required on HTTPS too.
func (c *TLS) agentBlock(server bool) string {
	cert, key := c.ClientCert, c.ClientKey
	if server {
		cert, key = c.ServerCert, c.ServerKey
	}
	return fmt.Sprintf(`
tls {
  http                   = true
  rpc                    = true
  ca_file                = %q
  cert_file              = %q
  key_file               = %q
  verify_server_hostname = true
  verify_https_client    = true
}
`, c.CA, cert, key)
}

// Env is the environment that points Nomad's api package (and so the
// steward binary) at the cluster over mTLS with the CLI certificate.
func (c *TLS) Env() []string {
	if c == nil {
		return nil
	}
	return []string{"NOMAD_CACERT=" + c.CA, "NOMAD_CLIENT_CERT=" + c.CLICert, "NOMAD_CLIENT_KEY=" + c.CLIKey}
}

// APIConfig is an api configuration for the agent's HTTP API with token,
// over mTLS with the CLI certificate when the cluster has TLS.
func (a *Agent) APIConfig(token string) *api.Config {
	cfg := api.DefaultConfig()
	cfg.Address, cfg.SecretID, cfg.Region, cfg.Namespace = a.Address, token, "", ""
	cfg.TLSConfig = &api.TLSConfig{}
	if a.TLS != nil {
		cfg.TLSConfig = &api.TLSConfig{CACert: a.TLS.CA, ClientCert: a.TLS.CLICert, ClientKey: a.TLS.CLIKey}
	}
	return cfg
}

// ClusterOptions shape a production-shaped cluster.
type ClusterOptions struct {
	// MgmtToken is the management token ACLs are bootstrapped with.
	MgmtToken string
	// Clients are the client agents, started in order.
	Clients []ClientSpec
	// Server are options for the server agent (log level, extra config).
	Server Options
}

// ClientSpec is one client agent.
type ClientSpec struct {
	// Name is the node's name.
	Name string
	// NodePool is the node's node pool ("" for default).
	NodePool string
	// HostVolumes maps host volume names to directories, made if missing.
	HostVolumes map[string]string
	// Options are the agent's plugins and extra configuration.
	Options Options
}

// Cluster is a running production-shaped cluster. Its agents are stopped
// by t.Cleanup, clients first.
type Cluster struct {
	Server  *Agent
	Clients []*Agent
	TLS     *TLS
}

// StartCluster makes certificates, starts the server, bootstraps ACLs
// with opts.MgmtToken and starts every client, waiting for each node to be
// ready. It fails the test (never skips) when a binary is missing.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.MgmtToken == "" {
		t.Fatal("testnomad.StartCluster: a production-shaped cluster has ACLs: give MgmtToken")
	}
	c := &Cluster{TLS: MakeTLS(t)}
	so := opts.Server
	so.server, so.TLS, so.ACLBootstrapToken = true, c.TLS, opts.MgmtToken
	so.ExtraConfig += advertiseLoopback
	c.Server = Start(t, so)
	for _, spec := range opts.Clients {
		c.Clients = append(c.Clients, c.StartClient(t, spec))
	}
	return c
}

// StartClient starts one more client agent in the cluster.
func (c *Cluster) StartClient(t testing.TB, spec ClientSpec) *Agent {
	t.Helper()
	o := spec.Options
	o.TLS = c.TLS
	// Tasks' ports on loopback, as everything here: without it the
	// client fingerprints the host's first interface.
	o.ClientConfig += "\n  network_interface = \"lo\""
	if spec.NodePool != "" {
		o.ClientConfig += fmt.Sprintf("\n  node_pool = %q", spec.NodePool)
	}
	for _, name := range sortedKeys(spec.HostVolumes) {
		dir := spec.HostVolumes[name]
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("host volume %s: %v", name, err)
		}
		o.ClientConfig += fmt.Sprintf("\n  host_volume %q {\n    path      = %q\n    read_only = false\n  }", name, dir)
	}
	return StartClient(t, c.Server, spec.Name, o)
}

// Kill ends the agent's process at once (SIGKILL to it and its plugins,
// its process group), as a crash would: its tasks and their executors, in
// sessions of their own, run on, and a Restart finds them again.
func (a *Agent) Kill() {
	cmd, exited := a.proc()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Signal sends sig to the agent's process alone (SIGSTOP, SIGCONT: a
// server stalled, then back), not to its plugins or tasks.
func (a *Agent) Signal(sig syscall.Signal) {
	cmd, _ := a.proc()
	_ = syscall.Kill(cmd.Process.Pid, sig)
}

// Restart starts the agent again after Kill (or after it ended), with the
// same ports, data dir and configuration, and waits until its node is
// ready again (a server: until there is a leader).
func (a *Agent) Restart(t testing.TB, timeout time.Duration) {
	t.Helper()
	if !a.Exited() {
		a.Kill()
	}
	if err := a.start(); err != nil {
		t.Fatalf("restarting nomad agent: %v", err)
	}
	node := noNode
	if a.NodeID != "" {
		node = a.nodeName()
	}
	if err := a.waitReady(timeout, node); err != nil {
		t.Fatalf("restarted nomad agent: %v\nagent log %s (last 40 lines):\n%s", err, a.LogPath, a.LogTail(40))
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// nodeName is the name the agent's node registered with.
func (a *Agent) nodeName() string {
	for i, arg := range a.args {
		if arg == "-node" && i+1 < len(a.args) {
			return a.args[i+1]
		}
	}
	return ""
}
