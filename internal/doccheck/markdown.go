// Package doccheck checks the HCL examples in Steward's documentation and
// example files with the parsers that will read them for real: the policy
// parser `steward policy validate` uses, Nomad's own jobspec parser, the
// plugins' config schemas as the Nomad agent applies them, and Nomad's ACL
// policy parser. docs/examples_test.go runs it over the repository.
package doccheck

import (
	"fmt"
	"regexp"
	"strings"
)

// Example is one HCL example: a fenced ```hcl block of a Markdown file, or
// a whole .hcl file.
type Example struct {
	// File is the file's path as the report names it, e.g. "README.md".
	File string
	// Line is the file's line holding the example's first line of text
	// (the line after the opening fence), so that diagnostics can name
	// the file's lines.
	Line int
	// Text is the example, without the indentation of its fence.
	Text string
	// Fragment marks a docs snippet, which may show part of a policy;
	// a whole file must be complete.
	Fragment bool
	// NotChecked is the reason given by a `<!-- not checked: reason -->`
	// comment right before the fence; empty when the example is checked.
	NotChecked string
}

// Name is the example's place, "file:line" of its opening fence, as test
// names and reports give it.
func (e Example) Name() string {
	if e.Line <= 1 {
		return e.File
	}
	return fmt.Sprintf("%s:%d", e.File, e.Line-1)
}

// File is a whole .hcl file as an example.
func File(name string, src string) Example {
	return Example{File: name, Line: 1, Text: src}
}

var (
	// fenceRE is an opening or closing code fence: its indentation, its
	// backticks or tildes, and its info string.
	fenceRE = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([^`\\s]*)")
	// notCheckedRE is the marker that exempts the next example.
	notCheckedRE = regexp.MustCompile(`^\s*<!--\s*not checked:\s*(.*?)\s*-->\s*$`)
)

// Markdown returns the ```hcl examples of a Markdown file. A fence that is
// never closed is an error: the rest of the file would silently go
// unchecked.
func Markdown(file string, src string) ([]Example, error) {
	lines := strings.Split(src, "\n")
	var out []Example
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, fence, lang := m[1], m[2], m[3]
		end := closingFence(lines, i+1, fence)
		if end < 0 {
			return nil, fmt.Errorf("%s:%d: code fence %s is never closed", file, i+1, fence)
		}
		if strings.EqualFold(lang, "hcl") {
			reason, marked := notCheckedBefore(lines, i)
			if marked && reason == "" {
				return nil, fmt.Errorf("%s:%d: a not-checked marker must say why: <!-- not checked: reason -->", file, i)
			}
			body := make([]string, 0, end-i-1)
			for _, l := range lines[i+1 : end] {
				body = append(body, strings.TrimPrefix(l, indent))
			}
			out = append(out, Example{
				File:       file,
				Line:       i + 2,
				Text:       strings.Join(body, "\n") + "\n",
				Fragment:   true,
				NotChecked: reason,
			})
		}
		i = end
	}
	return out, nil
}

// closingFence finds the line closing a fence opened with fence, or -1.
func closingFence(lines []string, from int, fence string) int {
	for j := from; j < len(lines); j++ {
		t := strings.TrimSpace(lines[j])
		if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
			return j
		}
	}
	return -1
}

// notCheckedBefore reports whether the last non-blank line before line i
// is a not-checked marker, and its reason.
func notCheckedBefore(lines []string, i int) (reason string, marked bool) {
	for j := i - 1; j >= 0; j-- {
		if strings.TrimSpace(lines[j]) == "" {
			continue
		}
		if m := notCheckedRE.FindStringSubmatch(lines[j]); m != nil {
			return m[1], true
		}
		return "", false
	}
	return "", false
}
