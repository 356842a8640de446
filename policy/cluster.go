package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Checking a policy against a cluster (`steward policy validate -cluster`,
// issue 34): a misspelt tenant namespace, node pool or GPU model is valid
// HCL and governs nothing, silently. The caller reads what the cluster has
// (read-only, with its own token) into a Cluster; the check does no I/O.

// Cluster is what a Nomad cluster has that a policy names. A nil list was
// not read (the caller's token may not read it): nothing is checked
// against it.
type Cluster struct {
	Namespaces []string
	NodePools  []string
	// GPUModels are the GPU device names the nodes' device plugins report
	// ("H100 80GB HBM3"), as pool models name them.
	GPUModels []string
	// GPUNamespaces are the namespaces with allocations that hold GPUs.
	GPUNamespaces []string
	// JobTiers maps each tier name a job gives in its tier meta key to
	// those jobs ("ns/job"); nil: not read.
	JobTiers map[string][]string
}

// checkCluster finds what p names that c lacks, and the GPU work c has
// that p names no tenant for.
func checkCluster(p *Policy, c Cluster) []problem {
	var out []problem
	flag := func(at where, warning bool, summary, detail string) {
		out = append(out, problem{at: at, warning: warning, summary: summary, detail: detail})
	}
	hint := func(s string, have []string) string {
		if m := closest(s, have); m != "" {
			return fmt.Sprintf(" Did you mean %q?", m)
		}
		return ""
	}
	var governed []string // the tenants' namespaces
	for _, name := range p.TenantNames() {
		governed = append(governed, p.Tenants[name].Namespace)
	}
	if c.Namespaces != nil {
		for _, name := range p.TenantNames() {
			ns := p.Tenants[name].Namespace
			if !slices.Contains(c.Namespaces, ns) {
				flag(whereAttr(blockTenant, name, "namespace"), false, "Unknown namespace",
					fmt.Sprintf("Tenant %q governs namespace %q, which the cluster does not have: its reserve and limit govern nothing.%s",
						name, ns, hint(ns, c.Namespaces)))
			}
		}
	}
	for _, name := range p.PoolNames() {
		pl := p.Pools[name]
		if c.NodePools != nil && pl.NodePool != "" && !slices.Contains(c.NodePools, pl.NodePool) {
			flag(whereAttr(blockPool, name, "node_pool"), false, "Unknown node pool",
				fmt.Sprintf("Pool %q keeps Nomad node pool %q, which the cluster does not have: the pool has no nodes.%s",
					name, pl.NodePool, hint(pl.NodePool, c.NodePools)))
		}
		if c.GPUModels == nil {
			continue
		}
		for i, m := range pl.Models {
			if !slices.Contains(c.GPUModels, m) {
				flag(whereAttr(blockPool, name, "models").at(i), false, "Unknown GPU model",
					fmt.Sprintf("Pool %q names GPU model %q, which no node's device plugin reports (the cluster has %s).%s",
						name, m, quoteList(c.GPUModels), hint(m, c.GPUModels)))
			}
		}
	}
	if c.GPUNamespaces != nil {
		def := p.UnnamedTenant("")
		for _, ns := range sorted(c.GPUNamespaces) {
			if p.TenantOf(ns).Unnamed {
				miss := ""
				if m := closest(ns, governed); m != "" {
					miss = fmt.Sprintf(" A tenant governs %q: is that a misspelling of %q?", m, ns)
				}
				flag(where{}, true, "Namespace with GPU work and no tenant",
					fmt.Sprintf("Namespace %q has allocations holding GPUs and no tenant block: its work may use %s, with no reserve and no limit.%s",
						ns, quoteList(def.Tiers), miss))
			}
		}
	}
	for _, tier := range sorted(mapKeys(c.JobTiers)) {
		if p.Tiers[tier] != nil {
			continue
		}
		jobs := sorted(c.JobTiers[tier])
		more := ""
		if len(jobs) > 3 {
			jobs, more = jobs[:3], fmt.Sprintf(" and %d more", len(c.JobTiers[tier])-3)
		}
		flag(where{}, true, "Jobs name an unknown tier",
			fmt.Sprintf("Jobs %s%s give tier %q in %s, which the policy does not define: they run as their tenant's default tier.%s",
				strings.Join(jobs, ", "), more, tier, p.Defaults.TierMetaKey, hint(tier, p.TierNames())))
	}
	return out
}

// CheckCluster checks pol, which p parsed, against c: errors for what the
// policy names and the cluster lacks, warnings for GPU work no tenant
// names and jobs that name an unknown tier; each at its place in the
// files.
func (p *Parser) CheckCluster(pol *Policy, c Cluster) hcl.Diagnostics {
	src := p.src
	if src == nil {
		src = newSourceMap()
	}
	var diags hcl.Diagnostics
	for _, pr := range checkCluster(pol, c) {
		if pr.at == (where{}) {
			// About the cluster, not a place in the files.
			sev := hcl.DiagError
			if pr.warning {
				sev = hcl.DiagWarning
			}
			diags = append(diags, &hcl.Diagnostic{Severity: sev, Summary: pr.summary, Detail: pr.detail})
			continue
		}
		diags = append(diags, src.diagnostic(pr))
	}
	sortDiagnostics(diags, pol.Files)
	return diags
}

func quoteList(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
