package command

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// debugArchive collects the files of `steward operator debug` in memory,
// each redacted and within one size cap, and writes them as a tar.gz.
// Everything passes through add, so nothing reaches the archive
// unredacted.
type debugArchive struct {
	root     string // the folder every file is under
	budget   int    // bytes left under the cap
	red      *redactor
	files    []debugFile
	problems []string
}

type debugFile struct {
	name string
	data []byte
	// Truncated: cut at the size cap (or a per-file bound the collector
	// set).
	truncated bool
}

func newDebugArchive(root string, capBytes int, red *redactor) *debugArchive {
	return &debugArchive{root: root, budget: capBytes, red: red}
}

// add puts a file in the archive, redacted, cut to what the cap has left.
func (a *debugArchive) add(name string, data []byte) {
	data = a.red.redact(data)
	f := debugFile{name: safeArchivePath(name)}
	if len(data) > a.budget {
		if a.budget <= 0 {
			a.problem("%s left out: the archive reached its size cap (-max-size)", f.name)
			return
		}
		data, f.truncated = data[:a.budget], true
		a.problem("%s cut to %d bytes: the archive reached its size cap (-max-size)", f.name, len(data))
	}
	a.budget -= len(data)
	f.data = data
	a.files = append(a.files, f)
}

// addProfile adds a gzipped pprof profile as it is: rewriting bytes in a
// compressed file would break it. It holds function names, files and
// sample counts, never values; it is left out if its content shows a
// secret all the same.
func (a *debugArchive) addProfile(name string, data []byte) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		a.problem("%s left out: not a gzipped profile: %v", name, err)
		return
	}
	plain, err := io.ReadAll(io.LimitReader(zr, 256<<20))
	if err != nil {
		a.problem("%s left out: %v", name, err)
		return
	}
	if a.red.holdsSecret(plain) {
		a.problem("%s left out: it holds a secret", name)
		return
	}
	if len(data) > a.budget {
		a.problem("%s left out: the archive reached its size cap (-max-size)", name)
		return
	}
	a.budget -= len(data)
	a.files = append(a.files, debugFile{name: safeArchivePath(name), data: data})
}

// addJSON adds v as indented JSON.
func (a *debugArchive) addJSON(name string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		a.problem("%s: encode: %v", name, err)
		return
	}
	a.add(name, append(b, '\n'))
}

// problem records what could not be collected, and why (index.json).
func (a *debugArchive) problem(format string, args ...any) {
	a.problems = append(a.problems, string(a.red.redact([]byte(fmt.Sprintf(format, args...)))))
}

// debugIndex is index.json: what the archive holds and what it lacks.
type debugIndex struct {
	Created  time.Time         `json:"created"`
	Steward  string            `json:"steward"`
	Args     []string          `json:"args"`
	Files    []debugIndexEntry `json:"files"`
	Problems []string          `json:"problems"`
	// Redacted is how many secrets were replaced, and the rule they were
	// found by (never the secrets).
	Redacted map[string]int `json:"redacted"`
}

