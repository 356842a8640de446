package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// poolReason is what the record of a tenant's job in the controller's node
// pool says.
const poolReason = "node pool steward is kept for the Steward controller"

// TestTenantCannotUseControllerPool: Nomad CE checks no node_pool rule
// when a job is registered (node pool governance is Enterprise's), so a
// tenant whose token may submit jobs can put a task on the controller's
// nodes: in pool steward by name, or in pool "all" (a system job there runs
// on every node). The test shows Nomad accepts both from the tenant's
// token and places them beside the controller, then starts the controller
// with -controller-pool steward: both are held (every group scaled to 0,
// nothing left running in the pool, the record says why), a job in the
// default pool runs on untouched, and a held job runs again only once its
// owner submits it to another pool.
func TestTenantCannotUseControllerPool(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{controllerNodes: 2}, "research")
	tenant := c.as(c.aclToken("research-user", fmt.Sprintf(teamRules, "research"), userACL(t, "research")))
	wq := &api.WriteOptions{Namespace: "research"}

	// Tasks without GPUs: a CPU-only task beside the controller is the
	// threat, whether or not it asks for a GPU.
	for _, j := range []*api.Job{
		sleepJob("beside", api.JobTypeService, "steward", 2),
		sleepJob("everywhere", api.JobTypeSystem, "all", 1),
		sleepJob("fine", api.JobTypeService, "default", 1),
	} {
		if _, _, err := tenant.Jobs().Register(j, wq); err != nil {
			t.Fatalf("Nomad refused the tenant's job %s in node pool %s: %v (the premise is that Nomad CE does not)", *j.ID, *j.NodePool, err)
		}
	}
	// Nomad places them: the tenant's tasks run on the controller's nodes.
	c.waitInPool("steward", map[string]int{"research/beside": 2, "research/everywhere": 2})
	t.Logf("Nomad CE placed the tenant's jobs in node pool steward: %s", c.describePool("steward"))

	ctl := c.startController("ctl", writePolicy(t, tenantPolicy), "-listen", "127.0.0.1:0", "-controller-pool", "steward")

	c.waitInPool("steward", map[string]int{"research/beside": 0, "research/everywhere": 0})
	rec := c.waitRecord(30*time.Second, "research", "beside", "steward_reason", poolReason)
	for _, want := range []string{"tenants' work may not run there", "2 nodes", "until its owner submits it to another node pool"} {
		if !strings.Contains(rec["steward_reason"], want) {
			t.Errorf("record of beside: reason %q lacks %q", rec["steward_reason"], want)
		}
	}
	if rec["steward_state"] != "held" || rec["steward_rule"] != "controller-pool" || rec["steward_held"] != "2 allocations" {
		t.Errorf("record of beside: %v, want state held, rule controller-pool, 2 allocations held", rec)
	}
	rec = c.waitRecord(30*time.Second, "research", "everywhere", "steward_reason", "node pool all includes node pool steward")
	if rec["steward_state"] != "held" || rec["steward_rule"] != "controller-pool" {
		t.Errorf("record of everywhere: %v, want state held, rule controller-pool", rec)
	}
	if n := c.groupCount("research", "beside", "sleep"); n != 0 {
		t.Errorf("beside's count: %d, want 0 (held)", n)
	}
	if n := c.groupCount("research", "everywhere", "sleep"); n != 0 {
		t.Errorf("everywhere's count: %d, want 0 (held)", n)
	}

	// The default pool's job is none of this.
	c.waitRunning(30*time.Second, map[string]int{"research/fine": 1})
	if rec := c.record("research", "fine"); rec["steward_reason"] != "" {
		t.Errorf("a job in the default pool got a reason: %v", rec)
	}

	// Held for good: a few rounds later nothing was resumed.
	c.rounds(ctl, 3)
	if got := c.inPool("steward"); len(got) != 0 {
		t.Errorf("tenant allocations in node pool steward after more rounds: %v", got)
	}
	if n := c.groupCount("research", "beside", "sleep"); n != 0 {
		t.Errorf("beside resumed in node pool steward: count %d", n)
	}

	// Its owner submits it to the default pool: it runs there, and
	// Steward leaves it alone.
	moved := sleepJob("beside", api.JobTypeService, "default", 2)
	if _, _, err := tenant.Jobs().Register(moved, wq); err != nil {
		t.Fatalf("re-register beside in node pool default: %v", err)
	}
	c.waitRunning(60*time.Second, map[string]int{"research/beside": 2, "research/fine": 1})
	c.rounds(ctl, 3)
	if n := c.running("research", "beside"); n != 2 {
		t.Errorf("beside in node pool default: %d running, want 2", n)
	}
	if got := c.inPool("steward"); len(got) != 0 {
		t.Errorf("tenant allocations in node pool steward: %v", got)
	}
	if rec := c.record("research", "beside"); strings.Contains(rec["steward_state"], "held") {
		t.Errorf("beside still held after its owner moved it to node pool default: %v", rec)
	}
	if ctl.Contains("lacks") {
		t.Errorf("the shipped policy lacks a capability:\n%s", tail(ctl.Log(), 30))
	}
}

// sleepJob is a CPU-only raw_exec job in a node pool.
func sleepJob(id, typ, pool string, count int) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	j.Type, j.NodePool = &typ, &pool
	g := api.NewTaskGroup("sleep", count)
	task := api.NewTask("sleep", "raw_exec").SetConfig("command", "/bin/sh").
		SetConfig("args", []string{"-c", "trap 'exit 0' TERM INT; while true; do sleep 1 & wait $!; done"})
	task.Require(&api.Resources{CPU: ptr(20), MemoryMB: ptr(16)})
	g.AddTask(task)
	j.AddTaskGroup(g)
	return j
}

// inPool lists, per job, the allocations of any namespace but Steward's
// that run (or are about to) on the nodes of a node pool.
func (c *cluster) inPool(pool string) map[string]int {
	c.t.Helper()
	nodes, _, err := c.Client.Nodes().List(nil)
	if err != nil {
		c.t.Fatalf("list nodes: %v", err)
	}
	in := map[string]bool{}
	for _, n := range nodes {
		if n.NodePool == pool {
			in[n.ID] = true
		}
	}
	allocs, _, err := c.Client.Allocations().List(&api.QueryOptions{Namespace: api.AllNamespacesNamespace})
	if err != nil {
		c.t.Fatalf("list allocations: %v", err)
	}
	out := map[string]int{}
	for _, a := range allocs {
		if in[a.NodeID] && a.Namespace != "steward" && a.DesiredStatus == "run" &&
			(a.ClientStatus == "running" || a.ClientStatus == "pending") {
			out[a.Namespace+"/"+a.JobID]++
		}
	}
	return out
}

func (c *cluster) describePool(pool string) string {
	got := c.inPool(pool)
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, fmt.Sprintf("%s=%d", k, got[k]))
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// waitInPool waits until each job (ns/job=n) has n allocations running in
// the node pool.
func (c *cluster) waitInPool(pool string, want map[string]int) {
	c.t.Helper()
	testnomad.WaitFor(c.t, 90*time.Second, fmt.Sprintf("allocations in node pool %s: %v", pool, want), func() (bool, string) {
		got := c.inPool(pool)
		for k, n := range want {
			if got[k] != n {
				return false, c.describePool(pool)
			}
		}
		return true, ""
	})
}
