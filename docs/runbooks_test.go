package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpu-steward/steward/internal/doccheck"
)

// runbookBase is where an alert's runbook_url points: docs/operations.md
// as the repository's host shows it.
const runbookBase = "https://github.com/gpu-steward/steward/blob/main/docs/operations.md#"

var (
	alertRE   = regexp.MustCompile(`(?m)^\s*- alert: (\S+)\s*$`)
	runbookRE = regexp.MustCompile(`(?m)^\s*runbook_url: "([^"]*)"\s*$`)
)

// TestAlertRunbooks checks that every shipped alert links its own runbook
// (its name's heading in docs/operations.md) from its runbook_url, and
// that the heading is there: an on-call engineer who follows the link
// lands on what to do.
func TestAlertRunbooks(t *testing.T) {
	root := repoRoot(t)
	rules, err := os.ReadFile(filepath.Join(root, "monitoring", "prometheus", "steward-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := doccheck.Anchors(string(ops))
	alerts := alertRE.FindAllStringSubmatchIndex(string(rules), -1)
	if len(alerts) < 6 {
		t.Fatalf("found %d alerts in steward-alerts.yml, want at least 6: is the pattern broken?", len(alerts))
	}
	for i, a := range alerts {
		name := string(rules[a[2]:a[3]])
		end := len(rules)
		if i+1 < len(alerts) {
			end = alerts[i+1][0]
		}
		t.Run(name, func(t *testing.T) {
			m := runbookRE.FindSubmatch(rules[a[1]:end])
			if m == nil {
				t.Fatalf("alert %s has no runbook_url annotation", name)
			}
			url := string(m[1])
			want := runbookBase + doccheck.Slug(name)
			if url != want {
				t.Errorf("alert %s: runbook_url %q, want %q", name, url, want)
			}
			if anchor := strings.TrimPrefix(url, runbookBase); !anchors[anchor] {
				t.Errorf("alert %s: docs/operations.md has no heading %q (### %s)", name, anchor, name)
			}
		})
	}
}
