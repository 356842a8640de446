package command

import (
	"strings"

	"github.com/hashicorp/cli"
)

// PolicyShowCommand is "steward policy show": it prints the policy that
// Steward would run, every default filled in, as HCL.
type PolicyShowCommand struct {
	UI cli.Ui
}

func (c *PolicyShowCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward policy show FILE|DIR...

  Prints the policy the files describe as Steward resolves it: the files
  merged, every default written out, tiers by priority. The output is itself
  a valid policy file. Each tenant shows the tiers it may use, the tier its
  jobs run as when they name none or one it may not use, and which of its
  tiers are not preemptible (safe from preemption only within its reserve). Mistakes are reported as by "steward policy validate",
  and the command then exits 1.
`)
}

func (c *PolicyShowCommand) Synopsis() string {
	return "Print the resolved policy with defaults filled in"
}

func (c *PolicyShowCommand) Run(args []string) int {
	files, ok := policyArgs(c.UI, "policy show", c.Help(), args)
	if !ok {
		return 1
	}
	pol, _ := loadPolicy(c.UI, files)
	if pol == nil {
		return 1
	}
	c.UI.Output(strings.TrimRight(pol.String(), "\n"))
	return 0
}
