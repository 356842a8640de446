package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShowRoundTrip(t *testing.T) {
	example, err := os.ReadFile(filepath.Join("..", "example.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		src  string
	}{
		{"example", string(example)},
		{"defaults only", `tier "t" { priority = 1 }`},
		{"unlimited tenant, empty lists, no signal", `
tier "t" { priority = 1 }
tenant "team" { weight = 0.1 }
idle "all" {}
preemption { checkpoint_signal = "none" }`},
		{"departments, one unlimited", `
tier "t" { priority = 1 }
tenant "a" { reserve = 2 }
tenant "b" {}
tenant "c" {}
department "research" {
  tenants = ["b", "a"]
  reserve = 4
  limit   = 6
  weight  = 2
}
department "ops" { tenants = ["c"] }`},
		{"names that need escaping", `
tier "a \"quoted\" $${tier} %%{x} \\ name" { priority = 3 }
tier "ünïcode" { priority = 3 }
tenant "t" { namespace = "ns-1" }
pool "p" { owners = ["a \"quoted\" $${tier} %%{x} \\ name", "ünïcode"] }
defaults { tier_meta_key = "steward.tier\n$${x}" }`},
		{"preempt_grace set on one tier, left out on another", `
tier "urgent" {
  priority = 90
  preempt_grace = "15s"
}
tier "batch" { priority = 10 }
preemption { grace = "5m" }`},
		{"odd durations and numbers", `
tier "t" { priority = 100 }
pool "p" {
  owners = ["t"]
  grace = "1h0m0.5s"
}
idle "i" {
  threshold = 0.000001
  after = "90m"
}
tenant "x" { weight = 1e9 }`},
		{"notify blocks and an idle warning", `
tier "t" { priority = 10 }
tenant "research" {}
idle "i" {
  after       = "15m"
  warn_before = "5m"
}
notify "everything" { url_env = "OPS_HOOK" }
notify "research" {
  url              = "https://hooks.example.com/research?x=1"
  events           = ["preempt", "idle_warning"]
  tenants          = ["research"]
  ui_url           = "https://nomad.example.com"
  headers_from_env = { Authorization = "RESEARCH_AUTH", "X.Odd" = "ODD", "X-Team" = "TEAM" }
  timeout          = "2500ms"
  attempts         = 1
}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, Source{Name: "in.hcl", Bytes: []byte(tt.src)})
			out := p.String()
			again, diags := ParseBytes("show.hcl", []byte(out))
			if len(diags) > 0 {
				t.Fatalf("show output does not parse cleanly: %v\n%s", diags, out)
			}
			samePolicy(t, again, p)
			if again.String() != strings.Replace(out, "in.hcl", "show.hcl", 1) {
				t.Errorf("show is not stable:\n%s\n---\n%s", out, again.String())
			}
		})
	}
}

func TestShowOrder(t *testing.T) {
	p := mustParse(t, Source{Name: "a.hcl", Bytes: []byte(`
tier "b" { priority = 10 }
tier "a" { priority = 10 }
tier "z" { priority = 90 }
idle "second" {}
idle "first" {}
`)})
	out := p.String()
	var order []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "tier ") || strings.HasPrefix(line, "idle ") {
			order = append(order, line)
		}
	}
	want := []string{`tier "z" {`, `tier "a" {`, `tier "b" {`, `idle "second" {`, `idle "first" {`}
	if strings.Join(order, "|") != strings.Join(want, "|") {
		t.Errorf("block order = %q, want %q", order, want)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{90 * time.Second, "1m30s"},
		{15 * time.Minute, "15m"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + 5*time.Second, "1h0m5s"},
		{1500 * time.Millisecond, "1.5s"},
		{-2 * time.Minute, "-2m"},
	}
	for _, tt := range tests {
		got := FormatDuration(tt.in)
		if got != tt.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tt.in, got, tt.want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != tt.in {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", got, back, err, tt.in)
		}
	}
}

// A tier's preempt_grace is shown when set; when left out, a comment says
// what applies instead, and no attribute pins today's preemption.grace.
func TestShowPreemptGrace(t *testing.T) {
	p := mustParse(t, Source{Name: "a.hcl", Bytes: []byte(`
tier "urgent" {
  priority = 90
  preempt_grace = "0s"
}
tier "batch" { priority = 10 }
preemption { grace = "5m" }`)})
	out := p.String()
	for _, want := range []string{
		`preempt_grace = "0s"`,
		"# preempt_grace is left out: victims freed for its work get preemption.grace (5m, or a pool's grace).",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "preempt_grace ="); n != 1 {
		t.Errorf("preempt_grace set %d times, want once:\n%s", n, out)
	}
}
