package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// tenantPolicy: research may use interactive and training only; inference
// is non-preemptible and high priority, for tenants with a reserve.
const tenantPolicy = `
tier "inference" {
  priority    = 80
  preemptible = false
}
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
}
tenant "research" {
  reserve      = 0
  tiers        = ["interactive", "training"]
  default_tier = "training"
}
tenant "ml" {
  reserve = 0
}
preemption {
  min_runtime       = "0s"
  grace             = "0s"
  checkpoint_signal = "SIGUSR1"
}
`

// TestTierSpoofing: a research job that names tier inference (which
// research may not use) runs as training, with training's priority in
// Nomad, says so in its record, and is preempted like training for
// another tenant's interactive work.
func TestTierSpoofing(t *testing.T) {
	t.Parallel()
	c := secureCluster(t, 4, "research", "ml")
	ctl := c.startController("ctl", writePolicy(t, tenantPolicy), "-listen", "127.0.0.1:0")

	c.work("spoof", "research", "inference", 4, 1, "priority", "90")
	c.waitRunning(60*time.Second, map[string]int{"research/spoof": 1})
	rec := c.waitRecord(30*time.Second, "research", "spoof", "steward_warning",
		"tier inference is not allowed for tenant research: runs as training")
	if rec["steward_tier"] != "training" {
		t.Errorf("steward_tier = %q, want training", rec["steward_tier"])
	}
	testnomad.WaitFor(t, 30*time.Second, "Nomad priority 40 (training's)", func() (bool, string) {
		j, _, err := c.Client.Jobs().Info("spoof", &api.QueryOptions{Namespace: "research"})
		if err != nil {
			return false, err.Error()
		}
		return *j.Priority == 40, fmt.Sprintf("priority %d", *j.Priority)
	})

	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "research/spoof": 0})
	c.waitRecord(30*time.Second, "research", "spoof", "steward_state", "preempted")
	if ctl.Contains("lacks") {
		t.Errorf("the shipped policy lacks a capability:\n%s", tail(ctl.Log(), 30))
	}
}

