package policy

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// Source is one policy file held in memory. Its name picks the syntax (a
// name ending in ".json" is HCL JSON, anything else HCL native syntax) and
// names the file in diagnostics.
type Source struct {
	Name  string
	Bytes []byte
}

// Parse reads and parses policy files into one resolved Policy. It returns
// nil and the diagnostics when there is any error; warnings may come with a
// valid policy.
func Parse(filenames ...string) (*Policy, hcl.Diagnostics) {
	return NewParser().Parse(filenames...)
}

// ParseBytes parses one policy file held in memory.
func ParseBytes(name string, src []byte) (*Policy, hcl.Diagnostics) {
	return NewParser().ParseSources(Source{Name: name, Bytes: src})
}

// ParseSources parses policy files held in memory into one Policy, merging
// them in the order given.
func ParseSources(srcs ...Source) (*Policy, hcl.Diagnostics) {
	return NewParser().ParseSources(srcs...)
}

// Parser parses policy files and keeps their text, so that diagnostics can
// be printed with the lines they point at. Use a new Parser for each policy:
// it reads a file name only once.
type Parser struct {
	hcl *hclparse.Parser
	// src is where the last policy parsed came from (CheckCluster).
	src *sourceMap
}

// NewParser returns a Parser with no files.
func NewParser() *Parser { return &Parser{hcl: hclparse.NewParser()} }

// Parse reads the named files and parses them as one policy, like
// ParseSources. A file that cannot be read is reported as a diagnostic.
func (p *Parser) Parse(filenames ...string) (*Policy, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	srcs := make([]Source, 0, len(filenames))
	for _, name := range filenames {
		b, err := os.ReadFile(name)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Failed to read file",
				Detail:   fmt.Sprintf("The policy file %q could not be read: %v.", name, err),
			})
			continue
		}
		srcs = append(srcs, Source{Name: name, Bytes: b})
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return p.ParseSources(srcs...)
}

// ParseSources parses files held in memory as one policy: every block of
// every file, in the order given. Syntax errors in any file stop it before
// the policy's meaning is checked, since a half-read file would make
// everything after it look wrong.
func (p *Parser) ParseSources(srcs ...Source) (*Policy, hcl.Diagnostics) {
	if len(srcs) == 0 {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "No policy files",
			Detail:   "Name at least one policy file.",
		}}
	}
	var (
		diags hcl.Diagnostics
		files []*hcl.File
		names []string
	)
	seen := map[string]bool{}
	for _, src := range srcs {
		if seen[src.Name] {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate policy file",
				Detail:   fmt.Sprintf("The policy file %q is given more than once.", src.Name),
			})
			continue
		}
		seen[src.Name] = true
		if d := notUTF8(src.Name, src.Bytes); d != nil {
			diags = append(diags, d)
			continue
		}
		var (
			f *hcl.File
			d hcl.Diagnostics
		)
		if isJSON(src.Name) {
			f, d = p.hcl.ParseJSON(src.Bytes, src.Name)
		} else {
			f, d = p.hcl.ParseHCL(src.Bytes, src.Name)
		}
		diags = append(diags, d...)
		if f != nil {
			files = append(files, f)
			names = append(names, src.Name)
		}
	}
	if diags.HasErrors() {
		return nil, diags
	}
	pol, src, d := decodeFiles(files, names)
	p.src = src
	return pol, append(diags, d...)
}

// Files returns the files parsed so far by name, as hcl's diagnostic
// writers want them.
func (p *Parser) Files() map[string]*hcl.File { return p.hcl.Files() }

// WriteDiagnostics prints diagnostics for a person: for each, a
// "file:line,col: severity: summary" line that editors and grep understand,
// then hcl's rendering with the source lines it points at. It never colours
// its output.
func (p *Parser) WriteDiagnostics(w io.Writer, diags hcl.Diagnostics) error {
	return WriteDiagnostics(w, p.Files(), diags)
}

// WriteDiagnostics writes diagnostics about HCL files (by name, as hcl's
// parsers keep them) as Steward writes every file's: a file:line,col
// header, the source line, the detail.
func WriteDiagnostics(w io.Writer, files map[string]*hcl.File, diags hcl.Diagnostics) error {
	tw := hcl.NewDiagnosticTextWriter(w, files, 0, false)
	for _, d := range diags {
		sev := "error"
		if d.Severity == hcl.DiagWarning {
			sev = "warning"
		}
		if d.Subject == nil {
			if err := tw.WriteDiagnostic(d); err != nil {
				return fmt.Errorf("writing diagnostics: %w", err)
			}
			continue
		}
		// One header, the file:line,col one editors and CI read; hcl's
		// writer starts with its own ("Error: summary"), which said the
		// same a second time.
		if _, err := fmt.Fprintf(w, "%s: %s: %s\n", d.Subject, sev, d.Summary); err != nil {
			return fmt.Errorf("writing diagnostics: %w", err)
		}
		var buf bytes.Buffer
		if err := hcl.NewDiagnosticTextWriter(&buf, files, 0, false).WriteDiagnostic(d); err != nil {
			return fmt.Errorf("writing diagnostics: %w", err)
		}
		body := buf.String()
		if i := strings.IndexByte(body, '\n'); i >= 0 && strings.HasSuffix(body[:i], d.Summary) {
			body = body[i+1:]
		}
		if _, err := io.WriteString(w, body); err != nil {
			return fmt.Errorf("writing diagnostics: %w", err)
		}
	}
	return nil
}

func isJSON(name string) bool { return strings.EqualFold(filepath.Ext(name), ".json") }

// sortDiagnostics orders diagnostics as a person reads the files: those
// without a place first, then by file in the order given and by position.
// Diagnostics at the same place keep the order they were found in.
func sortDiagnostics(diags hcl.Diagnostics, files []string) {
	index := map[string]int{}
	for i, f := range files {
		index[f] = i
	}
	sort.SliceStable(diags, func(i, j int) bool {
		a, b := diags[i].Subject, diags[j].Subject
		switch {
		case a == nil || b == nil:
			return a == nil && b != nil
		case a.Filename != b.Filename:
			return index[a.Filename] < index[b.Filename]
		default:
			return a.Start.Byte < b.Start.Byte
		}
	})
}

// notUTF8 reports the first byte of src that is not UTF-8 text, at its
// line and column, or nil. HCL's syntax is defined over Unicode, but its
// parsers take such bytes in names and strings as they are, and a policy
// shown (policy show, a capture) and read back then named another tier:
// the printer writes them as U+FFFD (found by FuzzParse).
func notUTF8(name string, src []byte) *hcl.Diagnostic {
	line, col := 1, 1
	for i := 0; i < len(src); {
		r, n := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && n <= 1 {
			at := hcl.Pos{Line: line, Column: col, Byte: i}
			return &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid UTF-8",
				Detail:   fmt.Sprintf("A policy file is UTF-8 text; byte 0x%02x here is not.", src[i]),
				Subject:  &hcl.Range{Filename: name, Start: at, End: hcl.Pos{Line: line, Column: col + 1, Byte: i + 1}},
			}
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += n
	}
	return nil
}
