package docs

import (
	"os"
	"strings"
	"testing"

	"github.com/gpu-steward/steward/internal/doccheck"
)

// TestDocsLinks checks that every relative link of the repository's
// Markdown files reaches a file, that every #anchor names a heading of the
// file it points into (GitHub's slugs), and that every repository path
// cited in backticks (`policy/engine/reserve.go`) exists: a doc that moves
// or a file that is renamed breaks this test, not a reader's click.
func TestDocsLinks(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	roots := topDirs(t, root)
	var refs []doccheck.Ref
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range doccheck.Refs(rel(t, root, f), string(src), roots) {
			if r.Cited && generated(r.Target) {
				continue
			}
			refs = append(refs, r)
		}
	}
	if len(refs) < 50 {
		t.Fatalf("found only %d links and cited paths in %d Markdown files: is the extractor broken?", len(refs), len(files))
	}
	broken := doccheck.CheckRefs(root, refs)
	if len(broken) > 0 {
		t.Errorf("%d broken of %d links and cited paths:\n%s", len(broken), len(refs), strings.Join(broken, "\n"))
	}
	t.Logf("%d links and cited paths in %d Markdown files", len(refs), len(files))
}

// topDirs are the repository's top-level directories a cited path may
// start with; build outputs (bin, dist) are not the repository's.
func topDirs(t *testing.T, root string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() && !skipDir(e.Name()) && e.Name() != "dist" {
			out[e.Name()] = true
		}
	}
	return out
}

// generated says whether a cited path lies under a directory that tests
// and builds write (e2e/artifacts/soak.log): it exists after a run, not
// in the repository.
func generated(path string) bool {
	for _, seg := range strings.Split(path, "/") {
		if skipDir(seg) {
			return true
		}
	}
	return false
}
