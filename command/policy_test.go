package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/cli"

	"github.com/gpu-steward/steward/policy"
)

const validPolicy = `tier "serve" {
  priority    = 90
  preemptible = false
}
tier "batch" { priority = 10 }
tenant "ml" { reserve = 2 }
idle "nb" { tiers = ["batch"] }
`

// The mistake is on line 3, column 14: the value of priority.
const brokenPolicy = `tier "serve" { priority = 90 }
tier "batch" {
  priority = 0
}
`

// writeFiles writes name -> contents into a new directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPolicyValidate(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"ok.hcl":     validPolicy,
		"broken.hcl": brokenPolicy,
		"more.json":  `{"pool": {"gpu": {"owners": ["serve"]}}}`,
		"warn.hcl":   "tier \"t\" { priority = 5 }\npreemption { checkpoint_signal = \"SIGKILL\" }\n",
	})
	in := func(name string) string { return filepath.Join(dir, name) }
	example := filepath.Join("..", "example.hcl")

	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     []string // substrings
		stderr     []string
		noStdout   bool
		emptyError bool
	}{
		{
			name:       "example",
			args:       []string{example},
			code:       0,
			stdout:     []string{example + ": valid — 4 tiers, 3 tenants, 1 department, 4 pools, 2 idle rules\n"},
			emptyError: true,
		},
		{
			name:   "two files, one JSON",
			args:   []string{in("ok.hcl"), in("more.json")},
			stdout: []string{in("ok.hcl") + ", " + in("more.json") + ": valid — 2 tiers, 1 tenant, 1 pool, 1 idle rule\n"},
		},
		{
			name:   "warnings do not fail",
			args:   []string{in("warn.hcl")},
			stdout: []string{"valid — 1 tier, 0 tenants, 0 pools, 0 idle rules (1 warning)"},
			stderr: []string{in("warn.hcl") + ":2,34-43: warning: Signal cannot be caught"},
		},
		{
			name:     "broken file",
			args:     []string{in("broken.hcl")},
			code:     1,
			noStdout: true,
			stderr: []string{
				in("broken.hcl") + ":3,14-15: error: Invalid priority",
				"   3:   priority = 0", // the source snippet
				`The priority of tier "batch" must be between 1 and 100`,
			},
		},
		{
			name:     "the same tier in two files",
			args:     []string{in("ok.hcl"), in("broken.hcl")},
			code:     1,
			noStdout: true,
			stderr:   []string{in("broken.hcl") + ":1,1-13: error: Duplicate tier", `Tier "serve" already defined at ` + in("ok.hcl") + ":1,1-13;"},
		},
		{
			name:     "missing file",
			args:     []string{in("nope.hcl")},
			code:     1,
			noStdout: true,
			stderr:   []string{"Error: Failed to read file", "nope.hcl"},
		},
		{
			name:       "json: valid",
			args:       []string{"-json", example},
			stdout:     []string{`"valid": true`, `"tenants": 3`, `"diagnostics": []`},
			emptyError: true,
		},
		{
			name: "json: every diagnostic with its place",
			args: []string{"-json", in("broken.hcl")},
			code: 1,
			stdout: []string{`"valid": false`, `"errors": 1`, `"summary": "Invalid priority"`,
				`"file": "` + in("broken.hcl") + `"`, `"line": 3`, `"column": 14`},
			emptyError: true,
		},
		{
			name:     "no files",
			args:     nil,
			code:     1,
			noStdout: true,
			stderr:   []string{"No policy files given.", "Usage: steward policy validate"},
		},
		{
			name:     "unknown flag",
			args:     []string{"-strict", in("ok.hcl")},
			code:     1,
			noStdout: true,
			stderr:   []string{"flag provided but not defined: -strict", "Usage: steward policy validate"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ui := cli.NewMockUi()
			code := (&PolicyValidateCommand{Meta{UI: ui}}).Run(tt.args)
			stdout, stderr := ui.OutputWriter.String(), ui.ErrorWriter.String()
			if code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
			if tt.noStdout && stdout != "" {
				t.Errorf("stdout not empty:\n%s", stdout)
			}
			if tt.emptyError && stderr != "" {
				t.Errorf("stderr not empty:\n%s", stderr)
			}
			if strings.Contains(stderr, "\x1b[") {
				t.Errorf("stderr is coloured: %q", stderr)
			}
		})
	}
}

