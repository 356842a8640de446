package command

import (
	"fmt"
	"strings"

	"github.com/hashicorp/cli"
)

// PolicyValidateCommand is "steward policy validate": it checks policy files
// and reports every mistake at its file:line,column.
type PolicyValidateCommand struct {
	UI cli.Ui
}

func (c *PolicyValidateCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward policy validate FILE|DIR...

  Checks Steward policy files and reports every mistake, each with its
  file:line,column and the source line it is on. Several files are one
  policy: their blocks are merged, and a block defined in two files is an
  error. A directory stands for the .hcl and .json files in it.

  Among the rest, it checks that each tenant's tiers (the tiers its jobs may
  use; [] for every tier) and default_tier (the tier of its jobs that name
  none, or one they may not use) name defined tiers, with a suggestion for
  near misses, and that default_tier is one of the tenant's tiers. It warns
  of a tenant with reserve 0 that may use a non-preemptible tier with
  beyond_reserve = "wait": such work runs only within its tenant's reserve,
  so those jobs would wait for ever.

  Exits 0 and prints a one-line summary when the policy is valid (warnings
  are printed but do not fail it), and exits 1 otherwise.

Example:

  $ steward policy validate example.hcl
  example.hcl: valid — 4 tiers, 3 tenants, 1 department, 4 pools, 2 idle rules
`)
}

func (c *PolicyValidateCommand) Synopsis() string { return "Check policy files for mistakes" }

func (c *PolicyValidateCommand) Run(args []string) int {
	files, ok := policyArgs(c.UI, "policy validate", c.Help(), args)
	if !ok {
		return 1
	}
	pol, warnings := loadPolicy(c.UI, files)
	if pol == nil {
		return 1
	}
	tenants := count(len(pol.Tenants), "tenant")
	if len(pol.Departments) > 0 { // named only when there are some
		tenants += ", " + count(len(pol.Departments), "department")
	}
	summary := fmt.Sprintf("%s: valid — %s, %s, %s, %s", strings.Join(files, ", "),
		count(len(pol.Tiers), "tier"), tenants,
		count(len(pol.Pools), "pool"), count(len(pol.Idle), "idle rule"))
	if warnings > 0 {
		summary += fmt.Sprintf(" (%s)", count(warnings, "warning"))
	}
	c.UI.Output(summary)
	return 0
}

// count writes n and a noun, plural unless n is 1: "1 pool", "2 idle rules".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
