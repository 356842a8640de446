package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestControllerAsNomadJob runs jobs/steward-controller.nomad.hcl the way
// the README tells an operator to, on an agent with ACLs: in namespace
// steward, its rights those of acl/steward-controller.policy.hcl bound to
// the job's workload identity (read from a file, -token-file), the policy
// in a Nomad variable, two copies of which one leads. It enforces the
// policy, and a policy change through the variable reloads it (a bad one
// is refused, the good one kept).
func TestControllerAsNomadJob(t *testing.T) {
	t.Parallel()
	const mgmt = "9e8d7c6b-5a49-4382-a1b0-c9d8e7f6a5b4"
	c := startClusterWith(t, 4, testnomad.Options{ACLBootstrapToken: mgmt}, "ml")
	if _, err := c.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "steward-controller",
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
	c.RegisterJobFile(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "steward-controller.nomad.hcl"), map[string]string{
		"steward_bin": testnomad.StewardBin(t), "nomad_addr": c.Address, "count": "2",
		// A user of its own, as the jobspec asks ("steward" by default);
		// the test agent's hosts have nobody.
		"user": "nobody"})
	c.waitRunning(60*time.Second, map[string]int{"steward/steward-controller": 2})

	logs := func() string {
		var all []string
		for _, id := range c.allocIDs("steward", "steward-controller") {
			a, _, err := c.Client.Allocations().Info(id, &api.QueryOptions{Namespace: "steward"})
			if err != nil {
				continue
			}
			b, err := c.Client.AllocFS().Cat(a, "alloc/logs/controller.stderr.0", nil)
			if err != nil {
				continue
			}
			buf := new(strings.Builder)
			_, _ = fmt.Fprint(buf, readAll(b))
			all = append(all, buf.String())
		}
		return strings.Join(all, "\n")
	}
	testnomad.WaitFor(t, 60*time.Second, "one copy leads", func() (bool, string) {
		l := logs()
		return strings.Count(l, "leading: this controller acts") == 1 && strings.Count(l, "waiting to lead") == 2, l
	})

	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	c.waitRecord(30*time.Second, "ml", "train", "steward_state", "preempted")
	if l := logs(); strings.Contains(l, "Permission denied") || strings.Contains(l, "lacks") {
		var bad []string
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(line, "Permission denied") || strings.Contains(line, "lacks") {
				bad = append(bad, line)
			}
		}
		t.Errorf("the job's identity lacks a capability:\n%s", strings.Join(bad, "\n"))
	}

	putPolicy(strings.Replace(good, "priority    = 40", "priority    = 400", 1))
	testnomad.WaitFor(t, 60*time.Second, "the bad policy is refused on reload", func() (bool, string) {
		l := logs()
		return strings.Contains(l, "policy reload failed: keeping the last good policy"), ""
	})
	putPolicy(good)
	testnomad.WaitFor(t, 60*time.Second, "the good policy is reloaded", func() (bool, string) {
		return strings.Contains(logs(), "policy reloaded"), ""
	})
}
