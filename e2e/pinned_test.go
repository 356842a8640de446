package e2e

import (
	"testing"
	"time"
)

// TestPinnedBeneficiaryPreemptsOnItsNode: two client nodes, each full of
// training. A notebook pinned to the second node by its constraint
// (${node.unique.name}) waits for GPUs there. Steward preempts the
// training on that node, though the one on the first node is the newer and
// by the usual order the first victim: stopping it would free GPUs the
// notebook cannot use and leave it blocked (issue 29).
func TestPinnedBeneficiaryPreemptsOnItsNode(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2}, {count: 2}}}, "ml")
	second := c.gpuNode(1)
	firstName, secondName := nodeName(t, c, c.NodeID), nodeName(t, c, second.NodeID)

	c.work("old-train", "ml", "training", 2, 1, "node", secondName, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/old-train": 1})
	time.Sleep(2 * time.Second) // new-train is the newer: the usual first victim
	c.work("new-train", "ml", "training", 2, 1, "node", firstName, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/new-train": 1})
	newAllocs := c.allocIDs("ml", "new-train")

	c.startController("ctl", writePolicy(t, fleetPolicy))
	c.work("notebook", "ml", "interactive", 2, 1, "node", secondName, "priority", "60")
	c.waitRunning(120*time.Second, map[string]int{"ml/notebook": 1, "ml/old-train": 0, "ml/new-train": 1})
	if got := c.allocIDs("ml", "new-train"); len(got) != 1 || got[0] != newAllocs[0] {
		t.Fatalf("new-train's allocations changed from %v to %v: work on %s was preempted for a notebook pinned to %s",
			newAllocs, got, firstName, secondName)
	}
	c.waitRecord(30*time.Second, "ml", "old-train", "steward_reason", "ml/notebook")
}
