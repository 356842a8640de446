package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// The multi-tenant tests run on an agent with ACLs enabled: the
// controller with a token of the shipped acl/steward-controller.policy.hcl,
// each tenant with tokens of its own, never the management token.

// secureCluster starts a cluster with ACLs on; c.Client keeps the
// management token (the operator), and controllers get the shipped policy.
func secureCluster(t *testing.T, gpus int, namespaces ...string) *cluster {
	t.Helper()
	c := startClusterWith(t, gpus, testnomad.Options{ACLBootstrapToken: secureMgmtToken}, namespaces...)
	c.controllerToken = c.aclToken("steward-controller", shippedACL(t, "steward-controller.policy.hcl"))
	return c
}

// secureMgmtToken is secureCluster's management token (the operator's).
const secureMgmtToken = "3d5e1c2a-8b7f-4e6d-9c0a-1f2e3d4c5b6a"

// shippedACL is the text of a policy in acl/.
func shippedACL(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(t), "acl", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// userACL is acl/steward-user.policy.hcl adapted to a team's namespace,
// as the file says to.
func userACL(t testing.TB, ns string) string {
	t.Helper()
	rules := shippedACL(t, "steward-user.policy.hcl")
	adapted := strings.ReplaceAll(rules, `namespace "research"`, `namespace "`+ns+`"`)
	if ns != "research" && adapted == rules {
		t.Fatal("acl/steward-user.policy.hcl has no namespace \"research\" block to adapt")
	}
	return adapted
}

// teamRules is what teams commonly get in their own namespace: run jobs,
// and every variable (the "path \"*\"" grant).
const teamRules = `
namespace "%s" {
  policy = "write"
  variables {
    path "*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
  }
}
`

// aclToken applies a policy of these rules and returns the secret of a
// client token with it.
func (c *cluster) aclToken(name string, rules ...string) string {
	c.t.Helper()
	var names []string
	for i, r := range rules {
		n := name
		if len(rules) > 1 {
			n = name + "-" + string(rune('a'+i))
		}
		if _, err := c.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: n, Rules: r}, nil); err != nil {
			c.t.Fatalf("apply ACL policy %s: %v\n%s", n, err, r)
		}
		names = append(names, n)
	}
	tok, _, err := c.Client.ACLTokens().Create(&api.ACLToken{Name: name, Type: "client", Policies: names}, nil)
	if err != nil {
		c.t.Fatalf("create token %s: %v", name, err)
	}
	return tok.SecretID
}

// as is an API client with another token.
func (c *cluster) as(token string) *api.Client {
	c.t.Helper()
	cl, err := api.NewClient(c.APIConfig(token))
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// putVar writes a variable with a client, as its token allows.
func putVar(cl *api.Client, ns, path string, items map[string]string) error {
	_, _, err := cl.Variables().Create(&api.Variable{Namespace: ns, Path: path, Items: items}, &api.WriteOptions{Namespace: ns})
	return err
}

func forbidden(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == http.StatusForbidden ||
		err != nil && strings.Contains(err.Error(), "403")
}

// wantForbidden fails unless err is Nomad's 403.
func wantForbidden(t testing.TB, what string, err error) {
	t.Helper()
	if !forbidden(err) {
		t.Errorf("%s: got %v, want 403 (Permission denied)", what, err)
	}
}

// signals counts the Signaling task events of a job's allocations.
func (c *cluster) signals(ns, job string) int {
	allocs, _, err := c.Client.Jobs().Allocations(job, true, &api.QueryOptions{Namespace: ns})
	if err != nil {
		c.t.Fatalf("allocations of %s/%s: %v", ns, job, err)
	}
	n := 0
	for _, stub := range allocs {
		a, _, err := c.Client.Allocations().Info(stub.ID, &api.QueryOptions{Namespace: ns})
		if err != nil {
			c.t.Fatalf("allocation %s: %v", stub.ID, err)
		}
		for _, ts := range a.TaskStates {
			for _, e := range ts.Events {
				if e.Type == api.TaskSignaling {
					n++
				}
			}
		}
	}
	return n
}

// groupCount is a job group's count as Nomad has it.
func (c *cluster) groupCount(ns, job, group string) int {
	j, _, err := c.Client.Jobs().Info(job, &api.QueryOptions{Namespace: ns})
	if err != nil {
		c.t.Fatalf("job %s/%s: %v", ns, job, err)
	}
	for _, g := range j.TaskGroups {
		if *g.Name == group {
			return *g.Count
		}
	}
	c.t.Fatalf("job %s/%s has no group %s", ns, job, group)
	return -1
}

// rounds waits until the controller (started with -listen 127.0.0.1:0)
// has finished n more rounds, counted by its steward_reconcile_seconds
// histogram: whatever it would do by then is done.
func (c *cluster) rounds(p *controllerProc, n int) {
	c.t.Helper()
	count := func() int {
		m := listenRE.FindStringSubmatch(p.Log())
		if m == nil {
			return -1
		}
		resp, err := http.Get("http://" + m[1] + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got := roundsRE.FindStringSubmatch(string(b))
		if got == nil {
			return 0
		}
		v, _ := strconv.Atoi(got[1])
		return v
	}
	start := -1
	testnomad.WaitFor(c.t, 60*time.Second, fmt.Sprintf("%d rounds of controller %s", n, p.name), func() (bool, string) {
		now := count()
		if start < 0 {
			start = now
			return false, "no metrics yet"
		}
		return now >= start+n, fmt.Sprintf("%d rounds", now-start)
	})
}

var roundsRE = regexp.MustCompile(`(?m)^steward_reconcile_seconds_count (\d+)`)
