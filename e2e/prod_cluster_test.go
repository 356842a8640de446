package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// The production-shaped cluster (issue 29): one server agent and client
// agents as processes of their own, ACLs bootstrapped, mTLS on HTTP and RPC
// (certificates made with `nomad tls` at test time), host volumes on the
// GPU clients, the tenants' namespaces and Steward's. The tests of the
// security, bounds, write and leadership stories run on it.

// prodSpec shapes a production-shaped cluster.
type prodSpec struct {
	// gpus are the GPU clients, in order: the first is the cluster's
	// node (cluster.Agent, NodeID). Default: one node of 4 GPUs.
	gpus []simGPUs
	// plain is how many client agents without GPUs join beside them
	// (default 1, so that every cluster has at least two clients).
	plain int
	// controllerNodes are clients in node pool "steward", the controller's,
	// where no tenant runs.
	controllerNodes int
	// extra are more options for every GPU client (plugins, config; with
	// dockerOnly, nodes that run containers alone).
	extra testnomad.Options
	// controllerExtra are more options for every controller node (say
	// dockerExtra, for the controller's image).
	controllerExtra testnomad.Options
	// volumes are more host volumes on every GPU client, name → host
	// dir: one dir on several clients stands in for shared storage (NFS),
	// as a tenant's checkpoint volume is.
	volumes map[string]string
}

// prodMgmtToken is the production-shaped cluster's management token: the
// operator's, which the tests' own API client (cluster.Client) holds.
const prodMgmtToken = "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"

// startProdCluster starts a production-shaped cluster; controllers started
// with startController get a token of the shipped controller policy and
// the CLI certificate.
func startProdCluster(t testing.TB, spec prodSpec, namespaces ...string) *cluster {
	t.Helper()
	if len(spec.gpus) == 0 {
		spec.gpus = []simGPUs{{count: 4}}
	}
	if spec.plain == 0 {
		spec.plain = 1
	}
	var clients []testnomad.ClientSpec
	var stateDirs []string
	for i, g := range spec.gpus {
		dir := t.TempDir()
		stateDirs = append(stateDirs, dir)
		o := spec.extra
		o.LogLevel = "INFO"
		o = g.options(o, dir)
		// options put the node pool in ClientConfig already.
		vols := map[string]string{"scratch": filepath.Join(t.TempDir(), "scratch")}
		maps.Copy(vols, spec.volumes)
		clients = append(clients, testnomad.ClientSpec{Name: fmt.Sprintf("gpu-%d", i+1), Options: o, HostVolumes: vols})
	}
	for i := 0; i < spec.plain; i++ {
		clients = append(clients, testnomad.ClientSpec{Name: fmt.Sprintf("cpu-%d", i+1), Options: testnomad.Options{LogLevel: "INFO"},
			HostVolumes: map[string]string{"scratch": filepath.Join(t.TempDir(), "scratch")}})
	}
	for i := 0; i < spec.controllerNodes; i++ {
		o := spec.controllerExtra
		o.LogLevel = "INFO"
		clients = append(clients, testnomad.ClientSpec{Name: fmt.Sprintf("steward-%d", i+1), NodePool: "steward", Options: o})
	}
	pc := testnomad.StartCluster(t, testnomad.ClusterOptions{MgmtToken: prodMgmtToken, Clients: clients,
		Server: testnomad.Options{LogLevel: "INFO"}})
	c := &cluster{Agent: pc.Clients[0], t: t, stateDir: stateDirs[0], prod: pc}
	t.Cleanup(func() {
		if dir := os.Getenv("STEWARD_E2E_LOGDIR"); dir != "" {
			for _, a := range append([]*testnomad.Agent{pc.Server}, pc.Clients...) {
				if b, err := os.ReadFile(a.LogPath); err == nil {
					_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s.log", safeName(t.Name()), filepath.Base(filepath.Dir(a.LogPath)))), b, 0o644)
				}
			}
		}
	})
	for _, ns := range append([]string{"steward"}, namespaces...) {
		if _, err := c.Client.Namespaces().Register(&api.Namespace{Name: ns, Description: "tenant " + ns}, nil); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	for i, g := range spec.gpus {
		c.waitGPUs(pc.Clients[i].NodeID, g.devices())
	}
	c.controllerToken = c.aclToken("steward-controller", shippedACL(t, "steward-controller.policy.hcl"))
	return c
}

// gpuNode is the i-th GPU client of a production-shaped cluster.
func (c *cluster) gpuNode(i int) *testnomad.Agent { return c.prod.Clients[i] }

// nomadEnv is the environment that points Nomad's api package (and the
// steward CLI) at the cluster with token: its address, and on a
// production-shaped cluster its CA and the CLI certificate.
func (c *cluster) nomadEnv(token string) []string {
	env := []string{"NOMAD_ADDR=" + c.Address, "NOMAD_NAMESPACE="}
	if token != "" {
		env = append(env, "NOMAD_TOKEN="+token)
	}
	return append(env, c.TLS.Env()...)
}

func safeName(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if ch == '/' {
			b[i] = '_'
		}
	}
	return string(b)
}
