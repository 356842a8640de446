package e2e

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestProductionClusterShape checks the cluster the production stories run
// on is what issue 29 asks for: a server and clients as processes of their
// own, mTLS required on the HTTP API (no plain HTTP, no call without a
// client certificate), ACLs on (an anonymous call is refused), host
// volumes and the controller's node pool on the clients.
func TestProductionClusterShape(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{controllerNodes: 2}, "research")
	if got := len(c.prod.Clients); got != 4 {
		t.Fatalf("clients: got %d, want 4 (gpu-1, cpu-1, steward-1, steward-2)", got)
	}
	pids := map[int]bool{c.prod.Server.Pid(): true}
	for _, a := range c.prod.Clients {
		pids[a.Pid()] = true
	}
	if len(pids) != 5 {
		t.Errorf("agents share processes: %d distinct pids for 5 agents", len(pids))
	}
	nodes, _, err := c.Client.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]int{}
	for _, n := range nodes {
		pools[n.NodePool]++
	}
	if pools["steward"] != 2 || pools["default"] != 2 {
		t.Errorf("node pools: %v, want 2 steward and 2 default", pools)
	}
	node, _, err := c.Client.Nodes().Info(c.NodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.HostVolumes["scratch"]; !ok {
		t.Errorf("node %s has no host volume scratch: %v", node.Name, node.HostVolumes)
	}
	if !node.TLSEnabled {
		t.Errorf("node %s has TLS off", node.Name)
	}

	plain := strings.Replace(c.Address, "https://", "http://", 1)
	hc := &http.Client{Timeout: 5 * time.Second}
	if resp, err := hc.Get(plain + "/v1/jobs"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP answered 200 on %s", plain)
		}
	}
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if resp, err := noCert.Get(c.Address + "/v1/jobs"); err == nil {
		resp.Body.Close()
		t.Errorf("HTTPS without a client certificate answered %s", resp.Status)
	}
	anon, err := api.NewClient(c.APIConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := anon.Jobs().List(&api.QueryOptions{Namespace: "research"}); !forbidden(err) {
		t.Errorf("anonymous job list: got %v, want 403", err)
	}
}
