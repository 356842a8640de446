// Package version is Steward's version, the one the steward binary and its
// plugins report (steward version, the plugins' PluginInfo), and the
// version of Nomad it was built against.
//
// `make build` and `make dist` set Version with
// -ldflags "-X github.com/gpu-steward/steward/internal/version.Version=..."
// to the repository's VERSION file; a plain `go build` falls back to
// what the Go toolchain recorded (the module's version, or its VCS revision).
package version

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// Version is set at link time; empty in a plain `go build`.
var Version = ""

// base is the repository's VERSION less its pre-release (TestBaseIsVERSION):
// what a build that knows nothing better reports, as base + "-dev".
const base = "0.1.0"

// NomadModule is the module whose version Steward is built against.
const NomadModule = "github.com/hashicorp/nomad"

// String is the version: the one set at link time, else the module's
// version from the build info, else its VCS revision, else base-dev.
func String() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return base + "-dev"
	}
	return fromBuildInfo(info)
}

func fromBuildInfo(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 7 {
			rev = rev[:7]
		}
		return rev + dirty
	}
	return base + "-dev"
}

// Nomad is the version of github.com/hashicorp/nomad linked into this
// binary ("unknown" when the build recorded none).
func Nomad() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return depVersion(info, NomadModule)
}

func depVersion(info *debug.BuildInfo, path string) string {
	for _, d := range info.Deps {
		if d.Path == path {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}

// semver is what Nomad's plugin loader accepts as a plugin's version
// (hashicorp/go-version, which a bare commit hash is not).
var semver = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.~-]+)?(\+[0-9A-Za-z.~-]+)?$`)

// Plugin is the version the plugins report to Nomad: String when it is a
// version Nomad can parse (a release tag: "v0.2.0", or "v0.2.0-3-gabc1234"
// from git describe), else base-dev with the build's description as build
// metadata ("0.1.0-dev+ee3be66.dirty"): Nomad refuses to load a plugin whose
// version does not parse.
func Plugin() string {
	return pluginVersion(String())
}

func pluginVersion(v string) string {
	if semver.MatchString(v) {
		return v
	}
	meta := strings.Map(func(r rune) rune {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			return r
		}
		return '.'
	}, v)
	meta = strings.Trim(meta, ".")
	if meta == "" || v == base+"-dev" {
		return base + "-dev"
	}
	return base + "-dev+" + meta
}
