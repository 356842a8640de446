package policy

import (
	"strconv"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// TestCheckCluster (issue 34, item 4): a policy checked against what a
// cluster has. A misspelt tenant namespace, node pool or GPU model is
// valid HCL that governs nothing; each is an error at its place in the
// file, with the near miss. GPU work in a namespace no tenant names, and
// jobs that name an undefined tier, are warnings. What the caller could
// not read (nil) is not checked.
func TestCheckCluster(t *testing.T) {
	const src = `tier "inference" {
  priority    = 90
  preemptible = false
}
tier "training" {
  priority = 40
}
tenant "research" {
  reserve = 4
}
tenant "product" {
  namespace = "prodcut"
}
pool "h100" {
  node_pool = "gpu-h100"
  models    = ["H100 80GB HBM3", "A100-SXM4-40GB"]
}
`
	full := Cluster{
		Namespaces:    []string{"default", "product", "research", "web"},
		NodePools:     []string{"all", "default", "gpu-h100"},
		GPUModels:     []string{"A100-SXM4-80GB", "H100 80GB HBM3"},
		GPUNamespaces: []string{"research", "web", "product"},
		JobTiers:      map[string][]string{"training": {"research/t1"}, "trainign": {"research/t2", "research/t3"}},
	}
	type diag struct{ at, sev, summary, detail string }
	cases := []struct {
		name    string
		cluster Cluster
		want    []diag
	}{
		{name: "misspelt namespace and model with GPU work no tenant names and a job's unknown tier", cluster: full, want: []diag{
			{"", "warning", "Namespace with GPU work and no tenant", `Namespace "product" has allocations holding GPUs and no tenant block: its work may use "training", with no reserve and no limit. A tenant governs "prodcut": is that a misspelling of "product"?`},
			{"", "warning", "Namespace with GPU work and no tenant", `Namespace "web" has allocations holding GPUs and no tenant block: its work may use "training", with no reserve and no limit.`},
			{"", "warning", "Jobs name an unknown tier", `Jobs research/t2, research/t3 give tier "trainign" in steward.tier, which the policy does not define: they run as their tenant's default tier. Did you mean "training"?`},
			{"c.hcl:12,15", "error", "Unknown namespace", `Tenant "product" governs namespace "prodcut", which the cluster does not have: its reserve and limit govern nothing. Did you mean "product"?`},
			{"c.hcl:16,34", "error", "Unknown GPU model", `Pool "h100" names GPU model "A100-SXM4-40GB", which no node's device plugin reports (the cluster has "A100-SXM4-80GB", "H100 80GB HBM3"). Did you mean "A100-SXM4-80GB"?`},
		}},
		{name: "a node pool the cluster lacks", cluster: Cluster{NodePools: []string{"default"}}, want: []diag{
			{"c.hcl:15,15", "error", "Unknown node pool", `Pool "h100" keeps Nomad node pool "gpu-h100", which the cluster does not have: the pool has no nodes.`},
		}},
		{name: "nothing read: nothing checked", cluster: Cluster{}},
		{name: "all there", cluster: Cluster{Namespaces: []string{"prodcut", "research"}, NodePools: []string{"gpu-h100"},
			GPUModels: []string{"H100 80GB HBM3", "A100-SXM4-40GB"}, GPUNamespaces: []string{"research"}, JobTiers: map[string][]string{"inference": {"research/serve"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewParser()
			pol, diags := p.ParseSources(Source{Name: "c.hcl", Bytes: []byte(src)})
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			got := p.CheckCluster(pol, tc.cluster)
			if len(got) != len(tc.want) {
				t.Fatalf("%d diagnostics, want %d: %v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				d := got[i]
				at := ""
				if d.Subject != nil && w.at != "" {
					at = d.Subject.Filename + ":" + strconv.Itoa(d.Subject.Start.Line) + "," + strconv.Itoa(d.Subject.Start.Column)
				}
				sev := "error"
				if d.Severity == hcl.DiagWarning {
					sev = "warning"
				}
				if at != w.at || sev != w.sev || d.Summary != w.summary || d.Detail != w.detail {
					t.Errorf("diagnostic %d:\n got %s %s %q %q\nwant %s %s %q %q", i, at, sev, d.Summary, d.Detail, w.at, w.sev, w.summary, w.detail)
				}
			}
		})
	}
}
