package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// The notify blocks' secrets reach the shipped controller job from a
// Nomad variable only its job (and operators) can read.

const notifyEnvPolicy = twoTiers + `
preemption {
  min_runtime       = "0s"
  grace             = "0s"
  checkpoint_signal = "SIGUSR1"
}
notify "ops" {
  url_env          = "STEWARD_HOOK_URL"
  headers_from_env = { Authorization = "STEWARD_HOOK_AUTH" }
  events           = ["preempt"]
  attempts         = 100
}
`

// secretHook is a webhook receiver on loopback that keeps each request's
// query and Authorization header, as they arrived.
type secretHook struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []string // "query|authorization|body"
}

func newSecretHook(t *testing.T) *secretHook {
	h := &secretHook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.reqs = append(h.reqs, r.URL.RawQuery+"|"+r.Header.Get("Authorization")+"|"+string(body))
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *secretHook) received() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.reqs...)
}

// TestControllerJobNotifySecrets: the shipped controller job, on a cluster
// with ACLs on, starts without its notify secrets variable (nothing waits
// for it). Its policy then names url_env and headers_from_env: the
// running controller keeps its last policy, since they are not set. The
// operator puts the secrets in nomad/jobs/steward-controller/controller/controller:
// the task restarts with them, an item that is no environment name is
// skipped and logged by name, and a preemption's message reaches the
// loopback receiver at the URL and with the Authorization header as
// written, quotes, backslashes, "$" and "=" included. No value is logged.
// A tenant can neither read nor write the variable.
func TestControllerJobNotifySecrets(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 1}}, controllerNodes: 1}, "ml")
	if _, err := c.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "steward-controller",
		Rules:  shippedACL(t, "steward-controller.policy.hcl"),
		JobACL: &api.JobACL{Namespace: "steward", JobID: "steward-controller"}}, nil); err != nil {
		t.Fatalf("bind the controller policy to the job: %v", err)
	}
	putVar := func(path string, items map[string]string) {
		t.Helper()
		v := &api.Variable{Namespace: "steward", Path: path, Items: items}
		if _, _, err := c.Client.Variables().Update(v, &api.WriteOptions{Namespace: "steward"}); err != nil {
			t.Fatalf("put %s: %v", path, err)
		}
	}
	putVar("nomad/jobs/steward-controller", map[string]string{"policy": fmt.Sprintf(faultPolicy, "0s")})
	spec := filepath.Join(testnomad.RepoRoot(t), "jobs", "steward-controller.nomad.hcl")
	c.RegisterJobFile(t, spec, map[string]string{"driver": "raw_exec", "steward_bin": testnomad.StewardBin(t),
		"count": "1", "user": "nobody", "node_pool": "steward"})
	const leading = "leading: this controller acts"
	testnomad.WaitFor(t, 90*time.Second, "the controller leads without its secrets variable", func() (bool, string) {
		l := c.controllerJobLogs()
		return strings.Contains(l, leading), tail(l, 10) + c.controllerJobEvents()
	})

	putVar("nomad/jobs/steward-controller", map[string]string{"policy": notifyEnvPolicy})
	testnomad.WaitFor(t, 60*time.Second, "the reload without the secrets is refused by name", func() (bool, string) {
		l := c.controllerJobLogs()
		return strings.Contains(l, "url_env STEWARD_HOOK_URL is not set"), tail(l, 10)
	})

	h := newSecretHook(t)
	query := `team=ml&sig=a=b$c&x="q"\z`
	auth := `Bearer "t\ok=en" $NOMAD_ALLOC_ID ${HOME} a=b`
	putVar("nomad/jobs/steward-controller/controller/controller", map[string]string{
		"STEWARD_HOOK_URL":  h.srv.URL + "/hook?" + query,
		"STEWARD_HOOK_AUTH": auth,
		"hook-auth":         "not an environment name",
	})
	testnomad.WaitFor(t, 90*time.Second, "the task restarts with its secrets, skips hook-auth by name, and leads", func() (bool, string) {
		l := c.controllerJobLogs()
		return strings.Contains(l, "were not passed to the controller") && strings.Contains(l, "hook-auth") &&
			strings.Count(l, leading) >= 2, tail(l, 10) + c.controllerJobEvents()
	})

	c.work("train", "ml", "training", 1, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 1, 1, "priority", "60")
	var got []string
	testnomad.WaitFor(t, 90*time.Second, "the preemption's message arrives", func() (bool, string) {
		got = h.received()
		return len(got) > 0, tail(c.controllerJobLogs(), 10)
	})
	parts := strings.SplitN(got[0], "|", 3)
	if parts[0] != query {
		t.Errorf("query %q, want %q (url_env, byte for byte)", parts[0], query)
	}
	if parts[1] != auth {
		t.Errorf("Authorization %q, want %q (headers_from_env, byte for byte)", parts[1], auth)
	}
	if !strings.Contains(parts[2], `"action":"preempt"`) || !strings.Contains(parts[2], `"train"`) {
		t.Errorf("message %s, want the preemption of ml/train", parts[2])
	}
	l := c.controllerJobLogs()
	for _, secret := range []string{`t\\ok=en`, `t\ok=en`, "sig=a=b"} {
		if strings.Contains(l, secret) {
			t.Errorf("the controller's log holds a secret (%q):\n%s", secret, tail(l, 20))
		}
	}

	// Tenants: no rule in namespace steward, so neither read nor write.
	tenant := c.as(c.aclToken("team-ml", fmt.Sprintf(tenantRules, "ml"), userACL(t, "ml")))
	if v, _, err := tenant.Variables().Read("nomad/jobs/steward-controller/controller/controller",
		&api.QueryOptions{Namespace: "steward"}); err == nil {
		t.Errorf("a tenant read the controller's secrets: %v", v.Items)
	}
	if _, _, err := tenant.Variables().Update(&api.Variable{Namespace: "steward",
		Path: "nomad/jobs/steward-controller/controller/controller", Items: map[string]string{"STEWARD_HOOK_URL": "http://evil/"}},
		&api.WriteOptions{Namespace: "steward"}); err == nil {
		t.Errorf("a tenant wrote the controller's secrets")
	}
}
