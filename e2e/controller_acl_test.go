package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestControllerWithACLs runs the controller on a cluster with ACLs
// enabled, with a token of the policy shipped in acl/: it can do its whole
// job, and nothing it should not (namespace steward's rules are the exact
// ones there); the token never shows in its log; a token without
// scale-job gets errors that name the missing capability; and with
// -job-records=false a policy without any access to jobs' nomad/jobs/*
// variables is enough.
func TestControllerWithACLs(t *testing.T) {
	t.Parallel()
	const mgmt = "5a1e7d3c-0f4b-4c3e-9a57-2f6b1c0d9e11"
	c := startClusterWith(t, 4, testnomad.Options{ACLBootstrapToken: mgmt}, "ml")

	rules, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(t), "acl", "steward-controller.policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	token := c.aclToken
	full := token("steward-controller", string(rules))
	c.controllerToken = full
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	ctl := c.startController("ctl", policy)

	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	c.waitRecord(30*time.Second, "ml", "train", "steward_state", "preempted")
	ctl.Stop()
	if strings.Contains(ctl.Log(), full) {
		t.Errorf("the controller's token appears in its log")
	}
	if strings.Contains(ctl.Log(), "lacks") || strings.Contains(ctl.Log(), "Permission denied") {
		t.Errorf("the shipped ACL policy is missing a capability:\n%s", tail(ctl.Log(), 30))
	}

	// What the token may not do. Nomad takes the exact namespace rule
	// (steward) over "*" for job capabilities, and the closest glob over
	// namespace and path for variables.
	as := c.as(full)
	noWrite := []struct{ name, ns, path string }{
		{"a job's record in namespace steward", "steward", "nomad/jobs/steward-controller"},
		{"a request into a tenant's namespace", "ml", "steward/requests/train"},
		{"a tenant's own variable", "ml", "secrets/db"},
		{"state into a tenant's namespace", "ml", "steward/jobs/ml/train"},
	}
	for _, w := range noWrite {
		wantForbidden(t, "the controller's token writes "+w.name, putVar(as, w.ns, w.path, map[string]string{"k": "v"}))
	}
	// The token may register jobs in namespace steward: its placeholders
	// (submit-job, which Nomad cannot limit to some job IDs), as it may in
	// tenant namespaces (docs/reference/controller.md, ACLs).

	// Without scale-job (or submit-job, which Nomad also accepts for
	// scaling) the controller cannot hold work, and says what it lacks.
	weak := strings.Replace(string(rules), `"scale-job", "submit-job", `, "", 1)
	if weak == string(rules) {
		t.Fatal("could not remove scale-job from the policy text")
	}
	c.controllerToken = token("steward-weak", weak)
	weakCtl := c.startController("weak", policy)
	if _, _, err := c.Client.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	testnomad.WaitFor(t, 60*time.Second, "an error naming the missing capability", func() (bool, string) {
		return weakCtl.Contains(`lacks \"scale-job\"`) || weakCtl.Contains(`lacks "scale-job"`), tail(weakCtl.Log(), 5)
	})
	if strings.Contains(weakCtl.Log(), c.controllerToken) {
		t.Errorf("the controller's token appears in its log")
	}
	weakCtl.Stop()

	// -job-records=false with a policy that has no nomad/jobs/* rule for
	// tenants: train, submitted again by its owner (the weak controller
	// could not resume it), is preempted again for nb, and the record is
	// never touched.
	recordRule := `    path "nomad/jobs/*" {
      capabilities = ["read", "write"]
    }
`
	norec := strings.Replace(string(rules), recordRule, "", 1)
	if norec == string(rules) {
		t.Fatal("could not remove the nomad/jobs/* rule from the policy text")
	}
	c.controllerToken = token("steward-norecords", norec)
	before := c.record("ml", "train")
	norecCtl := c.startController("norec", policy, "-job-records=false")
	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	norecCtl.Stop()
	if strings.Contains(norecCtl.Log(), "lacks") || strings.Contains(norecCtl.Log(), "Permission denied") {
		t.Errorf("-job-records=false needs a nomad/jobs/* capability after all:\n%s", tail(norecCtl.Log(), 30))
	}
	if after := c.record("ml", "train"); after["steward_updated"] != before["steward_updated"] {
		t.Errorf("-job-records=false wrote the record: %v -> %v", before, after)
	}
}
