package e2e

import (
	"testing"
	"time"

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