func TestPolicyValidateDirectory(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"b-tenants.json": `{"tenant": {"ml": {"reserve": 1}}}`,
		"a-tiers.hcl":    `tier "batch" { priority = 10 }`,
		"README.md":      "not a policy",
	})
	ui := cli.NewMockUi()
	if code := (&PolicyValidateCommand{Meta{UI: ui}}).Run([]string{dir}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	want := filepath.Join(dir, "a-tiers.hcl") + ", " + filepath.Join(dir, "b-tenants.json") + ": valid"
	if !strings.Contains(ui.OutputWriter.String(), want) {
		t.Errorf("stdout lacks %q:\n%s", want, ui.OutputWriter.String())
	}

	empty := t.TempDir()
	ui = cli.NewMockUi()
	if code := (&PolicyValidateCommand{Meta{UI: ui}}).Run([]string{empty}); code != 1 {
		t.Errorf("empty directory: exit %d, want 1", code)
	}
	if !strings.Contains(ui.ErrorWriter.String(), "holds no .hcl or .json files") {
		t.Errorf("stderr: %s", ui.ErrorWriter.String())
	}
}

func TestPolicyShow(t *testing.T) {
	dir := writeFiles(t, map[string]string{"ok.hcl": validPolicy, "broken.hcl": brokenPolicy})

	ui := cli.NewMockUi()
	if code := (&PolicyShowCommand{UI: ui}).Run([]string{filepath.Join(dir, "ok.hcl")}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	out := ui.OutputWriter.String()
	for _, want := range []string{
		"defaults {\n  tier                = \"batch\"", // resolved default tier
		"tier \"serve\" {\n  # preempt_grace is left out: victims freed for its work get preemption.grace (2m, or a pool's grace).\n" +
			"  # beyond_reserve is left out: \"run\", its work runs beyond its tenant's reserve, preemptible there by reserve reclaims.\n" +
			"  priority    = 90\n  preemptible = false\n}",
		"checkpoint_signal        = \"SIGUSR1\"", // default filled in
		"resume_order             = \"preempted-first\"",
		"fair_share_reclaim_above = 0\n",
		"promote {",
		// The tenant's tiers, explained.
		"# tiers = [] allows every tier.\n",
		"# default_tier is left out: jobs that name no tier run as batch.\n",
		"# Not preemptible within the reserve of 2 GPUs, beyond it by reserve reclaims alone: serve.\n",
		"  tiers     = []\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, `tier "serve"`) > strings.Index(out, `tier "batch"`) {
		t.Errorf("tiers not by priority:\n%s", out)
	}
	// The output is a policy file for the same policy.
	shown, diags := policy.ParseBytes("shown.hcl", []byte(out))
	orig, _ := policy.Parse(filepath.Join(dir, "ok.hcl"))
	if diags.HasErrors() || shown.String() == "" || shown.TierNames()[0] != orig.TierNames()[0] {
		t.Errorf("show output does not re-parse: %v", diags)
	}

	ui = cli.NewMockUi()
	if code := (&PolicyShowCommand{UI: ui}).Run([]string{filepath.Join(dir, "broken.hcl")}); code != 1 {
		t.Errorf("broken: exit %d, want 1", code)
	}
	if ui.OutputWriter.String() != "" || !strings.Contains(ui.ErrorWriter.String(), "broken.hcl:3,14-15: error: Invalid priority") {
		t.Errorf("broken: stdout %q stderr %q", ui.OutputWriter.String(), ui.ErrorWriter.String())
	}

	ui = cli.NewMockUi()
	if code := (&PolicyShowCommand{UI: ui}).Run(nil); code != 1 || !strings.Contains(ui.ErrorWriter.String(), "Usage: steward policy show") {
		t.Errorf("no files: exit %d, stderr %q", code, ui.ErrorWriter.String())
	}
}

func TestCommandsRegistered(t *testing.T) {
	cmds := Commands(cli.NewMockUi())
	for _, name := range []string{"policy validate", "policy show"} {
		f, ok := cmds[name]
		if !ok {
			t.Fatalf("%q not registered", name)
		}
		c, err := f()
		if err != nil || c.Synopsis() == "" || !strings.HasPrefix(c.Help(), "Usage: steward "+name) {
			t.Errorf("%q: %v, synopsis %q, help %q", name, err, c.Synopsis(), c.Help())
		}
	}
}
