package doccheck

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Ref is one place a Markdown file points at: a relative link (with or
// without an #anchor) or a repository path cited in backticks.
type Ref struct {
	// File and Line are where the reference is, for the report.
	File string
	Line int
	// Target is the path as written, resolved against the repository
	// root (slash-separated, no anchor); empty for a link to an anchor
	// of the same file.
	Target string
	// Anchor is the part after '#', or empty.
	Anchor string
	// Cited marks a path in backticks rather than a link.
	Cited bool
}

func (r Ref) String() string {
	s := r.Target
	if r.Anchor != "" {
		s += "#" + r.Anchor
	}
	kind := "link"
	if r.Cited {
		kind = "cited path"
	}
	return fmt.Sprintf("%s:%d: %s %s", r.File, r.Line, kind, s)
}

var (
	// linkRE is an inline Markdown link or image: [text](target) or
	// [text](target "title").
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpanRE is an inline code span.
	codeSpanRE = regexp.MustCompile("`([^`]+)`")
	// citedPathRE is what a cited repository path looks like: segments
	// joined by slashes and ending in a file name with an extension
	// (`policy/engine/reserve.go`). Globs, placeholders and absolute
	// paths do not match.
	citedPathRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+\.[A-Za-z0-9]{1,5}$`)
	// htmlAnchorRE is an explicit anchor, <a name="x"> or id="x".
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// Refs returns the relative links of a Markdown file (file is its
// slash-separated path from the repository root) and the repository
// paths it cites in backticks, outside fenced code blocks: a command in a
// block may name files it creates. A cited path counts only when its
// first segment is one of roots (the repository's top-level directories):
// `nomad/job_endpoint.go` cites Nomad's source, not ours.
func Refs(file, src string, roots map[string]bool) []Ref {
	var out []Ref
	dir := path.Dir(file)
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		if m := fenceRE.FindStringSubmatch(lines[i]); m != nil {
			if end := closingFence(lines, i+1, m[2]); end > 0 {
				i = end
				continue
			}
		}
		line := lines[i]
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			if r, ok := linkRef(file, dir, i+1, m[1]); ok {
				out = append(out, r)
			}
		}
		for _, m := range codeSpanRE.FindAllStringSubmatch(line, -1) {
			p := m[1]
			if !citedPathRE.MatchString(p) || !roots[strings.SplitN(p, "/", 2)[0]] {
				continue
			}
			out = append(out, Ref{File: file, Line: i + 1, Target: p, Cited: true})
		}
	}
	return out
}

// linkRef is a link's target resolved against the linking file's
// directory; ok is false for links that leave the repository (URLs,
// mail).
func linkRef(file, dir string, line int, target string) (Ref, bool) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return Ref{}, false
	}
	target, anchor, _ := strings.Cut(target, "#")
	r := Ref{File: file, Line: line, Anchor: anchor}
	switch {
	case target == "":
		r.Target = file
	case strings.HasPrefix(target, "/"):
		r.Target = strings.TrimPrefix(path.Clean(target), "/")
	default:
		r.Target = path.Join(dir, target)
	}
	return r, true
}

// Anchors returns the anchors of a Markdown file's headings as GitHub
// makes them (see Slug), numbered -1, -2... when a heading repeats, and
// its explicit HTML anchors.
func Anchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		if m := fenceRE.FindStringSubmatch(lines[i]); m != nil {
			if end := closingFence(lines, i+1, m[2]); end > 0 {
				i = end
				continue
			}
		}
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(lines[i], -1) {
			out[m[1]] = true
		}
		t := strings.TrimLeft(lines[i], " ")
		if !strings.HasPrefix(t, "#") {
			continue
		}
		text := strings.TrimLeft(t, "#")
		if len(t)-len(text) > 6 || (text != "" && text[0] != ' ') {
			continue
		}
		s := Slug(text)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// headingLinkRE is a link inside a heading, whose text alone counts.
var headingLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// Slug is GitHub's anchor for a heading's text: links reduced to their
// text, lower case, every character but letters, digits, spaces, hyphens
// and underscores dropped, and spaces made hyphens.
func Slug(heading string) string {
	heading = headingLinkRE.ReplaceAllString(strings.TrimSpace(heading), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// CheckRefs checks each reference against the repository at root: the
// file or directory exists, and an anchor names a heading of the Markdown
// file it points into. It returns one message per broken reference.
func CheckRefs(root string, refs []Ref) []string {
	var broken []string
	anchors := map[string]map[string]bool{}
	for _, r := range refs {
		full := filepath.Join(root, filepath.FromSlash(r.Target))
		if _, err := os.Stat(full); err != nil {
			broken = append(broken, r.String()+": no such file")
			continue
		}
		if r.Anchor == "" {
			continue
		}
		if !strings.HasSuffix(r.Target, ".md") {
			broken = append(broken, r.String()+": an anchor into a file that is not Markdown")
			continue
		}
		a, ok := anchors[r.Target]
		if !ok {
			src, err := os.ReadFile(full)
			if err != nil {
				broken = append(broken, fmt.Sprintf("%s: %v", r, err))
				continue
			}
			a = Anchors(string(src))
			anchors[r.Target] = a
		}
		if !a[r.Anchor] {
			broken = append(broken, r.String()+": no heading has that anchor")
		}
	}
	return broken
}
