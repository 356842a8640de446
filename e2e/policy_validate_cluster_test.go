package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPolicyValidateCluster (issue 34, item 4): `steward policy validate
// -cluster` on the production-shaped cluster (ACLs, mTLS), whose GPU
// client has 2 GPUs of model "H100 80GB HBM3" in node pool gpu. The
// policy misspells tenant research's namespace, a pool's node pool and its
// model: valid HCL that governs nothing. Namespace ml runs GPU work that
// no tenant names, and a job gives tier "trainign". With the operator's
// token each misspelling is an error at its place, with the near miss,
// and the rest are warnings. With research's own token, which lists only
// its namespace and may not read node pools or nodes, nothing is called
// missing that the token cannot see: what it could not check is said, and
// the run passes.
func TestPolicyValidateCluster(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2, model: "H100 80GB HBM3", nodePool: "gpu"}}}, "research", "ml")
	c.work("train", "ml", "training", 1, 1, "priority", "40", "node_pool", "gpu")
	c.work("typo", "research", "trainign", 1, 1, "priority", "40", "node_pool", "gpu")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1, "research/typo": 1})
	pol := writePolicy(t, `tier "training" {
  priority = 40
}
tenant "research" {
  namespace = "reserach"
}
pool "h100" {
  node_pool = "gpus"
  models    = ["H100 80GB HBM"]
}
`)
	out, code := c.stewardAs(prodMgmtToken, "policy", "validate", "-cluster", pol)
	t.Logf("operator:\n%s", out)
	if code != 1 {
		t.Errorf("exit %d with the operator's token, want 1", code)
	}
	for _, want := range []string{
		pol + ":5,15-25: error: Unknown namespace", `namespace "reserach", which the cluster does not have`, `Did you mean "research"?`,
		pol + ":8,15-21: error: Unknown node pool", `Did you mean "gpu"?`,
		pol + ":9,16-31: error: Unknown GPU model", `Did you mean "H100 80GB HBM3"?`,
		`Namespace "ml" has allocations holding GPUs and no tenant block`,
		`Jobs research/typo give tier "trainign" in steward.tier`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the operator's run lacks %q", want)
		}
	}

	research := c.aclToken("team-research", fmt.Sprintf(teamRules, "research"), userACL(t, "research"))
	out, code = c.stewardAs(research, "policy", "validate", "-cluster", pol)
	t.Logf("research:\n%s", out)
	if code != 0 {
		t.Errorf("exit %d with research's token, want 0: it cannot see what is missing", code)
	}
	for _, want := range []string{"cluster: namespaces not checked", "checked against the cluster"} {
		if !strings.Contains(out, want) {
			t.Errorf("research's run lacks %q", want)
		}
	}
	for _, notWant := range []string{"Unknown namespace", `Namespace "ml"`} {
		if strings.Contains(out, notWant) {
			t.Errorf("research's run says %q of what its token cannot see", notWant)
		}
	}
	out, code = c.stewardAs(prodMgmtToken, "policy", "validate", "-cluster", "-json", pol)
	if code != 1 || !strings.Contains(out, `"summary": "Unknown GPU model"`) || !strings.Contains(out, `"line": 9`) {
		t.Errorf("-json: exit %d\n%s", code, out)
	}
}