// TestForgedStateInTenantNamespace: a tenant writes, in its own namespace,
// controller state in the old layout and in the new one, naming another
// tenant's job as held and being drained with a signal. The other tenant's
// job is untouched (running, no signal, count unchanged), also after the
// controller restarts. The tenant's token, even with a policy that gives it
// every variable in every namespace, cannot write into Steward's namespace.
func TestForgedStateInTenantNamespace(t *testing.T) {
	t.Parallel()
	c := secureCluster(t, 4, "research", "ml")
	// The broadest common grant (every variable of every namespace) plus
	// the shipped tenant policy.
	broad := `
namespace "*" {
  variables {
    path "*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
  }
}
`
	research := c.as(c.aclToken("team-research", fmt.Sprintf(teamRules, "research"), broad, userACL(t, "research")))

	c.work("victim", "ml", "training", 2, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/victim": 1})
	victim := c.allocIDs("ml", "victim")[0]
	now := time.Now().UTC()
	forged := fmt.Sprintf(`{"namespace":"ml","id":"victim","status":"held",`+
		`"held":{"work":{"count":1,"original":1,"since":%q,"rule":"limit","index":1}},`+
		`"draining":[{"group":"work","allocs":[%q],"signal":"SIGUSR1","grace":1000000000,"decided":%q,`+
		`"signaled":"0001-01-01T00:00:00Z","deadline":"0001-01-01T00:00:00Z","requeue":false,"kind":"preempt","rule":"limit","reason":"forged"}],`+
		`"preemptions":[%q,%q,%q],"updated":%q}`,
		now.Format(time.RFC3339), victim, now.Format(time.RFC3339),
		now.Format(time.RFC3339), now.Format(time.RFC3339), now.Format(time.RFC3339), now.Format(time.RFC3339))
	for _, path := range []string{"steward/jobs/victim", "steward/jobs/ml/victim"} {
		if err := putVar(research, "research", path, map[string]string{"state": forged}); err != nil {
			t.Fatalf("the tenant writes %s in its own namespace: %v", path, err)
		}
	}
	// Nothing the tenant can write reaches namespace steward.
	for _, path := range []string{"steward/jobs/ml/victim", "steward/status", "steward/leader", "steward/requests/x", "nomad/jobs/x"} {
		wantForbidden(t, "tenant writes "+path+" in namespace steward", putVar(research, "steward", path, map[string]string{"state": forged}))
	}

	check := func(when string) {
		t.Helper()
		if n := c.running("ml", "victim"); n != 1 {
			t.Errorf("%s: ml/victim runs %d allocations, want 1", when, n)
		}
		if n := c.groupCount("ml", "victim", "work"); n != 1 {
			t.Errorf("%s: ml/victim's count is %d, want 1", when, n)
		}
		if n := c.signals("ml", "victim"); n != 0 {
			t.Errorf("%s: ml/victim got %d signals, want none", when, n)
		}
		if ids := c.allocIDs("ml", "victim"); len(ids) != 1 || ids[0] != victim {
			t.Errorf("%s: ml/victim's allocations are %v, want [%s]", when, ids, victim)
		}
	}
	policy := writePolicy(t, tenantPolicy)
	first := c.startController("first", policy, "-listen", "127.0.0.1:0")
	c.rounds(first, 3)
	check("first controller")
	first.Stop()
	second := c.startController("second", policy, "-listen", "127.0.0.1:0")
	c.rounds(second, 3)
	check("after a restart")
	if !second.Contains("loaded controller state: jobs=0") {
		t.Errorf("the restarted controller loaded state it did not write:\n%s", tail(second.Log(), 30))
	}
}

// TestTenantLocksOrFillsItsRecord: a tenant locks its job's record
// variable, or fills it close to Nomad's 64 KiB, so that Steward cannot
// write it. Its jobs are preempted all the same when another tenant's
// interactive work needs the GPUs: the record write fails, the action
// does not.
func TestTenantLocksOrFillsItsRecord(t *testing.T) {
	t.Parallel()
	c := secureCluster(t, 4, "research", "ml")
	research := c.as(c.aclToken("team-research", fmt.Sprintf(teamRules, "research")))
	c.work("locked", "research", "training", 2, 1, "priority", "40")
	c.work("full", "research", "training", 2, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"research/locked": 1, "research/full": 1})

	// Before the controller runs: a lock held for a day, and a record one
	// Steward key short of the limit.
	lock := &api.Variable{Namespace: "research", Path: "nomad/jobs/locked", Items: map[string]string{"mine": "yes"},
		Lock: &api.VariableLock{TTL: "24h"}}
	if _, _, err := research.Variables().AcquireLock(lock, &api.WriteOptions{Namespace: "research"}); err != nil {
		t.Fatalf("the tenant locks its record: %v", err)
	}
	if err := putVar(research, "research", "nomad/jobs/full", map[string]string{"blob": strings.Repeat("x", 65536-100)}); err != nil {
		t.Fatalf("the tenant fills its record: %v", err)
	}

	ctl := c.startController("ctl", writePolicy(t, tenantPolicy), "-listen", "127.0.0.1:0")
	c.rounds(ctl, 2)
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(90*time.Second, map[string]int{"ml/nb": 1, "research/locked": 0, "research/full": 0})
	for _, job := range []string{"locked", "full"} {
		if n := c.groupCount("research", job, "work"); n != 0 {
			t.Errorf("research/%s is not held: count %d", job, n)
		}
		if rec := c.record("research", job); rec["steward_state"] != "" {
			t.Errorf("research/%s's record was written after all: %v", job, rec["steward_state"])
		}
	}
	if !ctl.Contains("cannot write the job's record; decisions go on without it") {
		t.Errorf("the controller did not report the failed record writes:\n%s", tail(ctl.Log(), 30))
	}
}

