package command

import (
	"bytes"
	"flag"
	"fmt"
	"io"
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
	files, err := policy.ExpandPaths(fs.Args())
	if err != nil {
		ui.Error(err.Error())
		return nil, false
	}
	return files, true
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
