package e2e

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// startShippedACLCluster starts a cluster with ACLs enabled: the test's
// own client holds the management token, and controllers get a token of
// the shipped acl/steward-controller.policy.hcl, as an operator would set
// them up.
func startShippedACLCluster(t *testing.T, gpus int, namespaces ...string) *cluster {
	t.Helper()
	mgmt := uuid(t)
	c := startClusterWith(t, gpus, testnomad.Options{ACLBootstrapToken: mgmt}, namespaces...)
	rules, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(t), "acl", "steward-controller.policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	c.controllerToken = c.aclToken("steward-controller", string(rules))
	return c
}

func uuid(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
