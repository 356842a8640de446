package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// research reserves the whole 4-GPU node; platform has no reserve.
// Interactive work may preempt training within a reserve.
const overReservePolicy = `
tier "interactive" {
  priority          = 60
  preempts_reserved = ["training"]
}
tier "training" {
  priority = 40
}
tenant "research" {
  reserve = 4
}
tenant "platform" {
  reserve = 0
  limit   = 2
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`

// TestInteractiveOverReserves: research's training fills its reserve;
// platform's notebook preempts it anyway (preempts_reserved), and the
// training waits for the notebook rather than reclaim its reserve (which
// would only be preempted again): the notebook keeps its allocation. Once
// the notebook ends, the training resumes by itself.
func TestInteractiveOverReserves(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "research", "platform")
	c.startController("ctl", writePolicy(t, overReservePolicy))

	c.work("train", "research", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"research/train": 1})

	c.work("nb", "platform", "interactive", 1, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"platform/nb": 1, "research/train": 0})
	rec := c.waitRecord(30*time.Second, "research", "train", "steward_state", "preempted")
	want := "tenant research holds 4 GPUs, within its reserve of 4, but tier interactive may preempt training within reserves (preempts_reserved)"
	if !strings.Contains(rec["steward_reason"], want) {
		t.Errorf("train's reason %q\n does not say %q", rec["steward_reason"], want)
	}
	nb := c.allocIDs("platform", "nb")

	// Rounds go by (the controller plans on every event and every 2 s
	// resync here): the training stays held and the notebook keeps its GPU.
	time.Sleep(6 * time.Second)
	c.waitRunning(10*time.Second, map[string]int{"platform/nb": 1, "research/train": 0})
	if got := c.allocIDs("platform", "nb"); len(got) != 1 || got[0] != nb[0] {
		t.Errorf("the notebook was preempted back: allocations %v, then %v", nb, got)
	}
	if rec := c.record("platform", "nb"); rec["steward_preemptions"] != "" && rec["steward_preemptions"] != "0" {
		t.Errorf("the notebook's record counts preemptions: %v", rec)
	}

	if _, _, err := c.Client.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "platform"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"research/train": 1})
}

const limitRoomPolicy = twoTiers + `
tenant "a" {
  limit = 2
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`

// TestLimitRoomFromOtherNodes: tenant a, at its limit of 2 with a 1-GPU
// training job on each of two 1-GPU nodes, submits a 2-GPU notebook that
// only the 2-GPU first node, free, can hold. No node has both the
// notebook's GPUs and a's training, so a's training on the other nodes
// makes room under the limit and the notebook runs on the free node:
// interactive work beats its own team's training wherever it runs. (Nomad
// places the notebook at once; taking the tenant back under its limit
// then holds it first, as the newest work, and it resumes in place of
// the training.)
func TestLimitRoomFromOtherNodes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "a")
	second := c.addClient("steward-second", 1)
	third := c.addClient("steward-third", 1)
	c.startController("ctl", writePolicy(t, limitRoomPolicy))

	c.workOn(second.NodeID, "t1", "a", "training", 1)
	c.workOn(third.NodeID, "t2", "a", "training", 1)
	c.waitRunning(60*time.Second, map[string]int{"a/t1": 1, "a/t2": 1})

	c.work("nb", "a", "interactive", 2, 1, "priority", "60")
	c.waitRunning(90*time.Second, map[string]int{"a/nb": 1, "a/t1": 0, "a/t2": 0})
	for _, id := range []string{"t1", "t2"} {
		rec := c.waitRecord(30*time.Second, "a", id, "steward_state", "preempted")
		if want := "tenant a holds 2 GPUs, limit 2: they make room under it for a/nb/work, which goes on free GPUs"; !strings.Contains(rec["steward_reason"], want) {
			t.Errorf("%s's reason %q\n does not say %q", id, rec["steward_reason"], want)
		}
	}
	if a := c.alloc(c.allocIDs("a", "nb")[0]); a.NodeID != c.NodeID {
		t.Errorf("the notebook runs on node %s, want the first node %s", a.NodeID, c.NodeID)
	}
	// Stable: the training waits for the limit, the notebook keeps running.
	time.Sleep(4 * time.Second)
	c.waitRunning(10*time.Second, map[string]int{"a/nb": 1, "a/t1": 0, "a/t2": 0})
}
