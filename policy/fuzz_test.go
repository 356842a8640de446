package policy

import (
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// FuzzParse feeds arbitrary text to the parser as HCL and as JSON. It must
// never panic; every error must say where it is; and a policy it accepts
// must keep the language's promises and survive a show round trip.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("..", "example.hcl"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, s := range []string{
		``,
		`tier "t" { priority = 1 }`,
		`tier "t" { priority = 0 }`,
		"tier \"a\" { priority = 5 }\ntenant \"x\" {\n  reserve = 4\n  limit = 2\n}\n",
		"tier \"a\" { priority = 5 }\npool \"p\" { owners = [\"b\", null] }\n",
		"tier \"a\" {\n priority = 5\n preemptible = false\n}\nidle \"i\" { tiers = [\"a\"] }\n",
		"defaults { tier = \"x\" }\ntier \"y\" { priority = 2 }\n",
		"tier \"t\" { priority = 1 }\npreemption {\n checkpoint_signal = \"usr1\"\n promote { boost = 5 }\n}\n",
		"tier \"t\" { priority = var.x }\n",
		`{"tier": {"t": {"priority": 10}}, "tenant": {"x": {"limit": 3}}}`,
		`{"tier": {"t": {"priority": "${x}"}}}`,
		"tier \"t\" { priority = 1 }\ntier \"t\" { priority = 2 }\n",
		"tier \"t\" { priority = 1 }\nidle \"i\" { after = \"-1s\" threshold = 1e400 }\n",
		"tier \"t\" { priority = 1 }\nidle \"i\" {\n after = \"2m\"\n warn_before = \"1m\"\n}\n",
		"tier \"t\" { priority = 1 }\nnotify \"n\" {\n url = \"http://127.0.0.1:1/x\"\n headers_from_env = { \"A.b\" = \"E\" }\n events = [\"hold\"]\n}\n",
		"tier \"t\" { priority = 1 }\ntenant \"a\" { reserve = 3 }\ndepartment \"d\" {\n tenants = [\"a\", \"a\", \"z\"]\n reserve = 2\n limit = -1\n weight = 0\n}\n",
		`{"tier": {"t": {"priority": 1}}, "tenant": {"a": {}}, "department": {"d": {"tenants": ["a"], "limit": 1}, "e": {"tenants": ["a"]}}}`,
		`{"tier": {"t": {"priority": 1}}, "notify": {"n": {"url_env": "H", "attempts": 2, "timeout": "1s"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		for _, name := range []string{"fuzz.hcl", "fuzz.json"} {
			p, diags := ParseBytes(name, src)
			for _, d := range diags {
				if d.Subject == nil || d.Subject.Filename != name || d.Subject.Start.Line < 1 {
					t.Fatalf("%s: diagnostic without a place in the file: %v", name, d)
				}
			}
			if diags.HasErrors() {
				if p != nil {
					t.Fatalf("%s: a policy came back with errors %v", name, diags)
				}
				continue
			}
			if p == nil {
				t.Fatalf("%s: no policy and no errors", name)
			}
			checkInvariants(t, p)
			out := p.String()
			again, diags := ParseBytes("show.hcl", []byte(out))
			if diags.HasErrors() {
				t.Fatalf("%s: show output does not parse: %v\n%s", name, diags, out)
			}
			samePolicy(t, again, p)
		}
	})
}

// checkInvariants checks what the engine relies on, written out here
// independently of validate.go.
func checkInvariants(t *testing.T, p *Policy) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n%s", append(args, p.String())...)
	}
	if len(p.Tiers) == 0 {
		fail("no tiers")
	}
	if p.Tiers[p.Defaults.Tier] == nil {
		fail("default tier %q is not a tier", p.Defaults.Tier)
	}
	if p.Defaults.TierMetaKey == "" || p.Defaults.GangMetaKey == "" || p.Defaults.CheckpointMetaKey == "" {
		fail("empty meta key in %+v", p.Defaults)
	}
	for name, tier := range p.Tiers {
		if tier == nil || tier.Name != name || tier.Priority < MinPriority || tier.Priority > MaxPriority {
			fail("bad tier %q: %+v", name, tier)
		}
	}
	namespaces := map[string]bool{}
	for name, tn := range p.Tenants {
		if tn == nil || tn.Name != name || tn.Namespace == "" || namespaces[tn.Namespace] {
			fail("bad tenant %q: %+v", name, tn)
		}
		namespaces[tn.Namespace] = true
		if tn.Reserve < 0 || (tn.Limit != Unlimited && tn.Limit < tn.Reserve) {
			fail("tenant %q: reserve %d, limit %d", name, tn.Reserve, tn.Limit)
		}
		if !(tn.Weight > 0) || math.IsInf(tn.Weight, 0) {
			fail("tenant %q: weight %v", name, tn.Weight)
		}
	}
	for name, pl := range p.Pools {
		if pl == nil || pl.Name != name || pl.NodePool == "" && len(pl.Models) == 0 || pl.Grace < 0 {
			fail("bad pool %q: %+v", name, pl)
		}
		for other, q := range p.Pools {
			if other != name && len(pl.Owners) > 0 && len(q.Owners) > 0 && (pl.NodePool == q.NodePool || pl.NodePool == "" || q.NodePool == "") &&
				(len(pl.Models) == 0 || len(q.Models) == 0 || slices.ContainsFunc(pl.Models, func(m string) bool { return slices.Contains(q.Models, m) })) {
				fail("pools %q and %q with owners overlap", name, other)
			}
		}
		for _, o := range pl.Owners {
			if p.Tiers[o] == nil {
				fail("pool %q: unknown owner %q", name, o)
			}
		}
	}
	for _, r := range p.Idle {
		for _, tier := range r.Tiers {
			if tr := p.Tiers[tier]; tr == nil || !tr.Preemptible {
				fail("idle %q: tier %q unknown or not preemptible", r.Name, tier)
			}
		}
		for _, tn := range r.Tenants {
			if p.Tenants[tn] == nil {
				fail("idle %q: unknown tenant %q", r.Name, tn)
			}
		}
		if !(r.Threshold >= 0 && r.Threshold <= 100) || r.After < 0 {
			fail("idle %q: threshold %v after %v", r.Name, r.Threshold, r.After)
		}
		if (r.Mode != IdleModePressure && r.Mode != IdleModeAlways) || (r.Action != IdleActionStop && r.Action != IdleActionRequeue) {
			fail("idle %q: mode %q action %q", r.Name, r.Mode, r.Action)
		}
		if r.WarnBefore < 0 || r.WarnBefore > 0 && r.WarnBefore >= r.After {
			fail("idle %q: warn_before %v after %v", r.Name, r.WarnBefore, r.After)
		}
	}
	notifies := map[string]bool{}
	for _, n := range p.Notify {
		if n == nil || n.Name == "" || notifies[n.Name] || (n.URL == "") == (n.URLEnv == "") || n.Timeout <= 0 || n.Attempts < 1 {
			fail("bad notify %+v", n)
		}
		notifies[n.Name] = true
		for _, raw := range []string{n.URL, n.UIURL} {
			if u, err := url.Parse(raw); raw != "" && (err != nil || u.Host == "" || u.User != nil || u.Scheme != "http" && u.Scheme != "https") {
				fail("notify %q: bad address %q", n.Name, raw)
			}
		}
		for _, e := range n.Events {
			if !slices.Contains(NotifyEvents(), e) {
				fail("notify %q: unknown event %q", n.Name, e)
			}
		}
		for _, tn := range n.Tenants {
			if p.Tenants[tn] == nil {
				fail("notify %q: unknown tenant %q", n.Name, tn)
			}
		}
		for h, env := range n.HeadersFromEnv {
			if h == "" || env == "" || strings.EqualFold(h, "Idempotency-Key") || strings.ContainsAny(h, " :\n") {
				fail("notify %q: bad header %q from %q", n.Name, h, env)
			}
		}
	}
	pr := p.Preemption
	if pr.MinRuntime < 0 || pr.Grace < 0 || pr.MaxPerJobPerHour < 0 ||
		pr.Promote.AfterPreemptions < 0 || pr.Promote.AfterWait < 0 || pr.Promote.Boost < 0 || pr.Promote.Boost > MaxPriority {
		fail("bad preemption %+v", pr)
	}
	if sig, err := NormalizeSignal(pr.CheckpointSignal); err != nil || sig != pr.CheckpointSignal {
		fail("checkpoint signal %q is not canonical", pr.CheckpointSignal)
	}
	if err := p.Validate(); err != nil {
		fail("parsed policy fails Validate: %v", err)
	}
}

// Diagnostics must be sorted by file and position whatever found them.
func TestDiagnosticsSorted(t *testing.T) {
	_, diags := ParseSources(
		Source{Name: "a.hcl", Bytes: []byte("tier \"t\" { priority = 0 }\nidle \"i\" { mode = \"x\" }\n")},
		Source{Name: "b.hcl", Bytes: []byte("tenant \"x\" { weight = 0 }\nbogus {}\n")},
	)
	var last hcl.Pos
	lastFile := "a.hcl"
	for _, d := range diags {
		if d.Subject.Filename != lastFile {
			if d.Subject.Filename != "b.hcl" {
				t.Fatalf("files out of order: %v", diags)
			}
			lastFile, last = d.Subject.Filename, hcl.Pos{}
		}
		if d.Subject.Start.Byte < last.Byte {
			t.Fatalf("positions out of order: %v", diags)
		}
		last = d.Subject.Start
	}
	if len(diags) != 4 {
		t.Errorf("got %d diagnostics, want 4: %v", len(diags), diags)
	}
}
