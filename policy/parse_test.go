package policy

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul-template/signals"
	"github.com/hashicorp/hcl/v2"
)

func durationPtr(d time.Duration) *time.Duration { return &d }

// examplePolicy is what ../example.hcl must resolve to.
func examplePolicy() *Policy {
	return &Policy{
		Defaults: Defaults{
			Tier:              "training",
			TierMetaKey:       "steward.tier",
			GangMetaKey:       "steward.gang",
			CheckpointMetaKey: "steward.checkpoint_signal",
			UnnamedTiers:      []string{"training"},
		},
		Tiers: map[string]*Tier{
			"inference":   {Name: "inference", Priority: 90, Preemptible: false, PreemptGrace: durationPtr(0), BeyondReserve: BeyondReserveRun},
			"build":       {Name: "build", Priority: 80, Preemptible: false},
			"interactive": {Name: "interactive", Priority: 60, Preemptible: true, PreemptsReserved: []string{"training"}},
			"training":    {Name: "training", Priority: 40, Preemptible: true, Pools: []string{"onprem", "cloud"}},
		},
		Tenants: map[string]*Tenant{
			"product": {Name: "product", Namespace: "product", Reserve: 4, Limit: 8, Weight: 1},
			"research": {Name: "research", Namespace: "research", Reserve: 4, Limit: 6, Weight: 1,
				Tiers: []string{"interactive", "training"}, DefaultTier: "training",
				Quotas: map[string]*Quota{"h100": {Reserve: 2, Limit: 4}}},
			"platform": {Name: "platform", Namespace: "platform", Reserve: 0, Limit: 2, Weight: 0.5,
				Tiers: []string{"interactive", "training"}, Pools: []string{"cloud", "onprem"}},
		},
		Departments: map[string]*Department{
			"infra": {Name: "infra", Tenants: []string{"platform"}, Reserve: 0, Limit: 2, Weight: 0.5},
		},
		Pools: map[string]*Pool{
			"serving": {Name: "serving", NodePool: "serving", Owners: []string{"inference"}, Grace: 0},
			"onprem":  {Name: "onprem", NodePool: "default"},
			"cloud":   {Name: "cloud", NodePool: "cloud"},
			"h100":    {Name: "h100", Models: []string{"H100 80GB HBM3"}, Order: PoolOrderLargestFirst},
		},
		Idle: []*IdleRule{
			{Name: "notebooks", Tiers: []string{"interactive"}, Threshold: 10, After: 15 * time.Minute,
				Mode: IdleModePressure, Action: IdleActionRequeue, MaxSnooze: 4 * time.Hour, WarnBefore: 5 * time.Minute},
			{Name: "abandoned", Tiers: []string{"training"}, Tenants: []string{"research", "platform"},
				Threshold: 2, After: time.Hour, Mode: IdleModeAlways, Action: IdleActionStop, MaxSnooze: DefaultIdleMaxSnooze},
		},
		Preemption: Preemption{
			MinRuntime:       10 * time.Minute,
			Grace:            2 * time.Minute,
			CheckpointSignal: "SIGUSR1",
			MaxPerJobPerHour: 2,
			MaxPerJob:        10,
			ResumeOrder:      ResumeOrderPreemptedFirst,
			// Fair share over time is on in example.hcl (issue 31 item 3).
			FairShareHalfLife:     24 * time.Hour,
			FairShareReclaimAbove: 1.5,
			Promote:               Promote{AfterPreemptions: 3, AfterWait: time.Hour, Boost: 10},
		},
		Notify: []*Notify{
			{Name: "ops", URLEnv: "STEWARD_OPS_WEBHOOK", Timeout: DefaultNotifyTimeout, Attempts: DefaultNotifyAttempts},
			{Name: "research", URL: "https://hooks.example.com/steward/research",
				Events:  []string{NotifyPreempt, NotifyMigrate, NotifyIdleWarning, NotifyIdleReclaim, NotifyResume},
				Tenants: []string{"research"}, UIURL: "https://nomad.example.com",
				HeadersFromEnv: map[string]string{"Authorization": "STEWARD_RESEARCH_WEBHOOK_AUTH"},
				Timeout:        10 * time.Second, Attempts: 8},
			{Name: "users", URL: "https://relay.example.com/steward",
				Events: []string{NotifyStart, NotifyFinish, NotifyPreempt, NotifyIdleWarning},
				PerJob: true, RecipientHeader: "X-Steward-Recipient", Recipients: `[a-z0-9.-]+@example\.com`,
				Timeout: DefaultNotifyTimeout, Attempts: DefaultNotifyAttempts},
		},
	}
}

