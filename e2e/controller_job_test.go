package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestControllerAsNomadJob runs jobs/steward-controller.nomad.hcl the way
// docs/install.md tells an operator to, in its raw_exec variant (the
// docker one: TestControllerAsDockerJob), on the production-shaped cluster
// (a server and four clients as processes of their own, ACLs, mTLS): in
// namespace steward, on node pool steward (two nodes no tenant uses), its
// rights those of acl/steward-controller.policy.hcl bound to the job's
// workload identity and read from a file through the task API socket, as
// its own host user (here nobody), the policy in a Nomad variable, two
// copies on different nodes of which one leads, and checks served over TLS
// with the operator's certificate. Tenants, with tokens of
// acl/steward-user.policy.hcl, submit work that it governs, and check a
// job over TLS; a policy change through the variable reloads it (a bad one
// is refused, the good one kept).
func TestControllerAsNomadJob(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{controllerNodes: 2}, "ml")
	if _, err := c.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "steward-controller-job",
		Rules:  shippedACL(t, "steward-controller.policy.hcl"),
		JobACL: &api.JobACL{Namespace: "steward", JobID: "steward-controller"}}, nil); err != nil {
		t.Fatalf("bind the controller policy to the job: %v", err)
	}
	good := fmt.Sprintf(faultPolicy, "0s")
	putPolicy := func(text string) {
		t.Helper()
		v := &api.Variable{Namespace: "steward", Path: "nomad/jobs/steward-controller", Items: map[string]string{"policy": text}}
		if _, _, err := c.Client.Variables().Update(v, &api.WriteOptions{Namespace: "steward"}); err != nil {
			t.Fatal(err)
		}
	}
	putPolicy(good)
	cert, key := controllerCert(t, c.TLS, "nobody")
	c.RegisterJobFile(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "steward-controller.nomad.hcl"), map[string]string{
		"driver": "raw_exec", "steward_bin": testnomad.StewardBin(t), "node_pool": "steward", "count": "2",
		"tls_cert": cert, "tls_key": key,
		// A user of its own, as the jobspec asks ("steward" by default);
		// the test's hosts have nobody.
		"user": "nobody"})
	c.waitRunning(60*time.Second, map[string]int{"steward/steward-controller": 2})

	// Two copies, on two nodes of pool steward.
	nodes := map[string]bool{}
	for _, id := range c.allocIDs("steward", "steward-controller") {
		a := c.alloc(id)
		n, _, err := c.Client.Nodes().Info(a.NodeID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n.NodePool != "steward" {
			t.Errorf("controller copy %s on node %s of pool %s, want pool steward", a.Name, n.Name, n.NodePool)
		}
		nodes[n.ID] = true
	}
	if len(nodes) != 2 {
		t.Errorf("the two controller copies share a node: %v", nodes)
	}
	testnomad.WaitFor(t, 60*time.Second, "one copy leads", func() (bool, string) {
		l := c.controllerJobLogs()
		return strings.Count(l, "leading: this controller acts") == 1 && strings.Count(l, "waiting to lead") == 2, tail(l, 10)
	})

	// A tenant submits with a token of the shipped user policy.
	mlToken := c.aclToken("team-ml", fmt.Sprintf(tenantRules, "ml"), userACL(t, "ml"))
	tenant := c.as(mlToken)
	submit := func(name, tier string, prio int) {
		t.Helper()
		job, err := c.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{Canonicalize: true,
			JobHCL:    mustRead(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "gpu-work.nomad.hcl")),
			Variables: fmt.Sprintf("name = %q\nnamespace = \"ml\"\ntier = %q\ngpus = 4\npriority = %d\n", name, tier, prio)})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := tenant.Jobs().Register(job, &api.WriteOptions{Namespace: "ml"}); err != nil {
			t.Fatalf("tenant registers %s: %v", name, err)
		}
	}
	submit("train", "training", 40)
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	submit("nb", "interactive", 60)
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	c.waitRecord(30*time.Second, "ml", "train", "steward_state", "preempted")
	if l := c.controllerJobLogs(); strings.Contains(l, "Permission denied") || strings.Contains(l, "lacks") {
		var bad []string
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(line, "Permission denied") || strings.Contains(line, "lacks") {
				bad = append(bad, line)
			}
		}
		t.Errorf("the job's identity lacks a capability:\n%s", strings.Join(bad, "\n"))
	}

	// The tenant checks a job over TLS, verified with the operator's CA.
	spec := filepath.Join(testnomad.RepoRoot(t), "jobs", "gpu-work.nomad.hcl")
	cmd := exec.Command(testnomad.StewardBin(t), "job", "check", "-controller-ca", c.TLS.CA, "-namespace", "ml",
		"-var", "name=probe", "-var", "namespace=ml", "-var", "tier=interactive", "-var", "gpus=1", spec)
	cmd.Env = append(os.Environ(), c.nomadEnv(mlToken)...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Tier              = interactive") {
		t.Errorf("a tenant's job check over TLS: %v\n%s", err, out)
	}

	putPolicy(strings.Replace(good, "priority    = 40", "priority    = 400", 1))
	testnomad.WaitFor(t, 60*time.Second, "the bad policy is refused on reload", func() (bool, string) {
		return strings.Contains(c.controllerJobLogs(), "policy reload failed: keeping the last good policy"), ""
	})
	putPolicy(good)
	testnomad.WaitFor(t, 60*time.Second, "the good policy is reloaded", func() (bool, string) {
		return strings.Contains(c.controllerJobLogs(), "policy reloaded"), ""
	})
}

// controllerCert copies the cluster's server certificate (SANs localhost
// and 127.0.0.1, signed by the cluster's CA) and its key for the
// controller's check listener, as docs/install.md says: the key readable
// by the controller's user alone.
func controllerCert(t *testing.T, tls *testnomad.TLS, username string) (cert, key string) {
	t.Helper()
	u, err := user.Lookup(username)
	if err != nil {
		t.Fatalf("user %s: %v", username, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, f := range []struct{ from, to string }{{tls.ServerCert, cert}, {tls.ServerKey, key}} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.to, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f.to, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key
}
