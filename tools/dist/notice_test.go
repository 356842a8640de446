package dist

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite NOTICE's module table from what the binaries link")

// The binaries Steward ships (make dist) and the platforms it builds them
// for, with and without cgo (dist.sh builds without it where it has no C
// compiler for the platform).
var (
	shipped   = []string{".", "./cmd/steward-gpu", "./cmd/steward-exec", "./jobs/trainer"}
	platforms = []struct{ goos, goarch, cgo string }{
		{"linux", "amd64", "1"}, {"linux", "amd64", "0"}, {"linux", "arm64", "1"}, {"linux", "arm64", "0"},
	}
)

// linkedModules lists the modules (not Steward's own) linked into the
// shipped binaries on every platform.
func linkedModules(t *testing.T, root string) []Module {
	t.Helper()
	seen := map[string]Module{}
	for _, p := range platforms {
		args := append([]string{"list", "-deps", "-f",
			`{{with .Module}}{{.Path}}|{{.Version}}|{{if .Replace}}{{.Replace.Version}}|{{.Replace.Dir}}{{else}}|{{.Dir}}{{end}}{{end}}`}, shipped...)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS="+p.goos, "GOARCH="+p.goarch, "CGO_ENABLED="+p.cgo)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps for %s/%s (cgo %s): %v\n%s", p.goos, p.goarch, p.cgo, err, stderrOf(err))
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, "|")
			if len(f) != 4 || f[0] == "github.com/gpu-steward/steward" {
				continue
			}
			m := Module{Path: f[0], Version: f[1], Dir: f[3]}
			if f[2] != "" {
				m.Version = f[2]
			}
			seen[m.Path] = m
		}
	}
	out := make([]Module, 0, len(seen))
	for _, m := range seen {
		out = append(out, m)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Path < out[k].Path })
	if len(out) < 10 {
		t.Fatalf("only %d modules linked: go list answered something unexpected", len(out))
	}
	return out
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", root)
	}
	return root
}

// The module table in NOTICE lies between these lines.
const (
	tableBegin = "<!-- modules: begin (go test ./tools/dist -run TestNotice -update rewrites this table) -->"
	tableEnd   = "<!-- modules: end -->"
)

// noticeEntry is one row of NOTICE's module table.
type noticeEntry struct{ version, licence string }

// noticeTable reads NOTICE's module table: module path -> its row.
func noticeTable(t *testing.T, notice string) map[string]noticeEntry {
	t.Helper()
	begin, end := strings.Index(notice, tableBegin), strings.Index(notice, tableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("NOTICE has no module table (%q ... %q)", tableBegin, tableEnd)
	}
	out := map[string]noticeEntry{}
	sc := bufio.NewScanner(strings.NewReader(notice[begin+len(tableBegin) : end]))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// "module version licence [licence ...]"
		if len(f) >= 3 && !strings.HasPrefix(f[0], "#") && f[0] != "module" && !strings.HasPrefix(f[0], "---") {
			out[f[0]] = noticeEntry{version: f[1], licence: strings.Join(f[2:], " ")}
		}
	}
	return out
}

// TestNotice: NOTICE names every module linked into the binaries `make
// dist` ships, on every platform, with the licence its own licence file
// carries; a module added to (or dropped from) the build without NOTICE
// following fails here. -update rewrites the table.
func TestNotice(t *testing.T) {
	root := repoRoot(t)
	mods := linkedModules(t, root)
	b, err := os.ReadFile(filepath.Join(root, "NOTICE"))
	if err != nil {
		t.Fatalf("read NOTICE: %v", err)
	}
	notice := string(b)
	if *update {
		writeTable(t, filepath.Join(root, "NOTICE"), notice, mods)
		return
	}
	table := noticeTable(t, notice)
	linked := map[string]bool{}
	for _, m := range mods {
		linked[m.Path] = true
		entry, ok := table[m.Path]
		if !ok {
			t.Errorf("NOTICE does not name %s %s, which the binaries link (go test ./tools/dist -run TestNotice -update)", m.Path, m.Version)
			continue
		}
		listed := entry.licence
		if entry.version != m.Version {
			t.Errorf("NOTICE names %s %s; the binaries link %s (go test ./tools/dist -run TestNotice -update)", m.Path, entry.version, m.Version)
		}
		if found := ModuleLicence(m.Dir); found != "" && found != listed {
			t.Errorf("NOTICE says %s is %s; its licence file says %s", m.Path, listed, found)
		}
		if listed == "" || listed == "UNKNOWN" {
			t.Errorf("NOTICE names no licence for %s: read its licence and write it in", m.Path)
		}
	}
	for path := range table {
		if !linked[path] {
			t.Errorf("NOTICE names %s, which no shipped binary links any more (go test ./tools/dist -run TestNotice -update)", path)
		}
	}
	for _, must := range []string{"BUSL-1.1", "github.com/hashicorp/nomad/api"} {
		if !strings.Contains(notice[:strings.Index(notice, tableBegin)], must) {
			t.Errorf("NOTICE's text before the table must explain %s", must)
		}
	}
	if lic := table["github.com/hashicorp/nomad"].licence; lic != "BUSL-1.1" {
		t.Errorf("NOTICE lists github.com/hashicorp/nomad as %q, want BUSL-1.1", lic)
	}
}

func writeTable(t *testing.T, path, notice string, mods []Module) {
	t.Helper()
	begin, end := strings.Index(notice, tableBegin), strings.Index(notice, tableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("NOTICE has no module table markers to rewrite between")
	}
	old := noticeTable(t, notice)
	var b strings.Builder
	b.WriteString(tableBegin + "\n\n")
	w := 0
	for _, m := range mods {
		w = max(w, len(m.Path))
	}
	vw := 0
	for _, m := range mods {
		vw = max(vw, len(m.Version))
	}
	fmt.Fprintf(&b, "%-*s  %-*s  %s\n", w, "module", vw, "version", "licence")
	fmt.Fprintf(&b, "%s  %s  %s\n", strings.Repeat("-", w), strings.Repeat("-", vw), strings.Repeat("-", 7))
	for _, m := range mods {
		lic := ModuleLicence(m.Dir)
		if lic == "" {
			lic = old[m.Path].licence // recognised by hand before
		}
		if lic == "" {
			lic = "UNKNOWN"
			t.Errorf("cannot tell the licence of %s (%s): write it into NOTICE by hand", m.Path, m.Dir)
		}
		fmt.Fprintf(&b, "%-*s  %-*s  %s\n", w, m.Path, vw, m.Version, lic)
	}
	b.WriteString("\n")
	out := notice[:begin] + b.String() + notice[end:]
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote NOTICE's table: %d modules", len(mods))
}
