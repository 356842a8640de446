package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testPolicy is the policy context of these tests.
const testPolicy = `
defaults {
  tier = "training"
}
tier "inference" {
  priority    = 90
  preemptible = false
}
tier "training" {
  priority = 40
}
tenant "research" {
  reserve = 2
}
pool "serving" {
  owners = ["inference"]
}
idle "notebooks" {
  tiers = ["training"]
  after = "15m"
}
preemption {
  grace = "2m"
}
`

func newTestChecker(t *testing.T) *Checker {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "example.hcl"), []byte(testPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := NewChecker(root, "example.hcl", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCheck proves each check refuses what the real parser refuses: a
// checker that passes everything would keep no docs example valid.
func TestCheck(t *testing.T) {
	c := newTestChecker(t)
	for _, tc := range []struct {
		name     string
		text     string
		whole    bool // a whole file, not a docs snippet
		kind     Kind
		wantErr  string // "" for valid
		wantNote string
	}{
		// The README's old snippet: several attributes in a one-line block.
		{name: "one-line block with two attributes", text: `tier "x" { priority = 90  preemptible = false }`,
			wantErr: "Invalid single-argument block definition"},
		{name: "policy fragment using the context's tiers", text: `pool "gpu" { owners = ["inference"] }`, kind: KindPolicy},
		{name: "policy fragment replacing a context block", text: "tier \"training\" {\n  priority = 30\n}", kind: KindPolicy},
		{name: "policy fragment replacing the preemption block", text: "preemption {\n  grace = \"1m\"\n}", kind: KindPolicy},
		{name: "policy fragment out of range", text: `tier "x" { priority = 500 }`, kind: KindPolicy, wantErr: "must be between 1 and 100"},
		{name: "policy fragment naming an unknown tier", text: `pool "gpu" { owners = ["inferense"] }`, kind: KindPolicy, wantErr: "inferense"},
		{name: "policy fragment with an unknown attribute", text: `tier "x" { prio = 5 }`, kind: KindPolicy, wantErr: "prio"},
		{name: "whole policy file gets no context", text: `pool "gpu" { owners = ["inference"] }`, whole: true, kind: KindPolicy, wantErr: "tier"},

		{name: "job", text: "job \"j\" {\n  meta = { \"steward.tier\" = \"training\" }\n}", kind: KindJob},
		{name: "job with an unknown attribute", text: "job \"j\" {\n  priorty = 5\n}", kind: KindJob, wantErr: "priorty"},
		{name: "job with variables", text: "variable \"n\" {\n  default = 2\n}\njob \"j\" {\n  group \"g\" {\n    count = var.n\n  }\n}", kind: KindJob},
		{name: "group", text: "group \"g\" {\n  count = 2\n}", kind: KindGroup},
		{name: "steward-exec task", text: "task \"t\" {\n  driver = \"steward-exec\"\n  config {\n    command = \"/bin/train\"\n    args = [\"${NOMAD_TASK_DIR}/x\"]\n  }\n}", kind: KindTask},
		{name: "steward-exec task without command", text: "task \"t\" {\n  driver = \"steward-exec\"\n  config {\n    args = []\n  }\n}", kind: KindTask, wantErr: "command"},
		{name: "steward-exec task with an unknown option", text: "task \"t\" {\n  driver = \"steward-exec\"\n  config {\n    command = \"x\"\n    checkpoint_sig = \"SIGUSR1\"\n  }\n}", kind: KindTask, wantErr: "checkpoint_sig"},
		{name: "steward-exec task with a mistyped option", text: "task \"t\" {\n  driver = \"steward-exec\"\n  config {\n    command = \"x\"\n    signal_group = \"often\"\n  }\n}", kind: KindTask, wantErr: "signal_group"},
		{name: "raw_exec task with an unknown option", text: "task \"t\" {\n  driver = \"raw_exec\"\n  config {\n    command = \"x\"\n    cmd = \"y\"\n  }\n}", kind: KindTask, wantErr: "cmd"},
		{name: "task with an unknown attribute", text: "task \"t\" {\n  drivr = \"raw_exec\"\n}", kind: KindTask, wantErr: "drivr"},
		{name: "task blocks", text: "template {\n  destination = \"local/x\"\n  data = \"x\"\n}\nresources {\n  device \"nvidia/gpu\" { count = 1 }\n}", kind: KindTaskPart},
		{name: "task block with an unknown attribute", text: "template {\n  destnation = \"local/x\"\n}", kind: KindTaskPart, wantErr: "destnation"},

		{name: "steward-gpu plugin", text: "plugin \"steward-gpu\" {\n  config {\n    backend = \"sim\"\n    sim_state_dir = \"/var/lib/steward-doccheck-test\"\n  }\n}", kind: KindPlugin},
		{name: "steward-exec plugin", text: "plugin \"steward-exec\" {\n  config {\n    checkpoint_root = \"/var/lib/steward-doccheck-test\"\n  }\n}", kind: KindPlugin},
		{name: "plugin with an unknown option", text: "plugin \"steward-gpu\" {\n  config {\n    bakend = \"sim\"\n  }\n}", kind: KindPlugin, wantErr: "bakend"},
		{name: "plugin with a mistyped option", text: "plugin \"steward-gpu\" {\n  config {\n    sim_count = \"many\"\n  }\n}", kind: KindPlugin, wantErr: "sim_count"},
		{name: "plugin with a value it refuses", text: "plugin \"steward-gpu\" {\n  config {\n    backend = \"cuda\"\n  }\n}", kind: KindPlugin, wantErr: `"cuda"`},
		{name: "plugin block with an unknown key", text: "plugin \"steward-gpu\" {\n  confg {\n    backend = \"sim\"\n  }\n}", kind: KindPlugin, wantErr: "confg"},
		{name: "another plugin", text: "plugin \"docker\" {\n  config {}\n}", kind: KindPlugin, wantErr: "not one of Steward's plugins"},

		{name: "ACL policy", text: "namespace \"*\" {\n  capabilities = [\"read-job\"]\n}\nnode {\n  policy = \"read\"\n}", kind: KindACL},
		{name: "ACL policy with an unknown capability", text: "namespace \"*\" {\n  capabilities = [\"read-jobs\"]\n}", kind: KindACL, wantErr: "read-jobs"},

		{name: "agent config block", text: "client {\n  enabled = true\n}", wantErr: `cannot classify: a top-level "client" block`},
		{name: "top-level attribute", text: "disable_update_check = true", wantErr: "cannot classify: top-level attributes disable_update_check"},
		{name: "policy and job mixed", text: "tier \"x\" {\n  priority = 5\n}\njob \"j\" {}", wantErr: "mixes a Steward policy and a Nomad jobspec"},
		{name: "no blocks", text: "# nothing\n", wantErr: "cannot classify: no blocks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := Example{File: "doc.md", Line: 20, Text: tc.text + "\n", Fragment: true}
			if tc.whole {
				ex = File("x.hcl", tc.text+"\n")
			}
			kind, _, err := c.Check(ex)
			if tc.kind != "" && kind != tc.kind {
				t.Errorf("kind %q, want %q", kind, tc.kind)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("want valid, got %v", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("want an error mentioning %q, got none", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("want an error mentioning %q, got %v", tc.wantErr, err)
			}
		})
	}
	// SetConfig created the plugins' directories under the temp dir, not
	// in /var/lib.
	if _, err := os.Stat("/var/lib/steward-doccheck-test"); err == nil {
		t.Errorf("a plugin check created /var/lib/steward-doccheck-test")
	}
	if _, err := os.Stat(filepath.Join(c.TempDir, "var/lib/steward-doccheck-test")); err != nil {
		t.Errorf("the plugin's directory is not under the temp dir: %v", err)
	}
}

// Diagnostics name the lines of the file the example is in, wrapped or
// not.
func TestDiagnosticsNameFileLines(t *testing.T) {
	c := newTestChecker(t)
	for _, tc := range []struct {
		text, want string
	}{
		{"tier \"x\" {\n  priority = 500\n}", "doc.md:21,"},
		{"task \"t\" {\n  drivr = \"raw_exec\"\n}", "doc.md:21,"},
		{"template {\n  destnation = \"x\"\n}", "doc.md:21,"},
	} {
		_, _, err := c.Check(Example{File: "doc.md", Line: 20, Text: tc.text + "\n", Fragment: true})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to name %s", tc.text, err, tc.want)
		}
	}
}
