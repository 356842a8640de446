package monitoring

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var dashboardFile = filepath.Join(root, "monitoring", "grafana", "steward.json")

// exportedMetrics are the names of the series the controller exports, from
// its registry: `go run ./internal/metricnames` in Steward's module prints
// controller.MetricNames. Run rather than imported, so that this module
// does not take on Steward's requirements (nor they Prometheus's).
func exportedMetrics(t *testing.T) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the controller's metrics: %v", err)
	}
	cmd := exec.Command(goBin, "run", "./internal/metricnames")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./internal/metricnames: %v\n%s", err, stderr.String())
	}
	names := strings.Fields(string(out))
	if len(names) < 20 || !slices.Contains(names, "steward_leader") {
		t.Fatalf("the controller lists %d metrics (%q): not its registry", len(names), names)
	}
	return names
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return &d
}

// panels lists every panel, those inside collapsed rows included.
func (d *dashboard) panels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaVars are Grafana's variables in a query: ${name}, ${name:format}
// and $name.
var grafanaVars = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// promQL turns a dashboard query into PromQL as Grafana sends it: its
// interval variables become a duration, the dashboard's variables (used
// in regex matchers) match anything.
func promQL(expr string) string {
	return grafanaVars.ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}")
		name, _, _ = strings.Cut(name, ":")
		if strings.HasPrefix(name, "__") {
			return "5m" // $__rate_interval, $__interval, $__range
		}
		return ".*"
	})
}

// TestDashboardImports: the dashboard is JSON Grafana imports, with the
// Prometheus data source a variable (no UID of someone's Grafana inside),
// and every panel shows queries.
func TestDashboardImports(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", d.UID, d.Title)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Name == "datasource" && string(v.Query) == `"prometheus"` {
			hasDS = true
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s: datasource %+v, want the ${datasource} variable", v.Name, v.Datasource)
		}
	}
	if !hasDS {
		t.Errorf("no datasource variable named datasource of type prometheus")
	}
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.panels() {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			if q.Datasource != nil && q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q, query %s: datasource %+v", p.Title, q.RefID, q.Datasource)
			}
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q, query %s: empty", p.Title, q.RefID)
			}
		}
	}
	t.Logf("%d panels, %d queries", len(ids), queries)
}

// labelValues reads the metric selector out of a variable's
// label_values(selector, label) query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

// TestQueriesUseExportedMetrics parses every PromQL expression of the
// dashboard (panels and variables) and of the alert rules, and checks
// that each metric it selects is one the controller exports.
func TestQueriesUseExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	type query struct{ where, expr string }
	var queries []query
	d := loadDashboard(t)
	for _, p := range d.panels() {
		for _, q := range p.Targets {
			queries = append(queries, query{"dashboard panel " + p.Title + " " + q.RefID, promQL(q.Expr)})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var text string
		if err := json.Unmarshal(v.Query, &text); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
			text = obj.Query
		}
		m := labelValues.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, text)
			continue
		}
		queries = append(queries, query{"dashboard variable " + v.Name, promQL(m[1])})
	}
	for name, r := range alertRules(t) {
		queries = append(queries, query{"alert " + name, r.Expr})
	}
	used := map[string]bool{}
	for _, q := range queries {
		expr, err := promParser().ParseExpr(q.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.where, err, q.expr)
			continue
		}
		names := metricsOf(expr)
		if len(names) == 0 {
			t.Errorf("%s selects no metric: %s", q.where, q.expr)
		}
		for _, name := range names {
			used[name] = true
			if !slices.Contains(exported, name) {
				t.Errorf("%s uses %s, which the controller does not export", q.where, name)
			}
		}
	}
	t.Logf("%d queries use %d of the controller's %d metrics", len(queries), len(used), len(exported))
}

// TestUnknownMetricIsCaught: the check above fails on a name the
// controller lacks (and on a typo).
func TestUnknownMetricIsCaught(t *testing.T) {
	exported := []string{"steward_leader", "steward_gpus_in_use"}
	expr, err := promParser().ParseExpr(promQL(`sum by (tenant) (steward_gpu_in_use{tenant=~"$tenant"}) / on () group_left () max(steward_leader)`))
	if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for _, name := range metricsOf(expr) {
		if !slices.Contains(exported, name) {
			unknown = append(unknown, name)
		}
	}
	if !slices.Equal(unknown, []string{"steward_gpu_in_use"}) {
		t.Errorf("unknown names %q, want the typo steward_gpu_in_use", unknown)
	}
}
