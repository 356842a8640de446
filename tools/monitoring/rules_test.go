package monitoring

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/template"
)

// root is Steward's repository, two levels up from tools/monitoring.
var root = filepath.Join("..", "..")

var rulesFile = filepath.Join(root, "monitoring", "prometheus", "steward-alerts.yml")

// The alerts issue #16 asks for, by name.
var wantAlerts = []string{
	"StewardTenantUnderReserveWithWorkWaiting",
	"StewardServingWorkWaiting",
	"StewardNoLeader",
	"StewardRoundsFailing",
	"StewardRoundsStalled",
	"StewardPreemptionThrashing",
}

func promParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// loadRules parses the rules as `promtool check rules` does: strict YAML
// (unknown fields are errors), each expression parsed as PromQL, each
// label and annotation parsed as a template (rulefmt's Validate).
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promParser(), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return groups
}

func alertRules(t *testing.T) map[string]rulefmt.Rule {
	out := map[string]rulefmt.Rule{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r
		}
	}
	return out
}

// TestRulesPassTheRuleChecker: the checks of `promtool check rules`
// (rulefmt, and its lint: no duplicate rules), and each alert the issue
// names is there with a summary, a description, a runbook_url and a
// severity.
func TestRulesPassTheRuleChecker(t *testing.T) {
	groups := loadRules(t)
	seen := map[string]bool{}
	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule (%s): the file holds alerts only", g.Name, r.Record)
				continue
			}
			key := r.Alert + fmt.Sprint(r.Labels)
			if seen[key] {
				t.Errorf("alert %s: duplicate rule (promtool's lint fails on it)", r.Alert)
			}
			seen[key] = true
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
		}
	}
	for _, name := range wantAlerts {
		if !seen[name+fmt.Sprint(alertRules(t)[name].Labels)] {
			t.Errorf("no alert %s", name)
		}
	}
	t.Logf("%d rules checked", n)
}

// TestRulesRejectBrokenInput: the checker the tests above rely on fails
// on what promtool fails on, so that a pass means something.
func TestRulesRejectBrokenInput(t *testing.T) {
	cases := map[string]string{
		"bad PromQL":     "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum(steward_leader\n",
		"bad template":   "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: steward_leader == 0\n    annotations:\n      summary: '{{ $value'\n",
		"unknown field":  "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: steward_leader == 0\n    severity: page\n",
		"duration wrong": "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: steward_leader == 0\n    for: ten minutes\n",
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			_, errs := rulefmt.Parse([]byte(text), false, model.UTF8Validation, promParser(), slog.New(slog.DiscardHandler))
			if len(errs) == 0 {
				t.Errorf("accepted:\n%s", text)
			}
		})
	}
}

