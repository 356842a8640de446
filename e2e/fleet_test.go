package e2e

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

const fleetPolicy = twoTiers + `
preemption {
  min_runtime = "0s"
  grace       = "2s"
}
`

// TestFleetModelAwarePreemption: two client nodes with different simulated
// GPU models (sim_model) in two node pools. Training runs on both. An
// interactive job asks for GPUs with at least 60 GiB (a constraint on
// ${device.attr.memory}): only the H100s qualify, so Steward preempts the
// H100 training, never the A100 training, though that one is the newer
// and by the usual order the first victim. Then a job asking for the A100
// by name (device "nvidia/gpu/Simulated A100") takes the A100s, and a job
// asking for a model no node has waits, saying so, and preempts nothing.
func TestFleetModelAwarePreemption(t *testing.T) {
	t.Parallel()
	c := startClusterSim(t, simGPUs{count: 2, model: "Simulated H100", memory: 81920, nodePool: "h100"},
		testnomad.Options{}, "ml")
	a100 := c.addClientSim("steward-a100", simGPUs{count: 2, model: "Simulated A100", memory: 40960, nodePool: "a100"})
	ctl := c.startController("ctl", writePolicy(t, fleetPolicy))

	c.work("h-train", "ml", "training", 2, 1, "device", "nvidia/gpu/Simulated H100", "node_pool", "all", "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/h-train": 1})
	time.Sleep(time.Second) // a-train is the newer: the usual first victim
	c.work("a-train", "ml", "training", 2, 1, "device", "nvidia/gpu/Simulated A100", "node_pool", "all", "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/a-train": 1})
	aAlloc := c.allocIDs("ml", "a-train")
	if got := c.alloc(aAlloc[0]).NodeID; got != a100.NodeID {
		t.Fatalf("a-train placed on %s, want the A100 node %s", got, a100.NodeID)
	}

	for _, id := range []string{c.NodeID, a100.NodeID} {
		n, _, err := c.Client.Nodes().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range n.NodeResources.Devices {
			t.Logf("node %s (pool %s): %s/%s/%s %v", id, n.NodePool, d.Vendor, d.Type, d.Name, d.Attributes)
		}
	}

	// 60 GiB or more: the H100s only.
	c.work("notebook", "ml", "interactive", 1, 1, "min_memory", "60 GiB", "node_pool", "all", "priority", "60")
	c.waitRunning(90*time.Second, map[string]int{"ml/notebook": 1, "ml/h-train": 0, "ml/a-train": 1})
	if got := c.allocIDs("ml", "a-train"); len(got) != 1 || got[0] != aAlloc[0] {
		t.Errorf("a-train's allocations changed from %v to %v: A100 work was touched for an H100 waiter", aAlloc, got)
	}
	rec := c.waitRecord(30*time.Second, "ml", "h-train", "steward_reason", "yields 2 Simulated H100 GPUs on node "+nodeName(t, c, c.NodeID)+" to ml/notebook/work")
	t.Logf("h-train: %s", rec["steward_reason"])
	if nb := c.alloc(c.allocIDs("ml", "notebook")[0]); nb.NodeID != c.NodeID {
		t.Errorf("notebook runs on %s, want the H100 node %s", nb.NodeID, c.NodeID)
	}

	// A model no node has: it waits, says why, and frees nothing.
	c.work("b200", "ml", "interactive", 1, 1, "device", "nvidia/gpu/B200", "node_pool", "all", "priority", "60")
	c.waitRecord(30*time.Second, "ml", "b200", "steward_reason", "no client node has nvidia/gpu/B200")
	if got := c.allocIDs("ml", "a-train"); len(got) != 1 || got[0] != aAlloc[0] {
		t.Errorf("a-train's allocations changed from %v to %v for a model no node has", aAlloc, got)
	}
	if ctl.Contains("preempt: job=ml/a-train") {
		t.Errorf("a-train was preempted:\n%s", tail(ctl.Log(), 40))
	}
}

// nodeName is a node's name, as reasons give it.
func nodeName(t *testing.T, c *cluster, id string) string {
	t.Helper()
	n, _, err := c.Client.Nodes().Info(id, nil)
	if err != nil {
		t.Fatalf("read node %s: %v", id, err)
	}
	return n.Name
}

const precedencePolicy = `
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
  pools       = ["onprem", "cloud"]
}
pool "onprem" {
  node_pool = "onprem"
}
pool "cloud" {
  node_pool = "cloud"
}
preemption {
  min_runtime = "0s"
  grace       = "2s"
}

# These tests' namespaces have no tenant blocks: they may use every tier.
defaults {
  unnamed_tiers = ["interactive", "training"]
}
`

