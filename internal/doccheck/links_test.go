package doccheck

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ name, heading, want string }{
		{"plain words", "Queue and forecast", "queue-and-forecast"},
		{"punctuation dropped", "The checkpoint contract, every driver", "the-checkpoint-contract-every-driver"},
		{"code and quotes dropped", "`notify \"name\"`", "notify-name"},
		{"link text kept", "See [the policy](policy.md)", "see-the-policy"},
		{"hyphens and underscores kept", "steward_x-y", "steward_x-y"},
		{"parentheses dropped", "The soak (`make soak`)", "the-soak-make-soak"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Slug(tc.heading); got != tc.want {
				t.Errorf("Slug(%q) = %q, want %q", tc.heading, got, tc.want)
			}
		})
	}
}

func TestAnchors(t *testing.T) {
	src := strings.Join([]string{
		"# Title",
		"## Runbook",
		"```sh",
		"# not a heading",
		"```",
		"## Runbook",
		`<a name="explicit"></a>`,
		"#hashtag, not a heading",
	}, "\n")
	got := Anchors(src)
	want := map[string]bool{"title": true, "runbook": true, "runbook-1": true, "explicit": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Anchors = %v, want %v", got, want)
	}
}

func TestRefs(t *testing.T) {
	src := strings.Join([]string{
		"See [policy](reference/policy.md#tier-name) and [top](#title).", // 1
		"Code in `policy/engine/reserve.go`, Nomad's `nomad/job.go`.",    // 2
		"[web](https://example.com) `bin/steward` `a/*.go`",              // 3
		"```sh", // 4
		"cat [x](missing.md) `policy/missing.go`", // 5
		"```",                                   // 6
		"![chart](../docs/img/a.png \"title\")", // 7
	}, "\n")
	got := Refs("docs/x.md", src, map[string]bool{"policy": true, "docs": true, "bin": false})
	want := []Ref{
		{File: "docs/x.md", Line: 1, Target: "docs/reference/policy.md", Anchor: "tier-name"},
		{File: "docs/x.md", Line: 1, Target: "docs/x.md", Anchor: "title"},
		{File: "docs/x.md", Line: 2, Target: "policy/engine/reserve.go", Cited: true},
		{File: "docs/x.md", Line: 7, Target: "docs/img/a.png"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Refs =\n%v\nwant\n%v", got, want)
	}
}

func TestCheckRefs(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.md"), []byte("# Title\n## Runbook\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ref  Ref
		want string
	}{
		{"file exists", Ref{File: "b.md", Line: 1, Target: "a.md"}, ""},
		{"anchor resolves", Ref{File: "b.md", Line: 1, Target: "a.md", Anchor: "runbook"}, ""},
		{"missing file", Ref{File: "b.md", Line: 2, Target: "c.md"}, "b.md:2: link c.md: no such file"},
		{"missing anchor", Ref{File: "b.md", Line: 3, Target: "a.md", Anchor: "nope"}, "b.md:3: link a.md#nope: no heading has that anchor"},
		{"cited path missing", Ref{File: "b.md", Line: 4, Target: "x/y.go", Cited: true}, "b.md:4: cited path x/y.go: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(CheckRefs(root, []Ref{tc.ref}), "\n")
			if got != tc.want {
				t.Errorf("CheckRefs = %q, want %q", got, tc.want)
			}
		})
	}
}