// TestAlertsFire evaluates each alert's expression (its `for` aside) on
// series as the controllers would export them, with Prometheus's own
// engine, and renders its annotations with the same engine answering
// their queries: each case fires for the series it names, with the value
// given, and the description carries the numbers.
func TestAlertsFire(t *testing.T) {
	alerts := alertRules(t)
	cases := []struct {
		name   string
		alert  string
		series string            // a load block at 1m steps
		want   map[string]string // labels of each firing series -> its value
		says   []string          // in the first firing series' description
	}{{
		name:  "a tenant short of its reserve with work waiting",
		alert: "StewardTenantUnderReserveWithWorkWaiting",
		series: `
			steward_reserve_shortfall_gpus{instance="a",tenant="ml"} 2x20
			steward_reserve_shortfall_gpus{instance="a",tenant="prod"} 0x20
			steward_gpus_in_use{instance="a",tenant="ml"} 1x20
			steward_gpus_reserved{instance="a",tenant="ml"} 3x20
			steward_gpus_waiting{instance="a",tenant="ml"} 4x20`,
		want: map[string]string{`{tenant="ml"}`: "2"},
		says: []string{"holds 1 GPUs of its reserve of 3 while its work waits for 4 GPUs", "(2 GPUs short)"},
	}, {
		name:   "tenants whose reserve is met",
		alert:  "StewardTenantUnderReserveWithWorkWaiting",
		series: `steward_reserve_shortfall_gpus{instance="a",tenant="ml"} 0x20`,
	}, {
		name:  "inference waits; training waiting is no incident",
		alert: "StewardServingWorkWaiting",
		series: `
			steward_waiting_groups{instance="a",tenant="prod",tier="inference",rule="capacity"} 1x20
			steward_waiting_groups{instance="b",tenant="prod",tier="inference",rule="capacity"} 1x20
			steward_waiting_groups{instance="a",tenant="ml",tier="training",rule="limit"} 3x20
			steward_oldest_wait_seconds{instance="a",tenant="prod",tier="inference"} 90x20
			steward_tier_preemptible{instance="a",tier="inference"} 0x20
			steward_tier_preemptible{instance="a",tier="training"} 1x20
			steward_gpus_in_use{instance="a",tenant="prod"} 4x20
			steward_gpus_reserved{instance="a",tenant="prod"} 4x20`,
		want: map[string]string{`{tenant="prod", tier="inference"}`: "1"},
		says: []string{"the oldest has waited 1m 30s", "holds 4 of its 4 reserved GPUs"},
	}, {
		name:  "two controllers, neither leads",
		alert: "StewardNoLeader",
		series: `
			steward_leader{instance="a"} 0x20
			steward_leader{instance="b"} 0x20`,
		want: map[string]string{`{}`: "0"},
		says: []string{"2 Steward controllers are scraped"},
	}, {
		name:   "no controller scraped at all",
		alert:  "StewardNoLeader",
		series: `up{job="other"} 1x20`,
		want:   map[string]string{`{}`: "0"},
		says:   []string{"No Steward controllers are scraped"},
	}, {
		name:  "one of two leads",
		alert: "StewardNoLeader",
		series: `
			steward_leader{instance="a"} 0x20
			steward_leader{instance="b"} 1x20`,
	}, {
		name:  "a leader whose every round fails; a healthy one beside it",
		alert: "StewardRoundsFailing",
		series: `
			steward_rounds_total{instance="a",job="steward",result="error"} 0+2x20
			steward_rounds_total{instance="a",job="steward",result="ok"} 0x20
			steward_rounds_total{instance="b",job="steward",result="ok"} 0+2x20
			steward_rounds_total{instance="b",job="steward",result="error"} 0x20`,
		want: map[string]string{`{instance="a", job="steward"}`: "1"},
		says: []string{"100% of the control rounds of a failed", "(20 found nothing to decide on", "0\nhad Nomad calls fail"},
	}, {
		name:  "a leader that runs no rounds",
		alert: "StewardRoundsStalled",
		series: `
			steward_leader{instance="a",job="steward"} 1x20
			steward_leader{instance="b",job="steward"} 0x20
			steward_rounds_total{instance="a",job="steward",result="ok"} 40x20`,
		want: map[string]string{`{job="steward"}`: "1"},
		says: []string{"job steward leads but counted no control round"},
	}, {
		name:  "a leader that runs rounds",
		alert: "StewardRoundsStalled",
		series: `
			steward_leader{instance="a",job="steward"} 1x20
			steward_rounds_total{instance="a",job="steward",result="ok"} 0+2x20`,
	}, {
		name:  "jobs one short of a cap of 3",
		alert: "StewardPreemptionThrashing",
		series: `
			steward_eviction_cap_per_job_per_hour{instance="a"} 3x20
			steward_job_preemptions_last_hour_max{instance="a",tenant="ml",tier="training"} 2x20
			steward_job_preemptions_last_hour_max{instance="a",tenant="ml",tier="batch"} 1x20
			steward_jobs_at_eviction_cap{instance="a",tenant="ml",tier="training"} 0x20
			steward_preemptions_total{instance="a",reason="priority",tenant="ml",tier="training"} 0+1x20
			steward_preemptions_total{instance="a",reason="idle",tenant="ml",tier="training"} 0x20`,
		want: map[string]string{`{tenant="ml", tier="training"}`: "2"},
		says: []string{"stopped (preempted or\nidle-released) 2 times", "the cap is\n3", "by rule: idle=0 priority=15"},
	}, {
		name:  "the leader cannot read Prometheus; its follower reads nothing",
		alert: "StewardIdleRulesPaused",
		series: `
			steward_activity_source_up{instance="a",job="steward"} 0x20
			steward_activity_source_up{instance="b",job="steward"} 1x20
			steward_activity_source_errors_total{instance="a",job="steward"} 0+6x20`,
		want: map[string]string{`{job="steward"}`: "0"},
		says: []string{"job steward has not read GPU activity for 5 minutes", "(30\nfailed reads)"},
	}, {
		name:  "the source answers",
		alert: "StewardIdleRulesPaused",
		series: `
			steward_activity_source_up{instance="a",job="steward"} 1x20
			steward_activity_source_up{instance="b",job="steward"} 1x20`,
	}, {
		name:  "at a cap of 2, one stop is no thrashing",
		alert: "StewardPreemptionThrashing",
		series: `
			steward_eviction_cap_per_job_per_hour{instance="a"} 2x20
			steward_job_preemptions_last_hour_max{instance="a",tenant="ml",tier="training"} 1x20`,
	}, {
		name:  "without a cap nothing is near it",
		alert: "StewardPreemptionThrashing",
		series: `
			steward_eviction_cap_per_job_per_hour{instance="a"} 0x20
			steward_job_preemptions_last_hour_max{instance="a",tenant="ml",tier="training"} 9x20`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rule, ok := alerts[tc.alert]
			if !ok {
				t.Fatalf("no alert %s", tc.alert)
			}
			load := "load 1m\n"
			for line := range strings.Lines(tc.series) {
				if line = strings.TrimSpace(line); line != "" {
					load += "  " + line + "\n"
				}
			}
			storage := promqltest.LoadedStorage(t, load)
			engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 100000)
			at := time.Unix(0, 0).Add(15 * time.Minute).UTC()
			q, err := engine.NewInstantQuery(context.Background(), storage, nil, rule.Expr, at)
			if err != nil {
				t.Fatal(err)
			}
			res := q.Exec(context.Background())
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			vec, err := res.Vector()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, s := range vec {
				got[s.Metric.DropMetricName().String()] = fmt.Sprint(s.F)
			}
			if fmt.Sprint(got) != fmt.Sprint(orEmpty(tc.want)) {
				t.Fatalf("%s fires %v, want %v\nexpr: %s", tc.alert, got, orEmpty(tc.want), rule.Expr)
			}
			if len(vec) == 0 {
				return
			}
			query := rules.EngineQueryFunc(engine, storage)
			for name, text := range rule.Annotations {
				out := expand(t, tc.alert, text, vec[0], at, query)
				if strings.Contains(out, "<no value>") || strings.Contains(out, "%!") {
					t.Errorf("%s: %q", name, out)
				}
				if name != "description" {
					continue
				}
				flat := strings.Join(strings.Fields(out), " ")
				for _, want := range tc.says {
					if !strings.Contains(out, want) && !strings.Contains(flat, strings.Join(strings.Fields(want), " ")) {
						t.Errorf("description lacks %q:\n%s", want, out)
					}
				}
			}
		})
	}
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// expand renders an annotation as Prometheus's rule manager does.
func expand(t *testing.T, alert, text string, s promql.Sample, at time.Time, query rules.QueryFunc) string {
	t.Helper()
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	data := template.AlertTemplateData(s.Metric.Map(), map[string]string{}, "", s)
	exp := template.NewTemplateExpander(context.Background(), defs+text, "__alert_"+alert, data,
		model.TimeFromUnixNano(at.UnixNano()), template.QueryFunc(query), nil, nil)
	out, err := exp.Expand()
	if err != nil {
		t.Fatalf("%s: %v", alert, err)
	}
	return out
}

// metricsOf lists the metric names an expression selects.
func metricsOf(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			name := vs.Name
			if name == "" {
				for _, m := range vs.LabelMatchers {
					if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
						name = m.Value
					}
				}
			}
			names = append(names, name)
		}
		return nil
	})
	slices.Sort(names)
	return slices.Compact(names)
}
