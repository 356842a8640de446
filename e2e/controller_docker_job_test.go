package e2e

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testdocker"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// imageNobodyUID is the uid images/passwd gives "nobody" in the controller
// image; the host's nobody must have the same, or Nomad would chown the
// token file to a uid the container does not run as.
const imageNobodyUID = 65534

// TestControllerAsDockerJob runs jobs/steward-controller.nomad.hcl under its
// default driver, docker (issue 30 item 5): the controller image (FROM
// scratch, from the run's own daemon, never pulled) with network_mode
// "none", on the production-shaped cluster's two controller nodes, which
// run containers alone (no raw_exec). As TestControllerAsNomadJob: in
// namespace steward, its rights the shipped controller policy bound to the
// job's workload identity, read from a file through the task API socket
// (mounted with the secrets directory at /secrets), the policy in a Nomad
// variable. Two copies on different nodes, one leads, and it preempts a
// tenant's training job for an interactive one. Its token file is 0600 for
// the task's user alone (the controller refuses any other). Then the
// leader's node is drained of it (ineligible, its allocation stopped) and
// the other copy takes over and acts: it resumes the training job once the
// interactive one is gone.
func TestControllerAsDockerJob(t *testing.T) {
	t.Parallel()
	// The task's user: a name the host and the image both know, with the
	// same uid. The shipped default, steward (65532 in the image), is a
	// user docs/install.md has the operator create; the test's hosts have
	// nobody.
	nobody, err := user.Lookup("nobody")
	if err != nil || nobody.Uid != fmt.Sprint(imageNobodyUID) {
		t.Fatalf("the host's nobody is %+v (%v): the controller image names uid %d nobody", nobody, err, imageNobodyUID)
	}
	c := startProdCluster(t, prodSpec{controllerNodes: 2, controllerExtra: dockerOnly(t, testnomad.Options{})}, "ml")
	ctlNodes := map[string]*testnomad.Agent{}
	for _, a := range c.prod.Clients[len(c.prod.Clients)-2:] {
		c.waitDriver(a.NodeID, "docker")
		ctlNodes[a.NodeID] = a
	}
	if _, err := c.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "steward-controller-job",
		Rules:  shippedACL(t, "steward-controller.policy.hcl"),
		JobACL: &api.JobACL{Namespace: "steward", JobID: "steward-controller"}}, nil); err != nil {
		t.Fatalf("bind the controller policy to the job: %v", err)
	}
	v := &api.Variable{Namespace: "steward", Path: "nomad/jobs/steward-controller",
		Items: map[string]string{"policy": fmt.Sprintf(faultPolicy, "0s")}}
	if _, _, err := c.Client.Variables().Update(v, &api.WriteOptions{Namespace: "steward"}); err != nil {
		t.Fatal(err)
	}
	// The jobspec's defaults but for the image's tag in the test daemon,
	// the pool and the user: driver docker.
	c.RegisterJobFile(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "steward-controller.nomad.hcl"), map[string]string{
		"image": testdocker.Image("controller"), "node_pool": "steward", "user": "nobody"})
	testnomad.WaitFor(t, 90*time.Second, "two controller copies running", func() (bool, string) {
		return c.running("steward", "steward-controller") == 2, c.controllerJobEvents() + c.placementFailures("steward", "steward-controller")
	})

	// Two copies, on the two controller nodes, under docker.
	job, _, err := c.Client.Jobs().Info("steward-controller", &api.QueryOptions{Namespace: "steward"})
	if err != nil {
		t.Fatal(err)
	}
	if task := job.TaskGroups[0].Tasks[0]; task.Driver != "docker" || task.Config["network_mode"] != "none" {
		t.Errorf("the shipped job runs under %s with network_mode %v, want docker and none", task.Driver, task.Config["network_mode"])
	}
	allocs := map[string]*api.Allocation{} // by node
	for _, id := range c.allocIDs("steward", "steward-controller") {
		a := c.alloc(id)
		if ctlNodes[a.NodeID] == nil {
			t.Errorf("controller copy %s on node %s, not a controller node", a.Name, a.NodeID)
		}
		allocs[a.NodeID] = a
	}
	if len(allocs) != 2 {
		t.Fatalf("the two controller copies share a node: %v", allocs)
	}

	// Its token file is its own: 0600, owned by the task's user on the
	// host, and the controller took it (it refuses one others may read).
	for node, a := range allocs {
		path := filepath.Join(ctlNodes[node].DataDir, "alloc", a.ID, "controller", "secrets", "nomad_token")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("the token file on the host: %v", err)
		}
		uid := fi.Sys().(*syscall.Stat_t).Uid
		t.Logf("%s: secrets/nomad_token %04o, uid %d", a.Name, fi.Mode().Perm(), uid)
		if fi.Mode().Perm() != 0o600 || uid != imageNobodyUID {
			t.Errorf("%s's token file has mode %04o and uid %d, want 0600 and %d", a.Name, fi.Mode().Perm(), uid, imageNobodyUID)
		}
	}
	testnomad.WaitFor(t, 60*time.Second, "one copy leads", func() (bool, string) {
		l := c.controllerJobLogs()
		return strings.Count(l, "leading: this controller acts") == 1 && strings.Count(l, "waiting to lead") == 2, tail(l, 10) + c.controllerJobEvents()
	})
	if l := c.controllerJobLogs(); strings.Contains(l, "refusing to run with it") {
		t.Errorf("the controller refused its token file:\n%s", tail(l, 10))
	}

	// It acts: a tenant's interactive job preempts its training job.
	tenant := c.as(c.aclToken("team-ml", fmt.Sprintf(tenantRules, "ml"), userACL(t, "ml")))
	c.submitWork(tenant, "train", "training", 40)
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.submitWork(tenant, "nb", "interactive", 60)
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	c.waitRecord(30*time.Second, "ml", "train", "steward_state", "preempted")

	// The leader's node is drained of it: no replacement can start (the
	// other controller node has the other copy), so the other copy must
	// take over.
	var leader, other *api.Allocation
	for _, a := range allocs {
		if strings.Contains(c.allocStderr(a), "leading: this controller acts") {
			leader = a
		} else {
			other = a
		}
	}
	if leader == nil || other == nil {
		t.Fatalf("no leader among %v", allocs)
	}
	if _, err := c.Client.Nodes().ToggleEligibility(leader.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if _, err := c.Client.Allocations().Stop(leader, nil); err != nil {
		t.Fatalf("stop the leader's allocation: %v", err)
	}
	testnomad.WaitFor(t, 60*time.Second, "the other copy leads", func() (bool, string) {
		l := c.allocStderr(other)
		return strings.Contains(l, "leading: this controller acts"), tail(l, 10)
	})
	t.Logf("%s leads %s after %s's allocation was stopped", other.Name, time.Since(stopped).Round(time.Second), leader.Name)

	// And acts: with the interactive job gone, it resumes the training
	// job, which Nomad would not place by itself (Steward holds it).
	if _, _, err := tenant.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1, "ml/nb": 0})
	if l := c.allocStderr(other); strings.Contains(l, "Permission denied") || strings.Contains(l, "refusing to run with it") {
		t.Errorf("the new leader lacks a right:\n%s", tail(l, 20))
	}
}

