package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// departmentPolicy puts tenants a and b, each without a limit of its
// own, in department research of limit 2.
const departmentPolicy = twoTiers + `
tenant "a" {}
tenant "b" {}
department "research" {
  tenants = ["a", "b"]
  limit   = 2
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`

// TestDepartmentLimit: tenants a and b, each without a limit of its own,
// are in department research with limit 2, on a 4-GPU dev agent. Each runs
// one 1-GPU training job, then submits a second: Nomad would run all four
// (the GPUs are free), but at most 2 run, the department's limit, and each
// second job waits with a reason that names the department and its
// numbers.
func TestDepartmentLimit(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "a", "b")
	c.startController("ctl", writePolicy(t, departmentPolicy))
	c.work("j1", "a", "training", 1, 1, "priority", "40")
	c.work("j1", "b", "training", 1, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"a/j1": 1, "b/j1": 1})

	c.work("j2", "a", "training", 1, 1, "priority", "40")
	c.work("j2", "b", "training", 1, 1, "priority", "40")
	for _, ns := range []string{"a", "b"} {
		rec := c.waitRecord(90*time.Second, ns, "j2", "steward_reason", "department research (tenants a, b) holds")
		t.Logf("%s/j2: %s", ns, rec["steward_reason"])
		if !strings.Contains(rec["steward_reason"], "limit 2") {
			t.Errorf("%s/j2's reason %q does not name the department's limit of 2", ns, rec["steward_reason"])
		}
	}
	c.waitRunning(60*time.Second, map[string]int{"a/j1": 1, "b/j1": 1, "a/j2": 0, "b/j2": 0})
	// Stable: rounds go by (every event, and a resync every 2 s here),
	// and still 2 run.
	time.Sleep(6 * time.Second)
	c.waitRunning(10*time.Second, map[string]int{"a/j1": 1, "b/j1": 1, "a/j2": 0, "b/j2": 0})
}

// TestDepartmentLimitDocker is TestDepartmentLimit on the
// production-shaped cluster: ACLs and mTLS on, two GPU clients of 2 GPUs
// that run containers alone (Nomad's docker driver, network_mode none),
// the controller with the shipped controller policy's token. Tenants a
// and b, each without a limit of its own, are in department research
// with limit 2. Each runs one 1-GPU container, then submits a second:
// Nomad would run all four, one client each pair, but at most 2 run, and
// each second job's record names the department and its numbers.
func TestDepartmentLimitDocker(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2}, {count: 2}}, extra: dockerOnly(t, testnomad.Options{})}, "a", "b")
	for i := range 2 {
		c.waitDriver(c.gpuNode(i).NodeID, "docker")
	}
	c.startController("ctl", writePolicy(t, departmentPolicy))
	c.dockerWorkIn("a", "j1", "training", 1, 40)
	c.dockerWorkIn("b", "j1", "training", 1, 40)
	c.waitRunning(90*time.Second, map[string]int{"a/j1": 1, "b/j1": 1})

	c.dockerWorkIn("a", "j2", "training", 1, 40)
	c.dockerWorkIn("b", "j2", "training", 1, 40)
	for _, ns := range []string{"a", "b"} {
		rec := c.waitRecord(90*time.Second, ns, "j2", "steward_reason", "department research (tenants a, b) holds")
		t.Logf("%s/j2: %s", ns, rec["steward_reason"])
		if !strings.Contains(rec["steward_reason"], "limit 2") {
			t.Errorf("%s/j2's reason %q does not name the department's limit of 2", ns, rec["steward_reason"])
		}
	}
	c.waitRunning(60*time.Second, map[string]int{"a/j1": 1, "b/j1": 1, "a/j2": 0, "b/j2": 0})
	time.Sleep(6 * time.Second)
	c.waitRunning(10*time.Second, map[string]int{"a/j1": 1, "b/j1": 1, "a/j2": 0, "b/j2": 0})
}
