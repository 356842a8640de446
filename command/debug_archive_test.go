package command

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDebugRedaction(t *testing.T) {
	const token = "0b4f6c2e-9a1d-4e55-8c3b-7f00d1e2a3b4"
	red := newRedactor()
	red.secret(token, "the Nomad token used")
	red.environment([]string{"STEWARD_HOOK_TOKEN=hook-s3cr3t-value", "SLACK_WEBHOOK=https://hooks.example/T0/B1/xyz123", "KEY_COUNT=3", "HOME=/root", "DB_PASSWORD=hunter22"})
	red.secret("hdr-planted-value", "notify ops header Authorization")
	cases := []struct {
		name string
		in   string
		gone []string // what must not be left
		kept []string // what must stay
	}{
		{"the token used, in a log line", `2026-11-27 token=` + token + ` leading`, []string{token}, []string{"leading"}},
		{"an environment secret in a log line", `posting with hook-s3cr3t-value failed`, []string{"hook-s3cr3t-value"}, []string{"posting with", "failed"}},
		{"a webhook URL from the environment", `notify: POST https://hooks.example/T0/B1/xyz123: 500`, []string{"xyz123"}, []string{"notify: POST", ": 500"}},
		{"a password variable", `dsn user:hunter22`, []string{"hunter22"}, []string{"dsn user:"}},
		{"a notify header's value", `{"Authorization": "hdr-planted-value"}`, []string{"hdr-planted-value"}, []string{"Authorization"}},
		{"a token header found by its shape", `X-Nomad-Token: 11111111-2222-3333-4444-555555555555`, []string{"11111111-2222"}, []string{"X-Nomad-Token"}},
		{"a bearer header", `Authorization: Bearer abc.def.ghi`, []string{"abc.def.ghi"}, []string{"Authorization: Bearer"}},
		{"a SecretID field", `{"AccessorID": "acc-1", "SecretID": "sec-12345678"}`, []string{"sec-12345678"}, []string{"acc-1"}},
		{"a job's Vault token field", `"VaultToken": "hvs.CAESIabc", "Name": "x"`, []string{"hvs.CAESIabc"}, []string{`"Name": "x"`}},
		{"credentials in a URL", `dial https://ops:pa55word@hooks.internal/x`, []string{"pa55word"}, []string{"hooks.internal/x", "https://ops:"}},
		{"short values of secret-named variables stay", `3 GPUs on node gpu-3`, nil, []string{"3 GPUs on node gpu-3"}},
		{"names of secret variables stay", `env STEWARD_HOOK_TOKEN is set`, nil, []string{"STEWARD_HOOK_TOKEN"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := string(red.redact([]byte(tc.in)))
			for _, g := range tc.gone {
				if strings.Contains(out, g) {
					t.Errorf("%q left in %q", g, out)
				}
			}
			for _, k := range tc.kept {
				if !strings.Contains(out, k) {
					t.Errorf("%q lost from %q", k, out)
				}
			}
			if len(tc.gone) > 0 && !strings.Contains(out, redacted) {
				t.Errorf("no %s marker in %q", redacted, out)
			}
		})
	}
	if c := red.counts(); c["the Nomad token used"] != 1 || c["environment variable STEWARD_HOOK_TOKEN"] != 1 {
		t.Errorf("counts by rule: %v", c)
	}
}

// readArchive reads a tar.gz into name → content, with each entry's mode.
func readArchive(t *testing.T, path string) (map[string]string, map[string]int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files, modes := map[string]string{}, map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], modes[h.Name] = string(b), h.Mode
	}
	return files, modes
}

func TestDebugArchiveContents(t *testing.T) {
	const secret = "planted-secret-4242"
	red := newRedactor()
	red.environment([]string{"MY_API_KEY=" + secret})
	arc := newDebugArchive("steward-debug-x", 200, red)
	arc.add("logs/a/controller.stderr", []byte("round failed, key "+secret+"\n"))
	arc.addJSON("records/ml/train.json", map[string]string{"steward_state": "running", "note": secret})
	arc.add("states/../../etc/passwd", []byte("x"))
	arc.add("big.txt", bytes.Repeat([]byte("a"), 300)) // past the cap: cut
	arc.add("after.txt", []byte("left out"))           // nothing left of the cap
	var prof bytes.Buffer
	zw := gzip.NewWriter(&prof)
	zw.Write([]byte("profile with " + secret))
	zw.Close()
	arc.addProfile("controller/x/heap.pprof", prof.Bytes())
	out := filepath.Join(t.TempDir(), "d.tar.gz")
	if err := arc.write(out, debugIndex{Created: time.Unix(0, 0).UTC(), Steward: "test"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("archive mode: %v %v", fi, err)
	}
	files, modes := readArchive(t, out)
	want := []string{"steward-debug-x/index.json", "steward-debug-x/logs/a/controller.stderr",
		"steward-debug-x/records/ml/train.json", "steward-debug-x/states/_/_/etc/passwd", "steward-debug-x/big.txt"}
	for _, w := range want {
		if _, ok := files[w]; !ok {
			t.Errorf("archive lacks %s; has %v", w, keys(files))
		}
	}
	if len(files) != len(want) {
		t.Errorf("archive has %d files, want %d: %v", len(files), len(want), keys(files))
	}
	for name, body := range files {
		if strings.Contains(body, secret) {
			t.Errorf("%s holds the planted secret:\n%s", name, body)
		}
		if modes[name] != 0o600 {
			t.Errorf("%s mode %o, want 600", name, modes[name])
		}
	}
	idx := files["steward-debug-x/index.json"]
	for _, w := range []string{"big.txt cut to", "after.txt left out: the archive reached its size cap",
		"heap.pprof left out: it holds a secret", `"environment variable MY_API_KEY": 2`} {
		if !strings.Contains(idx, w) {
			t.Errorf("index.json lacks %q:\n%s", w, idx)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestDebugArgsRedacted(t *testing.T) {
	got := strings.Join(redactArgs([]string{"-token", "abc", "-token=def", "-duration", "5s"}), " ")
	if strings.Contains(got, "abc") || strings.Contains(got, "def") || !strings.Contains(got, "-duration 5s") {
		t.Errorf("args: %s", got)
	}
}
