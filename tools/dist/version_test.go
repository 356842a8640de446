package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	goversion "github.com/hashicorp/go-version"
)

// versionFile is the repository's VERSION: one line, a semantic version
// without a leading "v" (what the archives' names and the image tags use).
func versionFile(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatalf("reading VERSION: %v", err)
	}
	v := strings.TrimSuffix(string(b), "\n")
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`).MatchString(v) {
		t.Fatalf("VERSION is %q: want one line MAJOR.MINOR.PATCH[-PRERELEASE], e.g. 0.1.0-dev or 0.1.0", b)
	}
	// Nomad's plugin loader refuses a plugin whose version does not parse.
	if _, err := goversion.NewVersion(v); err != nil {
		t.Fatalf("VERSION %q does not parse as Nomad parses a plugin's version: %v", v, err)
	}
	return v
}

// TestVersionFileNamesChangelogTop: a release bumps VERSION and the
// CHANGELOG's top section together; the top section's heading is
// "## VERSION" or "## VERSION (anything)" and a pre-release (-dev) says it
// is unreleased while a release does not.
func TestVersionFileNamesChangelogTop(t *testing.T) {
	root := repoRoot(t)
	v := versionFile(t, root)
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	top := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			top = strings.TrimPrefix(line, "## ")
			break
		}
	}
	if top == "" {
		t.Fatal("CHANGELOG.md has no \"## \" section")
	}
	name, rest, _ := strings.Cut(top, " ")
	if name != v {
		t.Fatalf("CHANGELOG.md's top section is %q, VERSION is %q: bump them together (CONTRIBUTING.md, Cutting a release)", top, v)
	}
	unreleased := strings.Contains(rest, "unreleased")
	if pre := strings.Contains(v, "-"); pre != unreleased {
		t.Errorf("CHANGELOG.md's top section %q: a pre-release version (%v) says \"(unreleased)\", a release gives its date", top, pre)
	}
}

// TestMakeStampsVersionFile: make takes its version from VERSION (not from
// git describe) and links it into steward and the plugins.
func TestMakeStampsVersionFile(t *testing.T) {
	root := repoRoot(t)
	v := versionFile(t, root)
	cmd := exec.Command("make", "-s", "--no-print-directory", "version")
	cmd.Dir = root
	cmd.Env = envWithout(makeEnv...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make version: %v\n%s", err, stderrOf(err))
	}
	if got := strings.TrimSpace(string(out)); got != v {
		t.Errorf("make version = %q, VERSION says %q", got, v)
	}
	// -n prints what build and plugins would run without running it.
	cmd = exec.Command("make", "-n", "--no-print-directory", "-B", "build", "plugins")
	cmd.Dir = root
	cmd.Env = envWithout(makeEnv...)
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("make -n build plugins: %v\n%s", err, stderrOf(err))
	}
	want := "internal/version.Version=" + v
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "go build") && (strings.Contains(line, "-o ") && !strings.Contains(line, "trainer")) &&
			!strings.Contains(line, want) {
			t.Errorf("a build make runs does not stamp %s:\n%s", want, line)
		}
	}
	if !strings.Contains(string(out), want) {
		t.Errorf("make -n build plugins never stamps %s:\n%s", want, out)
	}
}

// makeEnv are what a make started by a test must not inherit: VERSION
// overrides the file, and a make above the test (make test, make unit)
// passes its command-line variables (VERSION=... included) down in
// MAKEFLAGS.
var makeEnv = []string{"VERSION", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}

// envWithout is the environment less the named variables (a VERSION in the
// environment overrides the file in make, as it should).
func envWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}