// submitWork registers jobs/gpu-work.nomad.hcl (4 GPUs) in namespace ml
// with a tenant's client (parsed with the operator's).
func (c *cluster) submitWork(tenant *api.Client, name, tier string, prio int) {
	t := c.t
	t.Helper()
	spec, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(t), "jobs", "gpu-work.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	job, err := c.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{Canonicalize: true, JobHCL: string(spec),
		Variables: fmt.Sprintf("name = %q\nnamespace = \"ml\"\ntier = %q\ngpus = 4\npriority = %d\n", name, tier, prio)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tenant.Jobs().Register(job, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatalf("tenant registers %s: %v", name, err)
	}
}

// allocStderr is the controller task's stderr in one allocation.
func (c *cluster) allocStderr(a *api.Allocation) string {
	r, err := c.Client.AllocFS().Cat(a, "alloc/logs/controller.stderr.0", nil)
	if err != nil {
		return err.Error()
	}
	return readAll(r)
}

// placementFailures says why Nomad placed none of a job's allocations, for
// a failure's message.
func (c *cluster) placementFailures(ns, job string) string {
	evals, _, err := c.Client.Jobs().Evaluations(job, &api.QueryOptions{Namespace: ns})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evals {
		for tg, m := range e.FailedTGAllocs {
			fmt.Fprintf(&b, "\n  %s: constraints %v, classes %v, dimensions %v", tg, m.ConstraintFiltered, m.ClassFiltered, m.DimensionExhausted)
		}
	}
	return b.String()
}
