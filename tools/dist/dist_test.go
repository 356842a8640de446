package dist

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestPluginsAreSlim: the plugin binaries link neither the controller,
// the simulator, the plots nor Steward's Consul client; steward-gpu no
// Consul API at all (steward-exec gets it through Nomad's driver SDK,
// whose nomad/structs imports it: only Nomad's own packages may bring it).
func TestPluginsAreSlim(t *testing.T) {
	root := repoRoot(t)
	forbidden := []string{
		"github.com/gpu-steward/steward/controller",
		"github.com/gpu-steward/steward/sim",
		"github.com/gpu-steward/steward/command",
		"github.com/gpu-steward/steward/policy/engine",
		"gonum.org/v1/plot",
		"github.com/chromedp/",
	}
	for _, p := range platforms {
		for _, cmd := range []string{"./cmd/steward-gpu", "./cmd/steward-exec"} {
			deps := goList(t, root, p.goos, p.goarch, p.cgo, `{{.ImportPath}}|{{join .Imports ","}}`, cmd)
			for pkg, imports := range deps {
				for _, f := range forbidden {
					if pkg == f || strings.HasPrefix(pkg, f+"/") || strings.HasSuffix(f, "/") && strings.HasPrefix(pkg, f) {
						t.Errorf("%s (%s/%s, cgo %s) links %s", cmd, p.goos, p.goarch, p.cgo, pkg)
					}
				}
				if slices.Contains(imports, "github.com/hashicorp/consul/api") {
					if cmd == "./cmd/steward-gpu" || !strings.HasPrefix(pkg, "github.com/hashicorp/nomad/") {
						t.Errorf("%s (%s/%s): %s imports the Consul API", cmd, p.goos, p.goarch, pkg)
					}
				}
			}
		}
	}
}

// goList runs go list -deps with a format whose first |-separated field is
// the package: package -> the rest, split on commas.
func goList(t *testing.T, root, goos, goarch, cgo, format string, pkgs ...string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", format}, pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED="+cgo)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", pkgs, err, stderrOf(err))
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, rest, _ := strings.Cut(line, "|")
		deps[pkg] = strings.Split(rest, ",")
	}
	return deps
}

// TestDist runs dist.sh (what `make dist` runs) for this machine's
// platform only: each platform's binaries take as long again, and a
// platform other than the host's compiles every package anew. It checks
// the archive against SHA256SUMS with sha256sum -c, its contents, and the
// version its binaries report.
func TestDist(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Fatalf("sha256sum (coreutils) is needed to check the archives: %v", err)
	}
	root := repoRoot(t)
	out := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	const version = "v9.8.7-test"
	cmd := exec.Command(filepath.Join(root, "tools/dist/dist.sh"), version, out, platform)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DIST_BUILD_FLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dist.sh: %v\n%s", err, b)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = out
	if b, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c SHA256SUMS: %v\n%s", err, b)
	}
	name := "steward_" + version + "_" + runtime.GOOS + "_" + runtime.GOARCH
	files := untar(t, filepath.Join(out, name+".tar.gz"), filepath.Join(out, "x"))
	for _, want := range []string{"steward", "steward-gpu", "steward-exec", "LICENSE", "NOTICE", "README.md", "example.hcl",
		"acl/steward-controller.policy.hcl", "jobs/trainer.nomad.hcl"} {
		if !files[name+"/"+want] {
			t.Errorf("archive lacks %s", want)
		}
	}
	dir := filepath.Join(out, "x", name)
	for _, c := range []struct {
		bin  string
		args []string
		want []string
	}{
		{"steward", []string{"version"}, []string{"Steward " + version, "Built against Nomad v1.11.3"}},
		{"steward", []string{"-version"}, []string{"Steward " + version}},
		{"steward-gpu", []string{"-version"}, []string{"steward-gpu " + version, "Built against Nomad v1.11.3", "NVML: built in"}},
		{"steward-exec", []string{"-version"}, []string{"steward-exec " + version}},
	} {
		b, err := exec.Command(filepath.Join(dir, c.bin), c.args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s %v: %v\n%s", c.bin, c.args, err, b)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s %v printed %q, want it to contain %q", c.bin, c.args, b, w)
			}
		}
	}
}

// untar extracts a .tar.gz into dir and returns the names it holds.
func untar(t *testing.T, path, dir string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names[strings.TrimSuffix(h.Name, "/")] = true
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, want 0:0", h.Name, h.Uid, h.Gid)
		}
		target := filepath.Join(dir, h.Name)
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(os.PathSeparator)) {
			t.Fatalf("%s escapes the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			w, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(w, tr); err != nil {
				t.Fatal(err)
			}
			w.Close()
		}
	}
}
