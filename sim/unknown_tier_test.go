package sim

import (
	"strings"
	"testing"
)

// Jobs naming a tier the policy lacks run as their tenant's default tier
// and are counted apart, with a delay row of their own.
func TestUnknownTiers(t *testing.T) {
	pol := mustPolicy(t, `
tier "inference" { priority = 90 }
tier "training"  { priority = 40 }
tenant "ml" {}
tenant "web" { default_tier = "inference" }
`)
	tests := []struct {
		name      string
		rows      string
		jobs      map[string]int
		ranAs     map[string]string
		rowLabels []string
		started   map[string]int
	}{
		{"none", "a,0,1,60,ml,training\n", nil, nil, nil, nil},
		{"a typo", "a,0,1,60,ml,infrence\nb,0,1,60,ml,infrence\nc,0,1,60,ml,inference\n",
			map[string]int{"infrence": 2}, map[string]string{"infrence": "training"},
			[]string{`unknown tier "infrence" → training, 2 jobs: delay p50/p95/p99 (min)`}, map[string]int{"infrence": 2}},
		{"two names, two tenants' defaults", "a,0,1,60,ml,gpu\nb,0,1,60,web,gpu\nc,0,1,60,web,batch\n",
			map[string]int{"gpu": 2, "batch": 1}, map[string]string{"gpu": "inference, training", "batch": "inference"},
			[]string{`unknown tier "batch" → inference, 1 job`, `unknown tier "gpu" → inference, training, 2 jobs`},
			map[string]int{"gpu": 2, "batch": 1}},
		{"one never starts", "a,0,8,60,ml,big\nb,0,9,60,ml,big\n",
			map[string]int{"big": 1}, map[string]string{"big": "training"}, []string{`unknown tier "big" → training, 1 job`},
			map[string]int{"big": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := mustTrace(t, "job,submit,gpus,run_time,tenant,tier\n"+tc.rows)
			rep, err := Compare(tr, Options{Config: Config{Policy: pol, Nodes: 1, GPUsPerNode: 8}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.UnknownTierJobs) != len(tc.jobs) {
				t.Fatalf("unknown_tier_jobs %v, want %v", rep.UnknownTierJobs, tc.jobs)
			}
			for tier, n := range tc.jobs {
				if rep.UnknownTierJobs[tier] != n {
					t.Errorf("unknown_tier_jobs %v, want %v", rep.UnknownTierJobs, tc.jobs)
				}
				if want := `"` + tier + `" (` + nJobs(n) + ") → " + tc.ranAs[tier]; !strings.Contains(rep.Derivation, want) {
					t.Errorf("the rule lacks %s:\n%s", want, rep.Derivation)
				}
			}
			if len(tc.jobs) == 0 && strings.Contains(rep.Derivation, "unknown") {
				t.Errorf("the rule names unknown tiers:\n%s", rep.Derivation)
			}
			for _, r := range rep.Results {
				if len(r.UnknownTierDelay) != len(tc.started) {
					t.Fatalf("%s: unknown-tier delays %+v", r.Policy, r.UnknownTierDelay)
				}
				for _, d := range r.UnknownTierDelay {
					if d.Jobs != tc.started[d.Tier] {
						t.Errorf("%s: tier %s: %d jobs started, want %d", r.Policy, d.Tier, d.Jobs, tc.started[d.Tier])
					}
				}
			}
			var table, csv strings.Builder
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			for _, label := range tc.rowLabels {
				if !strings.Contains(table.String(), label) {
					t.Errorf("table lacks %q:\n%s", label, table.String())
				}
			}
			if err := WriteCSV(&csv, []*Report{rep}); err != nil {
				t.Fatal(err)
			}
			for tier := range tc.started {
				if !strings.Contains(csv.String(), "test,steward,unknown_tier_delay_p50_min."+tier+",") {
					t.Errorf("results.csv lacks the delay of %s", tier)
				}
			}
		})
	}
}
