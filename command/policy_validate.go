package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/gpu-steward/steward/policy"
)

// PolicyValidateCommand is "steward policy validate": it checks policy files
// and reports every mistake at its file:line,column; with -cluster, also
// against what a Nomad cluster has.
type PolicyValidateCommand struct{ Meta }

func (c *PolicyValidateCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward policy validate [options] FILE|DIR...

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

Options:

  -cluster
    Also check the policy against the Nomad cluster (read-only, with the
    token given; NOMAD_ADDR, NOMAD_TOKEN and the TLS variables as for
    nomad): an error for each tenant namespace, pool node_pool and pool GPU
    model the cluster lacks (a misspelt name is valid HCL that governs
    nothing), a warning for each namespace with allocations holding GPUs
    that no tenant names, and for jobs that give a tier the policy does not
    define. What the token may not read is left unchecked and said so, so
    a tenant's token can run it too.

  -json
    Print the result as one JSON object on standard output (valid, counts,
    diagnostics with file, line and column, what -cluster could not check)
    for CI; the exit status is the same.

  Nomad's general options (-address, -token, -ca-cert, ...) apply to
  -cluster.

Example:

  $ steward policy validate example.hcl
  example.hcl: valid — 4 tiers, 3 tenants, 1 department, 4 pools, 2 idle rules
`)
}

func (c *PolicyValidateCommand) Synopsis() string { return "Check policy files for mistakes" }

func (c *PolicyValidateCommand) Run(args []string) int {
	var asJSON, cluster bool
	fs := c.FlagSet("policy validate", 0)
	fs.BoolVar(&asJSON, "json", false, "")
	fs.BoolVar(&cluster, "cluster", false, "")
	if err := c.Parse(fs, args); err != nil {
		c.UI.Error(fmt.Sprintf("%v\n\n%s", err, c.Help()))
		return 1
	}
	if fs.NArg() == 0 {
		c.UI.Error("No policy files given.\n\n" + c.Help())
		return 1
	}
	files, err := policy.ExpandPaths(fs.Args())
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	p := policy.NewParser()
	pol, diags := p.Parse(files...)
	var unread []unreadFact
	if pol != nil && cluster {
		client, err := c.Client()
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		facts, u, err := readClusterFacts(client, pol.Defaults.TierMetaKey)
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		unread = u
		diags = append(diags, p.CheckCluster(pol, facts)...)
	}
	valid := pol != nil && !diags.HasErrors()
	if asJSON {
		return c.printJSON(files, pol, diags, unread, valid)
	}
	if len(diags) > 0 {
		var buf bytes.Buffer
		if err := p.WriteDiagnostics(&buf, diags); err != nil {
			c.UI.Error(err.Error())
		}
		c.UI.Error(strings.TrimRight(buf.String(), "\n"))
	}
	for _, u := range unread {
		c.UI.Warn(fmt.Sprintf("cluster: %s not checked: %s", u.What, u.Why))
	}
	if !valid {
		return 1
	}
	warnings := 0
	for _, d := range diags {
		if d.Severity == hcl.DiagWarning {
			warnings++
		}
	}
	tenants := count(len(pol.Tenants), "tenant")
	if len(pol.Departments) > 0 { // named only when there are some
		tenants += ", " + count(len(pol.Departments), "department")
	}
	summary := fmt.Sprintf("%s: valid — %s, %s, %s, %s", strings.Join(files, ", "),
		count(len(pol.Tiers), "tier"), tenants,
		count(len(pol.Pools), "pool"), count(len(pol.Idle), "idle rule"))
	if cluster {
		summary += "; checked against the cluster"
	}
	if warnings > 0 {
		summary += fmt.Sprintf(" (%s)", count(warnings, "warning"))
	}
	c.UI.Output(summary)
	return 0
}

// validateReport is `policy validate -json`'s output.
type validateReport struct {
	Valid bool     `json:"valid"`
	Files []string `json:"files"`
	// Counts are the policy's blocks; absent when it did not parse.
	Counts      map[string]int       `json:"counts,omitempty"`
	Errors      int                  `json:"errors"`
	Warnings    int                  `json:"warnings"`
	Diagnostics []validateDiagnostic `json:"diagnostics"`
	// NotChecked is what -cluster could not read, and why.
	NotChecked []unreadFact `json:"cluster_not_checked,omitempty"`
}

type validateDiagnostic struct {
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
	// File, Line and Column are where it points (absent: the policy as a
	// whole, or the cluster).
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
}

func (c *PolicyValidateCommand) printJSON(files []string, pol *policy.Policy, diags hcl.Diagnostics, unread []unreadFact, valid bool) int {
	r := validateReport{Valid: valid, Files: files, Diagnostics: []validateDiagnostic{}, NotChecked: unread}
	if pol != nil {
		r.Counts = map[string]int{"tiers": len(pol.Tiers), "tenants": len(pol.Tenants), "departments": len(pol.Departments),
			"pools": len(pol.Pools), "idle_rules": len(pol.Idle)}
	}
	for _, d := range diags {
		vd := validateDiagnostic{Severity: "error", Summary: d.Summary, Detail: d.Detail}
		if d.Severity == hcl.DiagWarning {
			vd.Severity = "warning"
			r.Warnings++
		} else {
			r.Errors++
		}
		if d.Subject != nil && d.Subject.Filename != "" {
			vd.File, vd.Line, vd.Column = d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column
		}
		r.Diagnostics = append(r.Diagnostics, vd)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	c.UI.Output(string(b))
	if !valid {
		return 1
	}
	return 0
}

// count writes n and a noun, plural unless n is 1: "1 pool", "2 idle rules".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
