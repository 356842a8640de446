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
// job; the token never shows in its log; and a token without scale-job
// gets errors that name the missing capability.
func TestControllerWithACLs(t *testing.T) {
	t.Parallel()
	const mgmt = "5a1e7d3c-0f4b-4c3e-9a57-2f6b1c0d9e11"
	c := startClusterWith(t, 4, testnomad.Options{ACLBootstrapToken: mgmt}, "ml")

	rules, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(t), "acl", "steward-controller.policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	token := func(name, rules string) string {
		if _, err := c.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: name, Rules: rules}, nil); err != nil {
			t.Fatalf("apply ACL policy %s: %v", name, err)
		}
		tok, _, err := c.Client.ACLTokens().Create(&api.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		return tok.SecretID
	}
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
	if strings.Contains(ctl.Log(), "lacks") || strings.Contains(ctl.Log(), "403") {
		t.Errorf("the shipped ACL policy is missing a capability:\n%s", tail(ctl.Log(), 30))
	}

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
}