type debugIndexEntry struct {
	Name      string `json:"name"`
	Bytes     int    `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
}

// write writes the archive to path (mode 0600: it names every tenant's
// jobs), through a temporary file renamed into place, index.json first.
func (a *debugArchive) write(path string, idx debugIndex) error {
	sort.SliceStable(a.files, func(i, j int) bool { return a.files[i].name < a.files[j].name })
	idx.Problems = append([]string{}, a.problems...)
	idx.Redacted = a.red.counts()
	for _, f := range a.files {
		idx.Files = append(idx.Files, debugIndexEntry{Name: f.name, Bytes: len(f.data), Truncated: f.truncated})
	}
	ib, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("write debug archive: encode index: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".steward-debug-*")
	if err != nil {
		return fmt.Errorf("write debug archive: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write debug archive: %w", err)
	}
	if err := a.writeTar(tmp, append([]debugFile{{name: "index.json", data: a.red.redact(append(ib, '\n'))}}, a.files...), idx.Created); err != nil {
		tmp.Close()
		return fmt.Errorf("write debug archive %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write debug archive %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write debug archive: %w", err)
	}
	return nil
}

func (a *debugArchive) writeTar(w io.Writer, files []debugFile, at time.Time) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		name := a.root + "/" + f.name
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(f.data)), ModTime: at, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// safeArchivePath makes a name built from cluster data (namespaces, job
// IDs, which tenants choose) a plain relative path: no "..", no absolute
// path, no characters beyond letters, digits and ._-.
func safeArchivePath(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		p = unsafeChars.ReplaceAllString(p, "_")
		if p == "" || p == "." || p == ".." {
			p = "_"
		}
		if len(p) > 100 {
			p = p[:100]
		}
		parts[i] = p
	}
	return strings.Join(parts, "/")
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// redactor replaces secrets in everything the archive holds: secrets known
// by value (the caller's Nomad token, secret-looking variables of the
// environment, the values of the variables the policy's notify blocks
// read), and secrets found by their shape next to a name that says what
// they are (a token header, a SecretID field, credentials in a URL).
type redactor struct {
	known   map[string]string // secret → the rule that named it
	found   map[string]int
	ordered []string // longest first, so that one secret inside another goes whole
}

// redacted is what a secret is replaced by.
const redacted = "<redacted>"

// minSecretLen: shorter values are not taken as secrets by value (an
// environment variable KEY_COUNT=3 would otherwise erase every 3).
const minSecretLen = 6

func newRedactor() *redactor {
	return &redactor{known: map[string]string{}, found: map[string]int{}}
}

// secret adds a value to redact wherever it appears, with the rule that
// named it.
func (r *redactor) secret(value, rule string) {
	value = strings.TrimSpace(value)
	if len(value) < minSecretLen || value == redacted {
		return
	}
	if _, ok := r.known[value]; ok {
		return
	}
	r.known[value] = rule
	r.ordered = append(r.ordered, value)
	sort.SliceStable(r.ordered, func(i, j int) bool { return len(r.ordered[i]) > len(r.ordered[j]) })
}

// secretEnvName says whether an environment variable's name says it holds
// a secret.
var secretEnvName = regexp.MustCompile(`(?i)(TOKEN|SECRET|PASSW|PRIVATE|CREDENTIAL|API_?KEY|AUTH|WEBHOOK|_KEY$)`)

// environment adds the values of environ's secret-looking variables.
func (r *redactor) environment(environ []string) {
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && secretEnvName.MatchString(k) {
			r.secret(v, "environment variable "+k)
		}
	}
}

// secretShapes find secrets by their place: the value after a token
// header or a secret-named field, and the user info of a URL.
var secretShapes = []struct {
	rule string
	re   *regexp.Regexp
}{
	{"token header", regexp.MustCompile(`(?i)((?:x-nomad-token|x-vault-token|x-consul-token|authorization)"?\s*[:=]\s*"?(?:bearer\s+|basic\s+)?)([^\s",}\]]+)`)},
	// Any JSON key ending so: SecretID, VaultToken, ConsulToken...
	{"secret field", regexp.MustCompile(`(?i)("[a-z_]*(?:secretid|secret_id|token|password|passwd|secret)"\s*:\s*")([^"]+)`)},
	{"url credentials", regexp.MustCompile(`([a-z][a-z0-9+.-]*://[^/\s:@"]+:)([^@\s"/]+)@`)},
}

// redact returns data with every secret replaced.
func (r *redactor) redact(data []byte) []byte {
	s := string(data)
	for _, v := range r.ordered {
		if n := strings.Count(s, v); n > 0 {
			r.found[r.known[v]] += n
			s = strings.ReplaceAll(s, v, redacted)
		}
	}
	for _, sh := range secretShapes {
		s = sh.re.ReplaceAllStringFunc(s, func(m string) string {
			sub := sh.re.FindStringSubmatch(m)
			if sub[2] == redacted || strings.HasPrefix(sub[2], redacted) {
				return m
			}
			r.found[sh.rule]++
			return strings.Replace(m, sub[1]+sub[2], sub[1]+redacted, 1)
		})
	}
	return []byte(s)
}

// holdsSecret says whether redact would change data.
func (r *redactor) holdsSecret(data []byte) bool {
	s := string(data)
	for _, v := range r.ordered {
		if strings.Contains(s, v) {
			return true
		}
	}
	for _, sh := range secretShapes {
		for _, m := range sh.re.FindAllStringSubmatch(s, -1) {
			if !strings.HasPrefix(m[2], redacted) {
				return true
			}
		}
	}
	return false
}

// counts is how many secrets each rule replaced.
func (r *redactor) counts() map[string]int {
	out := map[string]int{}
	for k, n := range r.found {
		out[k] = n
	}
	return out
}