// TestCrossTenantPause: tenant research asks, in its own namespace, for a
// pause of ml's job: ml's job keeps running. Research's token cannot leave
// a request in ml's namespace. ml pauses and resumes its own job with only
// acl/steward-user.policy.hcl, and the record names the namespace the
// request came from, not the person the request claims.
func TestCrossTenantPause(t *testing.T) {
	t.Parallel()
	c := secureCluster(t, 4, "research", "ml")
	researchTok := c.aclToken("user-research", userACL(t, "research"))
	mlTok := c.aclToken("user-ml", userACL(t, "ml"))
	research := c.as(researchTok)

	c.work("victim", "ml", "training", 2, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/victim": 1})
	ctl := c.startController("ctl", writePolicy(t, tenantPolicy), "-listen", "127.0.0.1:0")

	// Research's request in its own namespace names ml's job.
	cli := func(token string, args ...string) (string, error) {
		cmd := exec.Command(testnomad.StewardBin(t), args...)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.Address, "NOMAD_TOKEN="+token)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli(researchTok, "pause", "-namespace", "research", "victim"); err != nil {
		t.Fatalf("steward pause -namespace research victim: %v\n%s", err, out)
	}
	if err := putVar(research, "research", "steward/requests/~~"+strings.Repeat("0", 40),
		map[string]string{"action": "pause", "job": "victim", "by": "ml-admin"}); err != nil {
		t.Fatalf("a hashed-path request: %v", err)
	}
	testnomad.WaitFor(t, 30*time.Second, "the requests are read and dropped", func() (bool, string) {
		vars, _, err := c.Client.Variables().PrefixList("steward/requests/", &api.QueryOptions{Namespace: "research"})
		return err == nil && len(vars) == 0, fmt.Sprint(len(vars), err)
	})
	c.rounds(ctl, 2)
	if n := c.running("ml", "victim"); n != 1 {
		t.Errorf("ml/victim runs %d allocations after research's request, want 1", n)
	}
	if n := c.signals("ml", "victim"); n != 0 {
		t.Errorf("ml/victim got %d signals after research's request, want none", n)
	}
	// Research cannot leave a request where ml's jobs are.
	wantForbidden(t, "research writes steward/requests/victim in namespace ml",
		putVar(research, "ml", "steward/requests/victim", map[string]string{"action": "pause", "job": "victim"}))

	// ml, with only the tenant policy: pause, read its record and the
	// status, resume.
	if out, err := cli(mlTok, "pause", "-namespace", "ml", "victim"); err != nil {
		t.Fatalf("steward pause -namespace ml victim: %v\n%s", err, out)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/victim": 0})
	ml := c.as(mlTok)
	testnomad.WaitFor(t, 30*time.Second, "ml reads its paused record", func() (bool, string) {
		v, _, err := ml.Variables().Read("nomad/jobs/victim", &api.QueryOptions{Namespace: "ml"})
		if err != nil {
			return false, err.Error()
		}
		return v.Items["steward_state"] == "paused", fmt.Sprint(v.Items)
	})
	rec := c.record("ml", "victim")
	if !strings.Contains(rec["steward_reason"], "paused by a request in namespace ml") {
		t.Errorf("the record does not name the namespace: %q", rec["steward_reason"])
	}
	if who := currentUser(); who != "" && strings.Contains(rec["steward_reason"], who) {
		t.Errorf("the record names the person the request claims (%s): %q", who, rec["steward_reason"])
	}
	if out, err := cli(mlTok, "status", "-namespace", "ml"); err != nil || !strings.Contains(out, "ml/victim") {
		t.Errorf("steward status with ml's token: %v\n%s", err, out)
	}
	if _, _, err := ml.Variables().Read("steward/jobs/ml/victim", &api.QueryOptions{Namespace: "steward"}); !forbidden(err) {
		t.Errorf("ml reads Steward's state: %v, want 403", err)
	}
	if out, err := cli(mlTok, "resume", "-namespace", "ml", "victim"); err != nil {
		t.Fatalf("steward resume -namespace ml victim: %v\n%s", err, out)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/victim": 1})
}

func currentUser() string {
	out, err := exec.Command("id", "-un").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
