package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/cli"

	"github.com/gpu-steward/steward/jobs"
)

func TestSetupStepStates(t *testing.T) {
	cases := []struct {
		name          string
		apply         bool
		exists, same  bool
		want          string
		changed, lack bool
	}{
		{"apply: made where missing", true, false, false, "created", true, false},
		{"apply: rewritten where different", true, true, false, "updated", true, false},
		{"apply: left as it is", true, true, true, "unchanged", false, false},
		{"check: missing", false, false, false, "missing", false, true},
		{"check: different", false, true, false, "differs", false, true},
		{"check: in place", false, true, true, "ok", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := (&setup{apply: tc.apply}).result("x", tc.exists, tc.same, "")
			if st.State != tc.want || st.changed() != tc.changed || st.lacking() != tc.lack {
				t.Errorf("state %s (changed %t, lacking %t), want %s (%t, %t)", st.State, st.changed(), st.lacking(), tc.want, tc.changed, tc.lack)
			}
		})
	}
}

// An invalid policy stops setup before it reads or writes anything in
// Nomad: the address given is one where nothing listens.
func TestSetupRefusesInvalidPolicy(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "policy.hcl")
	if err := os.WriteFile(bad, []byte("tier \"training\" {\n  priority = \"high\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"a mistake with its place", bad, bad + ":2,"},
		{"a JSON policy the job cannot render", filepath.Join(dir, "p.json"), "reads its policy as HCL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ui := cli.NewMockUi()
			code := (&OperatorSetupCommand{Meta: Meta{UI: ui}}).Run([]string{"-address", "http://127.0.0.1:1", "-policy", tc.file})
			errOut := ui.ErrorWriter.String()
			if code != setupError || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 1 naming %q", code, errOut, tc.want)
			}
			if strings.Contains(errOut, "connect") || strings.Contains(errOut, "127.0.0.1:1") {
				t.Errorf("setup talked to Nomad before refusing the policy:\n%s", errOut)
			}
		})
	}
}

// The jobspec setup registers is the shipped file, with the variables
// `nomad job run -var` and `-var-file` take.
func TestSetupJobspecIsTheShippedOne(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "jobs", "steward-controller.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != jobs.Controller {
		t.Fatal("jobs.Controller is not jobs/steward-controller.nomad.hcl")
	}
	for _, v := range []string{"driver", "image", "steward_bin", "nomad_addr", "user", "tls_cert", "tls_key", "node_pool", "pprof", "count", "election", "lock_ttl"} {
		if !strings.Contains(jobs.Controller, "variable \""+v+"\"") {
			t.Errorf("the jobspec has no variable %q", v)
		}
	}
}