// TestFleetPoolPrecedence: two client nodes in node pools onprem and cloud;
// training lists onprem, then cloud. With onprem full, a training job
// submitted to onprem is moved to the cloud (Steward re-registers it there)
// and runs there. A second one, submitted to the cloud when the cloud has
// no room for it, waits; when onprem frees, it is moved back there, its
// first choice, and runs there. Each record says where the job went and
// why.
func TestFleetPoolPrecedence(t *testing.T) {
	t.Parallel()
	c := startClusterSim(t, simGPUs{count: 2, nodePool: "onprem"}, testnomad.Options{}, "ml")
	cloud := c.addClientSim("steward-cloud", simGPUs{count: 2, nodePool: "cloud"})
	c.startController("ctl", writePolicy(t, precedencePolicy))

	c.work("filler", "ml", "training", 2, 1, "node_pool", "onprem", "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/filler": 1})

	c.work("next", "ml", "training", 1, 1, "node_pool", "onprem", "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/next": 1})
	if n := c.alloc(c.allocIDs("ml", "next")[0]).NodeID; n != cloud.NodeID {
		t.Fatalf("next runs on %s, want the cloud node %s", n, cloud.NodeID)
	}
	rec := c.waitRecord(30*time.Second, "ml", "next", "steward_reason",
		"no room in node pool onprem for 1 GPU on one node; node pool cloud, next in its pool precedence (onprem, cloud), has room: moving there")
	t.Logf("next: %s: %s", rec["steward_state"], rec["steward_reason"])
	if job := c.job("ml", "next"); job.NodePool == nil || *job.NodePool != "cloud" {
		t.Errorf("next's node pool %v, want cloud", job.NodePool)
	}

	c.work("back", "ml", "training", 2, 1, "node_pool", "cloud", "priority", "40")
	time.Sleep(3 * time.Second) // no room in either pool: it waits in the cloud
	if got := c.running("ml", "back"); got != 0 {
		t.Fatalf("back runs %d allocations with no room for it", got)
	}
	c.deregister("ml", "filler")
	c.waitRunning(60*time.Second, map[string]int{"ml/back": 1, "ml/filler": 0, "ml/next": 1})
	if n := c.alloc(c.allocIDs("ml", "back")[0]).NodeID; n != c.NodeID {
		t.Fatalf("back runs on %s, want the onprem node %s", n, c.NodeID)
	}
	c.waitRecord(30*time.Second, "ml", "back", "steward_reason",
		"room again in node pool onprem, before cloud in its pool precedence (onprem, cloud): moving back there for 2 GPUs")
}

// job reads a job's spec.
func (c *cluster) job(ns, id string) *api.Job {
	c.t.Helper()
	j, _, err := c.Client.Jobs().Info(id, &api.QueryOptions{Namespace: ns})
	if err != nil {
		c.t.Fatalf("read job %s/%s: %v", ns, id, err)
	}
	return j
}

// TestFleetMIG: one node's GPU is split into 7 MIG-shaped devices of the
// simulated A100 (sim_mig_profile "1g.10gb"), another node has 2 whole
// A100s. Training holds the 7 slices (the older job) and the 2 whole GPUs
// (the newer). An interactive job asks for one slice by its device name:
// Steward preempts the slices' job, never the whole GPUs' one, though that
// is the newer and, by the usual order, the first victim. The reason names
// the MIG device and counts its seven instances as the one GPU they are.
func TestFleetMIG(t *testing.T) {
	t.Parallel()
	c := startClusterSim(t, simGPUs{count: 1, migProfile: "1g.10gb", migCount: 7}, testnomad.Options{}, "ml")
	whole := c.addClientSim("steward-whole", simGPUs{count: 2})
	ctl := c.startController("ctl", writePolicy(t, fleetPolicy))
	const mig = "nvidia/gpu/Simulated A100 MIG 1g.10gb"

	n, _, err := c.Client.Nodes().Info(c.NodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := n.NodeResources.Devices; len(d) != 1 || d[0].Name != "Simulated A100 MIG 1g.10gb" || len(d[0].Instances) != 7 ||
		d[0].Attributes["mig"] == nil || d[0].Attributes["mig"].BoolVal == nil || !*d[0].Attributes["mig"].BoolVal {
		t.Fatalf("MIG node's devices: %+v", d)
	}

	c.work("slices", "ml", "training", 7, 1, "device", mig, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/slices": 1})
	time.Sleep(time.Second)
	c.work("whole", "ml", "training", 2, 1, "device", "nvidia/gpu/Simulated A100", "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/whole": 1})
	if got := c.alloc(c.allocIDs("ml", "whole")[0]).NodeID; got != whole.NodeID {
		t.Fatalf("whole runs on %s, want %s", got, whole.NodeID)
	}
	wholeAllocs := c.allocIDs("ml", "whole")

	c.work("nb", "ml", "interactive", 1, 1, "device", mig, "priority", "60")
	c.waitRunning(90*time.Second, map[string]int{"ml/nb": 1, "ml/slices": 0, "ml/whole": 1})
	if got := c.allocIDs("ml", "whole"); len(got) != 1 || got[0] != wholeAllocs[0] {
		t.Errorf("whole's allocations changed from %v to %v: whole-GPU work was touched for a MIG waiter", wholeAllocs, got)
	}
	rec := c.waitRecord(30*time.Second, "ml", "slices", "steward_reason", "yields 7 Simulated A100 MIG 1g.10gb instances (1 GPU) on node")
	t.Logf("slices: %s", rec["steward_reason"])
	if ctl.Contains("preempt: job=ml/whole") {
		t.Errorf("whole was preempted:\n%s", tail(ctl.Log(), 40))
	}
}
