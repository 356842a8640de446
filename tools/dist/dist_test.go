package dist

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
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
// platform only, with the version in VERSION: each platform's binaries
// take as long again, and a platform other than the host's compiles every
// package anew. It checks the signature of SHA256SUMS with gpgv against
// the exported key alone, every archive against SHA256SUMS with sha256sum
// -c, the archive's contents and the version its binaries report; that a
// changed archive or changed sums fail verification; and that
// install-plugins.sh installs the plugins, verified, and refuses a changed
// archive.
func TestDist(t *testing.T) {
	for _, tool := range []string{"sha256sum", "gpg", "gpgv", "gpgconf"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to sign and check the release (Debian: gnupg, gpgv, coreutils; `make gpg` installs them): %v", tool, err)
		}
	}
	root := repoRoot(t)
	out := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	version := versionFile(t, root)
	cmd := exec.Command(filepath.Join(root, "tools/dist/dist.sh"), version, out, platform)
	cmd.Dir = root
	cmd.Env = append(envWithout("DIST_GPG_KEY", "GNUPGHOME"), "DIST_BUILD_FLAGS=")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dist.sh: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "throwaway key") {
		t.Errorf("dist.sh signed with a key made for the build without saying so:\n%s", b)
	}
	name := "steward_" + version + "_" + runtime.GOOS + "_" + runtime.GOARCH
	archive := filepath.Join(out, name+".tar.gz")

	t.Run("the signature verifies with gpgv against the exported key", func(t *testing.T) {
		if b, err := gpgv(out, "SHA256SUMS"); err != nil {
			t.Fatalf("gpgv: %v\n%s", err, b)
		}
		asc, err := os.ReadFile(filepath.Join(out, "steward-release-key.asc"))
		if err != nil || !strings.Contains(string(asc), "BEGIN PGP PUBLIC KEY BLOCK") || strings.Contains(string(asc), "PRIVATE") {
			t.Errorf("steward-release-key.asc is not an armored public key (err %v):\n%.200s", err, asc)
		}
	})
	t.Run("every file the sums name verifies", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{name + ".tar.gz", "install-plugins.sh"} {
			if !strings.Contains(string(sums), "  "+want+"\n") {
				t.Errorf("SHA256SUMS lacks %s:\n%s", want, sums)
			}
		}
		check := exec.Command("sha256sum", "-c", "--strict", "SHA256SUMS")
		check.Dir = out
		if b, err := check.CombinedOutput(); err != nil {
			t.Fatalf("sha256sum -c SHA256SUMS: %v\n%s", err, b)
		}
	})
	t.Run("a changed archive fails its sum", func(t *testing.T) {
		bad := t.TempDir()
		copyFile(t, filepath.Join(out, "SHA256SUMS"), filepath.Join(bad, "SHA256SUMS"))
		copyFile(t, filepath.Join(out, "install-plugins.sh"), filepath.Join(bad, "install-plugins.sh"))
		copyFile(t, archive, filepath.Join(bad, name+".tar.gz"))
		flipLastByte(t, filepath.Join(bad, name+".tar.gz"))
		check := exec.Command("sha256sum", "-c", "SHA256SUMS")
		check.Dir = bad
		if b, err := check.CombinedOutput(); err == nil || !strings.Contains(string(b), name+".tar.gz: FAILED") {
			t.Fatalf("sha256sum -c passed a changed archive (err %v):\n%s", err, b)
		}
	})
	t.Run("changed sums fail the signature", func(t *testing.T) {
		bad := t.TempDir()
		for _, f := range []string{"SHA256SUMS", "SHA256SUMS.sig", "steward-release-key.gpg"} {
			copyFile(t, filepath.Join(out, f), filepath.Join(bad, f))
		}
		// The forger's move: a new archive, and its sum in place of the old.
		f, err := os.OpenFile(filepath.Join(bad, "SHA256SUMS"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(strings.Repeat("0", 64) + "  evil.tar.gz\n")
		f.Close()
		if b, err := gpgv(bad, "SHA256SUMS"); err == nil || !strings.Contains(string(b), "BAD signature") {
			t.Fatalf("gpgv passed changed sums (err %v):\n%s", err, b)
		}
	})

	files := untar(t, archive, filepath.Join(out, "x"))
	for _, want := range []string{"steward", "steward-gpu", "steward-exec", "trainer", "LICENSE", "NOTICE", "README.md", "VERSION",
		"CHANGELOG.md", "example.hcl", "acl/steward-controller.policy.hcl", "jobs/trainer.nomad.hcl"} {
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
		{"steward", []string{"version"}, []string{"Steward " + version + "\n", "Built against Nomad v1.11.3"}},
		{"steward", []string{"-version"}, []string{"Steward " + version + "\n"}},
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

	t.Run("install-plugins.sh installs the verified plugins", func(t *testing.T) {
		pluginDir := filepath.Join(t.TempDir(), "nomad", "plugins")
		inst := exec.Command(filepath.Join(out, "install-plugins.sh"), "-dir", pluginDir)
		inst.Dir = t.TempDir() // run from anywhere: it finds the release next to itself
		b, err := inst.CombinedOutput()
		if err != nil {
			t.Fatalf("install-plugins.sh: %v\n%s", err, b)
		}
		entries, err := os.ReadDir(pluginDir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		if strings.Join(got, " ") != "steward-exec steward-gpu" {
			t.Errorf("plugin_dir holds %v, want exactly steward-exec and steward-gpu (no temporary files)", got)
		}
		for _, p := range []string{"steward-gpu", "steward-exec"} {
			fi, err := os.Stat(filepath.Join(pluginDir, p))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o755 {
				t.Errorf("%s has mode %v, want 0755", p, fi.Mode().Perm())
			}
			if a, b := sha256File(t, filepath.Join(pluginDir, p)), sha256File(t, filepath.Join(dir, p)); a != b {
				t.Errorf("installed %s has sha256 %s, the archive's %s", p, a, b)
			}
			if !strings.Contains(string(b), "installed "+filepath.Join(pluginDir, p)) {
				t.Errorf("install-plugins.sh did not say it installed %s:\n%s", p, b)
			}
		}
		v, err := exec.Command(filepath.Join(pluginDir, "steward-gpu"), "-version").CombinedOutput()
		if err != nil || !strings.Contains(string(v), "steward-gpu "+version) {
			t.Errorf("installed steward-gpu -version: %v\n%s", err, v)
		}
	})
	t.Run("install-plugins.sh refuses what does not verify", func(t *testing.T) {
		cases := []struct {
			name   string
			change func(t *testing.T, rel string)
			want   string
		}{
			{"a changed archive", func(t *testing.T, rel string) { flipLastByte(t, filepath.Join(rel, name+".tar.gz")) },
				"but " + filepath.Join("REL", "SHA256SUMS") + " says"},
			{"changed sums", func(t *testing.T, rel string) {
				// The sum of a changed archive, written over the real one.
				a := filepath.Join(rel, name+".tar.gz")
				flipLastByte(t, a)
				sums, err := os.ReadFile(filepath.Join(rel, "SHA256SUMS"))
				if err != nil {
					t.Fatal(err)
				}
				var lines []string
				for _, l := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
					if strings.HasSuffix(l, "  "+name+".tar.gz") {
						l = sha256File(t, a) + "  " + name + ".tar.gz"
					}
					lines = append(lines, l)
				}
				writeFile(t, filepath.Join(rel, "SHA256SUMS"), strings.Join(lines, "\n")+"\n")
			}, "does not verify"},
			{"no signature", func(t *testing.T, rel string) { os.Remove(filepath.Join(rel, "SHA256SUMS.sig")) }, "SHA256SUMS.sig are needed"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				rel := t.TempDir()
				for _, f := range []string{name + ".tar.gz", "SHA256SUMS", "SHA256SUMS.sig", "steward-release-key.gpg", "install-plugins.sh"} {
					copyFile(t, filepath.Join(out, f), filepath.Join(rel, f))
				}
				c.change(t, rel)
				pluginDir := t.TempDir()
				b, err := exec.Command(filepath.Join(rel, "install-plugins.sh"), "-dir", pluginDir).CombinedOutput()
				msg := strings.ReplaceAll(string(b), rel, "REL")
				if err == nil || !strings.Contains(msg, c.want) {
					t.Errorf("install-plugins.sh: err %v, want a failure saying %q:\n%s", err, c.want, msg)
				}
				if entries, _ := os.ReadDir(pluginDir); len(entries) != 0 {
					t.Errorf("install-plugins.sh refused but wrote %d files into the plugin_dir", len(entries))
				}
			})
		}
	})
}

// gpgv verifies dir/file against dir/file.sig with the key in
// dir/steward-release-key.gpg alone, as a user does.
func gpgv(dir, file string) ([]byte, error) {
	return exec.Command("gpgv", "--keyring", filepath.Join(dir, "steward-release-key.gpg"),
		filepath.Join(dir, file+".sig"), filepath.Join(dir, file)).CombinedOutput()
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func flipLastByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
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