// mustParse parses sources and fails the test on any diagnostic at all.
func mustParse(t *testing.T, srcs ...Source) *Policy {
	t.Helper()
	p, diags := ParseSources(srcs...)
	if len(diags) > 0 || p == nil {
		t.Fatalf("parse: %v", diags)
	}
	return p
}

// samePolicy compares two policies, ignoring the files they came from.
func samePolicy(t *testing.T, got, want *Policy) {
	t.Helper()
	g, w := *got, *want
	g.Files, w.Files = nil, nil
	if !reflect.DeepEqual(&g, &w) {
		t.Errorf("policy differs\n--- got\n%s\n--- want\n%s", g.String(), w.String())
	}
}

func TestParseExample(t *testing.T) {
	path := filepath.Join("..", "example.hcl")
	p, diags := Parse(path)
	if len(diags) > 0 {
		t.Fatalf("example.hcl: %v", diags)
	}
	samePolicy(t, p, examplePolicy())
	if !reflect.DeepEqual(p.Files, []string{path}) {
		t.Errorf("Files = %v, want [%s]", p.Files, path)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestParseDefaults(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want func(p *Policy) // edits defaultPolicy() into the expected policy
	}{
		{
			name: "one tier is the default tier",
			src:  `tier "batch" { priority = 50 }`,
			want: func(p *Policy) {
				p.Tiers["batch"] = &Tier{Name: "batch", Priority: 50, Preemptible: true}
				p.Defaults.Tier = "batch"
			},
		},
		{
			name: "preempt_grace is kept as set; left out it is nil",
			src: `
tier "urgent" {
  priority = 90
  preempt_grace = "0s"
}
tier "soon" {
  priority = 50
  preempt_grace = "1m30s"
}
tier "batch" { priority = 10 }`,
			want: func(p *Policy) {
				p.Tiers["urgent"] = &Tier{Name: "urgent", Priority: 90, Preemptible: true, PreemptGrace: durationPtr(0)}
				p.Tiers["soon"] = &Tier{Name: "soon", Priority: 50, Preemptible: true, PreemptGrace: durationPtr(90 * time.Second)}
				p.Tiers["batch"] = &Tier{Name: "batch", Priority: 10, Preemptible: true}
				p.Defaults.Tier = "batch"
			},
		},
		{
			name: "preempts_reserved is kept as listed",
			src: `
tier "interactive" {
  priority = 60
  preempts_reserved = ["training"]
}
tier "training" { priority = 40 }`,
			want: func(p *Policy) {
				p.Tiers["interactive"] = &Tier{Name: "interactive", Priority: 60, Preemptible: true, PreemptsReserved: []string{"training"}}
				p.Tiers["training"] = &Tier{Name: "training", Priority: 40, Preemptible: true}
				p.Defaults.Tier = "training"
			},
		},
		{
			name: "default tier is the lowest priority, first by name among equals",
			src: `
tier "high" { priority = 90 }
tier "zeta" { priority = 10 }
tier "alpha" { priority = 10 }`,
			want: func(p *Policy) {
				p.Tiers["high"] = &Tier{Name: "high", Priority: 90, Preemptible: true}
				p.Tiers["zeta"] = &Tier{Name: "zeta", Priority: 10, Preemptible: true}
				p.Tiers["alpha"] = &Tier{Name: "alpha", Priority: 10, Preemptible: true}
				p.Defaults.Tier = "alpha"
			},
		},
		{
			name: "a notify block with only a URL takes every default; notify blocks keep file order",
			src: `
tier "t" { priority = 1 }
notify "z" { url = "https://z.example.com/hook" }
notify "a" { url_env = "A_HOOK" }`,
			want: func(p *Policy) {
				p.Tiers["t"] = &Tier{Name: "t", Priority: 1, Preemptible: true}
				p.Defaults.Tier = "t"
				p.Notify = []*Notify{
					{Name: "z", URL: "https://z.example.com/hook", Timeout: DefaultNotifyTimeout, Attempts: DefaultNotifyAttempts},
					{Name: "a", URLEnv: "A_HOOK", Timeout: DefaultNotifyTimeout, Attempts: DefaultNotifyAttempts},
				}
			},
		},
		{
			name: "an idle rule's warn_before",
			src: `
tier "t" { priority = 1 }
idle "nb" {
  after       = "1h"
  warn_before = "10m"
}`,
			want: func(p *Policy) {
				p.Tiers["t"] = &Tier{Name: "t", Priority: 1, Preemptible: true}
				p.Defaults.Tier = "t"
				p.Idle = []*IdleRule{{Name: "nb", Threshold: DefaultIdleThreshold, After: time.Hour, WarnBefore: 10 * time.Minute,
					Mode: DefaultIdleMode, Action: DefaultIdleAction, MaxSnooze: DefaultIdleMaxSnooze}}
			},
		},
		{
			name: "empty blocks take every default",
			src: `
tier "t" { priority = 1 }
tenant "team" {}
pool "gpu" { owners = ["t"] }
idle "all" {}
preemption {}`,
			want: func(p *Policy) {
				p.Tiers["t"] = &Tier{Name: "t", Priority: 1, Preemptible: true}
				p.Defaults.Tier = "t"
				p.Tenants["team"] = &Tenant{Name: "team", Namespace: "team", Limit: Unlimited, Weight: DefaultTenantWeight}
				p.Pools["gpu"] = &Pool{Name: "gpu", NodePool: "gpu", Owners: []string{"t"}}
				p.Idle = []*IdleRule{{Name: "all", Threshold: DefaultIdleThreshold, After: DefaultIdleAfter,
					Mode: DefaultIdleMode, Action: DefaultIdleAction, MaxSnooze: DefaultIdleMaxSnooze}}
			},
		},
		{
			name: "preemption without promote keeps promote defaults",
			src: `
tier "t" { priority = 1 }
preemption {
  min_runtime = "0s"
  checkpoint_signal = "none"
  max_per_job_per_hour = 0
}`,
			want: func(p *Policy) {
				p.Tiers["t"] = &Tier{Name: "t", Priority: 1, Preemptible: true}
				p.Defaults.Tier = "t"
				p.Preemption.MinRuntime = 0
				p.Preemption.CheckpointSignal = ""
				p.Preemption.MaxPerJobPerHour = 0
			},
		},
		{
			name: "promote zeros turn promotion off",
			src: `
tier "t" { priority = 1 }
preemption {
  promote {
    after_preemptions = 0
    after_wait = "0s"
  }
}`,
			want: func(p *Policy) {
				p.Tiers["t"] = &Tier{Name: "t", Priority: 1, Preemptible: true}
				p.Defaults.Tier = "t"
				p.Preemption.Promote.AfterPreemptions = 0
				p.Preemption.Promote.AfterWait = 0
			},
		},
		{
			name: "empty lists are the same as absent ones",
			src: `
tier "t" { priority = 1 }
idle "all" {
  tiers = []
  tenants = []
}`,
			want: func(p *Policy) {
				p.Tiers["t"] = &Tier{Name: "t", Priority: 1, Preemptible: true}
				p.Defaults.Tier = "t"
				p.Idle = []*IdleRule{{Name: "all", Threshold: DefaultIdleThreshold, After: DefaultIdleAfter,
					Mode: DefaultIdleMode, Action: DefaultIdleAction, MaxSnooze: DefaultIdleMaxSnooze}}
			},
		},
		{
			name: "values convert as in other HCL tools",
			src: `
tier "t" {
  priority = "7"
  preemptible = "false"
}
tenant "team" {
  namespace = "ml-team"
  reserve = 2
  limit = 2
  weight = 2.5
}`,
			want: func(p *Policy) {
				p.Tiers["t"] = &Tier{Name: "t", Priority: 7, Preemptible: false}
				p.Defaults.Tier = "t"
				p.Tenants["team"] = &Tenant{Name: "team", Namespace: "ml-team", Reserve: 2, Limit: 2, Weight: 2.5}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, Source{Name: "a.hcl", Bytes: []byte(tt.src)})
			want := defaultPolicy()
			tt.want(want)
			samePolicy(t, got, want)
		})
	}
}

