package version

import (
	"os"
	"runtime/debug"
	"strings"
	"testing"

	goversion "github.com/hashicorp/go-version"
)

// Nomad's plugin loader parses each plugin's version with go-version and
// refuses the plugin when it does not parse: whatever make or go build
// gives us, the plugins must report a version that does.
func TestPluginVersionParsesAsNomadDoes(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"release tag", "v0.2.0", "v0.2.0"},
		{"commits after a tag", "v0.2.0-3-gabc1234", "v0.2.0-3-gabc1234"},
		{"commits after a tag, dirty", "v0.2.0-3-gabc1234-dirty", "v0.2.0-3-gabc1234-dirty"},
		{"no tag: a bare commit", "ee3be66", "0.1.0-dev+ee3be66"},
		{"no tag, dirty", "ee3be66-dirty", "0.1.0-dev+ee3be66.dirty"},
		{"a go pseudo-version", "v0.0.0-20261126064841-ee3be66abcde+dirty", "v0.0.0-20261126064841-ee3be66abcde+dirty"},
		{"the fallback", "0.1.0-dev", "0.1.0-dev"},
		{"nothing usable", "???", "0.1.0-dev"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := pluginVersion(c.in)
			if got != c.want {
				t.Errorf("pluginVersion(%q) = %q, want %q", c.in, got, c.want)
			}
			if _, err := goversion.NewVersion(got); err != nil {
				t.Errorf("Nomad would refuse the plugin: version %q does not parse: %v", got, err)
			}
		})
	}
}

func TestVersionFromBuildInfo(t *testing.T) {
	cases := []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"go install of a tagged module", debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, "v0.2.0"},
		{"a checkout, clean", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "ee3be66abcdef0123"}, {Key: "vcs.modified", Value: "false"}}}, "ee3be66"},
		{"a checkout, modified", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "ee3be66abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, "ee3be66-dirty"},
		{"nothing recorded", debug.BuildInfo{}, "0.1.0-dev"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := fromBuildInfo(&c.info); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestNomadVersionFromDeps(t *testing.T) {
	info := &debug.BuildInfo{Deps: []*debug.Module{
		{Path: "github.com/hashicorp/nomad/api", Version: "v0.0.0-20260907080526-08ef8f3d26da"},
		{Path: NomadModule, Version: "v1.11.3"},
	}}
	if got := depVersion(info, NomadModule); got != "v1.11.3" {
		t.Errorf("got %q, want v1.11.3 (the agent module, not its api)", got)
	}
	if got := depVersion(&debug.BuildInfo{}, NomadModule); got != "unknown" {
		t.Errorf("without the module: got %q, want unknown", got)
	}
}

// TestBaseIsVERSION: the fallback a build without ldflags reports
// (base-dev) is the repository's VERSION, less its pre-release: a release
// bumps VERSION, and this test, the constant.
func TestBaseIsVERSION(t *testing.T) {
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatalf("reading the repository's VERSION: %v", err)
	}
	v := strings.TrimSpace(string(b))
	if core, _, _ := strings.Cut(v, "-"); core != base {
		t.Errorf("VERSION is %q, version.base is %q: bump base with VERSION", v, base)
	}
}
