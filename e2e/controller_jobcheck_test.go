package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

const jobCheckPolicy = twoTiers + `
tenant "ml" {
  reserve = 0
  limit   = 2
}
tenant "rnd" {
  reserve = 0
}
preemption {
  min_runtime       = "0s"
  grace             = "5s"
  checkpoint_signal = "SIGUSR1"
}
`

// tenantRules is what a team's token may do in its own namespace: run and
// plan jobs there, and read where the leader answers checks.
const tenantRules = `
namespace "%s" {
  policy = "write"
}
namespace "steward" {
  variables {
    path "steward/controller" {
      capabilities = ["read"]
    }
  }
}
`

var checkAddrRE = regexp.MustCompile(`serving /metrics and /healthz: address=(\S+)`)

// TestJobCheck: `steward job check` with a tenant's token says what Steward
// would do with a jobspec now — a valid job runs, one over its tenant's
// limit waits with the numbers, one that needs GPUs preempts another
// tenant's training (named by tenant and tier only), a typo'd tier is named
// and exits 1, a gang says so — and a token of another namespace is
// refused.
func TestJobCheck(t *testing.T) {
	t.Parallel()
	const mgmt = "7c0ffee0-0f4b-4c3e-9a57-2f6b1c0d9e22"
	c := startClusterWith(t, 4, testnomad.Options{ACLBootstrapToken: mgmt}, "ml", "rnd")
	token := c.aclToken
	c.controllerToken = mgmt
	mlToken := token("team-ml", fmt.Sprintf(tenantRules, "ml"))
	rndToken := token("team-rnd", fmt.Sprintf(tenantRules, "rnd"))

	ctl := c.startController("ctl", writePolicy(t, jobCheckPolicy), "-listen", "127.0.0.1:0")
	c.work("train", "rnd", "training", 3, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"rnd/train": 1})
	testnomad.WaitFor(t, 30*time.Second, "the controller serving checks", func() (bool, string) {
		return checkAddrRE.MatchString(ctl.Log()), tail(ctl.Log(), 5)
	})
	spec := filepath.Join(testnomad.RepoRoot(t), "jobs", "gpu-work.nomad.hcl")
	check := func(token, ns string, vars ...string) (string, int) {
		args := []string{"job", "check", "-namespace", ns}
		for _, v := range vars {
			args = append(args, "-var", v)
		}
		cmd := exec.Command(testnomad.StewardBin(t), append(args, spec)...)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.Address, "NOMAD_TOKEN="+token)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("steward job check: %v", err)
		}
		return string(out), code
	}

	cases := []struct {
		name     string
		token    string
		vars     []string
		wantCode int
		want     []string
	}{
		{name: "valid job runs", token: mlToken, vars: []string{"name=nb", "namespace=ml", "tier=interactive", "gpus=1"},
			want: []string{"Tenant            = ml", "Tier              = interactive", "Priority          = 60 (the jobspec says 50; Steward sets 60)",
				"Checkpoint Signal = SIGUSR1", "Grace             = 5s", "work   1       1          run"}},
		{name: "over its tenant's limit waits", token: mlToken, vars: []string{"name=big", "namespace=ml", "tier=interactive", "gpus=3"},
			want: []string{"wait", "tenant ml holds 0 GPUs, limit 2: 3 more would exceed it"}},
		{name: "needs another tenant's GPUs preempts", token: mlToken, vars: []string{"name=nb2", "namespace=ml", "tier=interactive", "gpus=2"},
			want: []string{"preempt", "Preempted for group work", "(another tenant's job)  rnd     training  3"}},
		{name: "typo'd tier is refused and named", token: mlToken, wantCode: 1,
			vars: []string{"name=typo", "namespace=ml", "tier=interactiv", "gpus=1"},
			want: []string{"Refused Meta", `tier "interactiv" is not defined (did you mean interactive?): runs as training`}},
		{name: "gang", token: mlToken, vars: []string{"name=gang", "namespace=ml", "tier=interactive", "gpus=1", "count=2", "gang=true"},
			want: []string{"Gang              = true", "work   2       1"}},
		{name: "another tenant's token is refused", token: rndToken, wantCode: 255,
			vars: []string{"name=nb", "namespace=ml", "tier=interactive", "gpus=1"}, want: []string{"403"}},
	}
	for _, tc := range cases {
		ns := "ml"
		if tc.token == rndToken {
			ns = "rnd"
		}
		out, code := check(tc.token, ns, tc.vars...)
		if code != tc.wantCode {
			t.Errorf("%s: exit %d, want %d:\n%s", tc.name, code, tc.wantCode, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
	}
	// A check changes nothing.
	if jobs, _, err := c.Client.Jobs().List(&api.QueryOptions{Namespace: "ml"}); err != nil || len(jobs) != 0 {
		t.Errorf("a check registered jobs: %v %v", jobs, err)
	}
}