func TestParseSignals(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"canonical", "SIGUSR1", "SIGUSR1"},
		{"lower case without SIG", "usr1", "SIGUSR1"},
		{"upper case without SIG", "USR2", "SIGUSR2"},
		{"mixed case with SIG", "SigTerm", "SIGTERM"},
		{"none", "none", ""},
		{"NONE", "NONE", ""},
		{"empty", "", ""},
		{"hang up", "hup", "SIGHUP"},
		{"an alias", "SIGIOT", "SIGIOT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fmt.Sprintf("tier \"t\" { priority = 1 }\npreemption { checkpoint_signal = %q }\n", tt.in)
			p := mustParse(t, Source{Name: "a.hcl", Bytes: []byte(src)})
			if got := p.Preemption.CheckpointSignal; got != tt.want {
				t.Errorf("CheckpointSignal = %q, want %q", got, tt.want)
			}
			if got, err := NormalizeSignal(tt.in); err != nil || got != tt.want {
				t.Errorf("NormalizeSignal(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
	if _, err := NormalizeSignal("SIGFOO"); err == nil {
		t.Error("NormalizeSignal(SIGFOO) succeeded")
	}
}

func TestParseMultipleFiles(t *testing.T) {
	a := Source{Name: "a.hcl", Bytes: []byte(`
defaults { tier = "batch" }
tier "serve" { priority = 90 }
tenant "ml" { reserve = 2 }
idle "first" { threshold = 5 }
`)}
	b := Source{Name: "b.hcl", Bytes: []byte(`
tier "batch" { priority = 10 }
pool "serving" { owners = ["serve"] }
idle "second" { tenants = ["ml"] }
preemption { grace = "30s" }
`)}
	p := mustParse(t, a, b)
	if got := p.TierNames(); !reflect.DeepEqual(got, []string{"serve", "batch"}) {
		t.Errorf("tiers = %v", got)
	}
	if p.Defaults.Tier != "batch" {
		t.Errorf("default tier = %q, want batch (defined in the other file)", p.Defaults.Tier)
	}
	if len(p.Idle) != 2 || p.Idle[0].Name != "first" || p.Idle[1].Name != "second" {
		t.Errorf("idle rules not in file order: %v", p.Idle)
	}
	if p.Preemption.Grace != 30*time.Second {
		t.Errorf("grace = %v", p.Preemption.Grace)
	}
	if !reflect.DeepEqual(p.Files, []string{"a.hcl", "b.hcl"}) {
		t.Errorf("Files = %v", p.Files)
	}
}

func TestParseJSON(t *testing.T) {
	hclSrc := Source{Name: "p.hcl", Bytes: []byte(`
tier "serve" {
  priority = 90
  preemptible = false
}
tier "batch" { priority = 10 }
tenant "ml" {
  reserve = 2
  limit = 4
  weight = 0.5
}
pool "serving" { owners = ["serve"] }
idle "nb" {
  tiers = ["batch"]
  after = "5m"
}
preemption {
  checkpoint_signal = "term"
  promote { boost = 5 }
}
`)}
	jsonSrc := Source{Name: "p.json", Bytes: []byte(`{
  "tier": {
    "serve": {"priority": 90, "preemptible": false},
    "batch": {"priority": 10}
  },
  "tenant": {"ml": {"reserve": 2, "limit": 4, "weight": 0.5}},
  "pool": {"serving": {"owners": ["serve"]}},
  "idle": {"nb": {"tiers": ["batch"], "after": "5m"}},
  "preemption": {"checkpoint_signal": "term", "promote": {"boost": 5}}
}`)}
	samePolicy(t, mustParse(t, jsonSrc), mustParse(t, hclSrc))

	t.Run("errors have positions in the JSON file", func(t *testing.T) {
		_, diags := ParseBytes("p.json", []byte(`{
  "tier": {"a": {"priority": 900}}
}`))
		assertDiags(t, diags, wantDiag{"p.json:2,30", "Invalid priority", "between 1 and 100"})
	})
	t.Run("list elements have their own positions in JSON", func(t *testing.T) {
		_, diags := ParseBytes("p.json", []byte(`{
  "tier": {"serve": {"priority": 9}},
  "pool": {"p": {"owners": ["serve", "srve"]}}
}`))
		assertDiags(t, diags, wantDiag{"p.json:3,38", "Unknown tier", `There is no tier "srve". Did you mean "serve"?`})
	})
	t.Run("mixed with HCL", func(t *testing.T) {
		p := mustParse(t,
			Source{Name: "tiers.hcl", Bytes: []byte(`tier "a" { priority = 5 }`)},
			Source{Name: "tenants.json", Bytes: []byte(`{"tenant": {"x": {"reserve": 1}}}`)})
		if p.Tenants["x"] == nil || p.Tenants["x"].Reserve != 1 {
			t.Errorf("tenant from JSON file missing: %+v", p.Tenants)
		}
	})
}

func TestParseFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a := write("a.hcl", `tier "a" { priority = 5 }`)
	b := write("b.json", `{"tenant": {"x": {}}}`)
	if _, diags := Parse(a, b); len(diags) > 0 {
		t.Errorf("Parse: %v", diags)
	}

	tests := []struct {
		name    string
		files   []string
		summary string
	}{
		{"no files", nil, "No policy files"},
		{"missing file", []string{a, filepath.Join(dir, "nope.hcl")}, "Failed to read file"},
		{"same file twice", []string{a, a}, "Duplicate policy file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, diags := Parse(tt.files...)
			if p != nil || !diags.HasErrors() || diags[0].Summary != tt.summary {
				t.Errorf("got %v, %v; want error %q", p, diags, tt.summary)
			}
		})
	}
}

