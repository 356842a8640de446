package command

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/hcl/v2"

	"github.com/gpu-steward/steward/policy"
)

// policyArgs parses the arguments of a policy subcommand, which takes no
// flags, into the policy files it names. A directory stands for the .hcl and
// .json files directly in it, sorted by name. It reports usage errors to the
// UI and returns ok false.
func policyArgs(ui cli.Ui, name, help string, args []string) (files []string, ok bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		ui.Error(fmt.Sprintf("%v\n\n%s", err, help))
		return nil, false
	}
	if fs.NArg() == 0 {
		ui.Error("No policy files given.\n\n" + help)
		return nil, false
	}
	files, err := expandPolicyPaths(fs.Args())
	if err != nil {
		ui.Error(err.Error())
		return nil, false
	}
	return files, true
}

// expandPolicyPaths replaces each directory among paths by its policy
// files and drops repeats. Anything else is passed on as a file, so that a
// missing file is reported by the parser like any other unreadable one.
func expandPolicyPaths(paths []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[filepath.Clean(p)] {
			seen[filepath.Clean(p)] = true
			out = append(out, p)
		}
	}
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil || !info.IsDir() {
			add(p)
			continue
		}
		entries, err := os.ReadDir(p) // sorted by name
		if err != nil {
			return nil, fmt.Errorf("reading policy directory %s: %w", p, err)
		}
		n := 0
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".hcl", ".json":
				if e.Type().IsRegular() || e.Type()&os.ModeSymlink != 0 {
					add(filepath.Join(p, e.Name()))
					n++
				}
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("policy directory %s holds no .hcl or .json files", p)
		}
	}
	return out, nil
}

// loadPolicy parses files as one policy and prints any diagnostics, warnings
// included, to the UI's error stream. It returns the policy, nil when there
// were errors, and the number of warnings.
func loadPolicy(ui cli.Ui, files []string) (pol *policy.Policy, warnings int) {
	p := policy.NewParser()
	pol, diags := p.Parse(files...)
	for _, d := range diags {
		if d.Severity == hcl.DiagWarning {
			warnings++
		}
	}
	if len(diags) > 0 {
		var buf bytes.Buffer
		if err := p.WriteDiagnostics(&buf, diags); err != nil {
			ui.Error(err.Error())
		}
		ui.Error(strings.TrimRight(buf.String(), "\n"))
	}
	return pol, warnings
}
