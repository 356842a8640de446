package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSignWithReleaseKey: how a maintainer signs a release. sign.sh (what
// dist.sh runs) signs with the key DIST_GPG_KEY names in the maintainer's
// own GNUPGHOME, makes no key of its own, exports that key's public half
// alone, and gpgv accepts the signature against it; a DIST_GPG_KEY that
// names no secret key fails before anything is signed. (TestDist covers the
// throwaway key.)
func TestSignWithReleaseKey(t *testing.T) {
	for _, tool := range []string{"gpg", "gpgv", "gpgconf"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (Debian: gnupg, gpgv; `make gpg`): %v", tool, err)
		}
	}
	root := repoRoot(t)
	// The maintainer's keyring; a short path: gpg-agent's socket lives in it.
	home, err := os.MkdirTemp("/tmp", "steward-sign-test.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("gpgconf", "--homedir", home, "--kill", "all").Run()
		os.RemoveAll(home)
	})
	env := append(envWithout("GNUPGHOME", "DIST_GPG_KEY"), "GNUPGHOME="+home)
	gpg := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("gpg", append([]string{"--batch", "--quiet"}, args...)...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %v: %v\n%s", args, err, stderrOf(err))
		}
		return string(out)
	}
	gpg("--passphrase", "", "--quick-gen-key", "Release maintainer <release@steward.invalid>", "ed25519", "sign", "1d")
	gpg("--passphrase", "", "--quick-gen-key", "Another key <other@steward.invalid>", "ed25519", "sign", "1d")
	fpr := ""
	for _, line := range strings.Split(gpg("--with-colons", "--fingerprint", "release@steward.invalid"), "\n") {
		if f := strings.Split(line, ":"); f[0] == "fpr" {
			fpr = f[9]
			break
		}
	}
	if fpr == "" {
		t.Fatal("no fingerprint for the maintainer's key")
	}

	cases := []struct {
		name, key string
		ok        bool
		want      string
	}{
		{"the release key by fingerprint", fpr, true, "signed by " + fpr},
		{"a key the keyring lacks", "nobody@steward.invalid", false, "no secret key nobody@steward.invalid"},
		{"a user id that names two keys", "steward.invalid", false, "names several keys"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "SHA256SUMS"), strings.Repeat("ab", 32)+"  steward_1.0.0_linux_amd64.tar.gz\n")
			cmd := exec.Command(filepath.Join(root, "tools/dist/sign.sh"), dir)
			cmd.Env = append(env, "DIST_GPG_KEY="+c.key)
			out, err := cmd.CombinedOutput()
			if c.ok != (err == nil) || !strings.Contains(string(out), c.want) {
				t.Fatalf("sign.sh with DIST_GPG_KEY=%s: err %v, want ok=%v and %q:\n%s", c.key, err, c.ok, c.want, out)
			}
			if !c.ok {
				if _, err := os.Stat(filepath.Join(dir, "SHA256SUMS.sig")); err == nil {
					t.Error("sign.sh failed but left a SHA256SUMS.sig")
				}
				return
			}
			if strings.Contains(string(out), "throwaway") {
				t.Errorf("sign.sh made a throwaway key though DIST_GPG_KEY was set:\n%s", out)
			}
			if b, err := gpgv(dir, "SHA256SUMS"); err != nil || !strings.Contains(string(b), "Release maintainer") {
				t.Errorf("gpgv against the exported key: %v\n%s", err, b)
			}
			// The exported key is the release key alone: not the other key
			// of the maintainer's keyring.
			cmd = exec.Command("gpg", "--batch", "--with-colons", "--show-keys", filepath.Join(dir, "steward-release-key.asc"))
			cmd.Env = env
			keys, err := cmd.Output()
			if err != nil {
				t.Fatalf("gpg --show-keys: %v\n%s", err, stderrOf(err))
			}
			var fprs []string
			for _, line := range strings.Split(string(keys), "\n") {
				if f := strings.Split(line, ":"); f[0] == "fpr" {
					fprs = append(fprs, f[9])
				}
			}
			if len(fprs) != 1 || fprs[0] != fpr || strings.Contains(string(keys), "sec:") {
				t.Errorf("steward-release-key.asc holds %v (want only %s, public):\n%s", fprs, fpr, keys)
			}
		})
	}
}