func TestWriteDiagnostics(t *testing.T) {
	p := NewParser()
	_, diags := p.ParseSources(Source{Name: "w.hcl", Bytes: []byte("tier \"a\" {\n  priority = 0\n}\n")})
	var b strings.Builder
	if err := p.WriteDiagnostics(&b, diags); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"w.hcl:2,14-15: error: Invalid priority\n",
		"   2:   priority = 0\n", // the source line
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	// One header per diagnostic: hcl's own ("Error: Invalid priority")
	// repeated the file:line,col one.
	if n := strings.Count(b.String(), "Invalid priority"); n != 1 {
		t.Errorf("the summary is printed %d times, want once:\n%s", n, b.String())
	}
	if strings.Contains(b.String(), "\x1b[") {
		t.Errorf("output is coloured:\n%q", b.String())
	}
}

// wantDiag is one expected diagnostic: where it points (file:line,column of
// its subject's start), its summary, and text its detail must contain.
type wantDiag struct {
	pos, summary, detail string
}

func diagPos(d *hcl.Diagnostic) string {
	if d.Subject == nil {
		return "(none)"
	}
	return fmt.Sprintf("%s:%d,%d", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
}

// assertDiags checks that diags are exactly want, in order.
func assertDiags(t *testing.T, diags hcl.Diagnostics, want ...wantDiag) {
	t.Helper()
	var got []string
	for _, d := range diags {
		got = append(got, fmt.Sprintf("%s %s: %s", diagPos(d), d.Summary, d.Detail))
	}
	if len(diags) != len(want) {
		t.Fatalf("got %d diagnostics, want %d:\n%s", len(diags), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		d := diags[i]
		if diagPos(d) != w.pos || d.Summary != w.summary || !strings.Contains(d.Detail, w.detail) {
			t.Errorf("diagnostic %d:\n got  %s\n want %s %s: ...%s...", i, got[i], w.pos, w.summary, w.detail)
		}
	}
}

func TestTierCapGrace(t *testing.T) {
	tests := []struct {
		name  string
		tier  Tier
		grace time.Duration
		want  time.Duration
	}{
		{"unset keeps the grace", Tier{}, 2 * time.Minute, 2 * time.Minute},
		{"zero stops at once", Tier{PreemptGrace: durationPtr(0)}, 2 * time.Minute, 0},
		{"shorter caps", Tier{PreemptGrace: durationPtr(30 * time.Second)}, 2 * time.Minute, 30 * time.Second},
		{"longer never lengthens", Tier{PreemptGrace: durationPtr(time.Hour)}, 2 * time.Minute, 2 * time.Minute},
		{"a pool's zero grace stays zero", Tier{PreemptGrace: durationPtr(time.Minute)}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tier.CapGrace(tt.grace); got != tt.want {
				t.Errorf("CapGrace(%v) = %v, want %v", tt.grace, got, tt.want)
			}
		})
	}
}

// TestNomadSignalsAreNomads: the names CheckpointSignal accepts are those
// Nomad's raw_exec and exec drivers send as named (consul-template's
// signals.SignalLookup, less SIGNULL); every other Linux name would reach
// the task as SIGINT.
func TestNomadSignalsAreNomads(t *testing.T) {
	want := map[string]bool{}
	for name := range signals.SignalLookup {
		if name != "SIGNULL" {
			want[name] = true
		}
	}
	if !maps.Equal(nomadSignals, want) {
		t.Errorf("nomadSignals %v, Nomad's %v", keys(nomadSignals), keys(want))
	}
	for name := range nomadSignals {
		if !linuxSignals[name] {
			t.Errorf("%s is no Linux signal name", name)
		}
	}
	for _, tc := range []struct{ in, want, err string }{
		{in: "usr1", want: "SIGUSR1"},
		{in: "none", want: ""},
		{in: "SIGPWR", err: `"SIGPWR" is a signal Nomad cannot send: its raw_exec and exec drivers would send SIGINT instead`},
		{in: "SIGFOO", err: `"SIGFOO" is not a Linux signal name`},
	} {
		got, err := CheckpointSignal(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("CheckpointSignal(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}
