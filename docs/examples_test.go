// Package docs holds the test that keeps the documentation's examples
// valid: every ```hcl block of the repository's Markdown files, and every .hcl file
// of the repository, is read by the parser that will read it for real
// (internal/doccheck).
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gpu-steward/steward/internal/doccheck"
)

// policyContext is the complete policy that docs' policy snippets are read
// in (it uses every block of the language; see policy's
// TestExampleAndDocsCoverLanguage).
const policyContext = "example.hcl"

// TestDocsExamples checks each ```hcl block of every Markdown file,
// one subtest per block named file:line of its opening fence. A block the
// checker cannot classify fails, unless the line before its fence says
// <!-- not checked: reason -->.
func TestDocsExamples(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	var examples []doccheck.Example
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := doccheck.Markdown(rel(t, root, path), string(src))
		if err != nil {
			t.Fatal(err)
		}
		examples = append(examples, ex...)
	}
	if len(examples) < 10 {
		t.Fatalf("found only %d hcl examples in %d Markdown files: is the extractor broken?", len(examples), len(files))
	}
	checkAll(t, root, examples)
}

// TestExampleFiles checks every .hcl file in the repository (example.hcl,
// jobs/, acl/) as a whole: a policy must be valid on its own.
func TestExampleFiles(t *testing.T) {
	root := repoRoot(t)
	var examples []doccheck.Example
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// Build outputs, test artifacts and dot dirs (.git, .demo)
			// hold no examples.
			if path != root && skipDir(name) {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Ext(name) != ".hcl" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		examples = append(examples, doccheck.File(rel(t, root, path), string(src)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"example.hcl", "jobs/trainer.nomad.hcl", "jobs/train-docker.nomad.hcl", "jobs/notebook-docker.nomad.hcl", "acl/steward-controller.policy.hcl", "acl/steward-user.policy.hcl"} {
		found := false
		for _, ex := range examples {
			found = found || ex.File == want
		}
		if !found {
			t.Errorf("%s not found among the .hcl files", want)
		}
	}
	checkAll(t, root, examples)
}

// skipDir says which directories hold no docs or examples: build
// outputs, test artifacts and dot dirs (.git, .demo).
func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" || name == "artifacts"
}

// markdownFiles is every .md file of the repository, README.md first.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Ext(path) == ".md" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	readme := filepath.Join(root, "README.md")
	sort.SliceStable(files, func(i, j int) bool { return files[i] == readme && files[j] != readme })
	return files
}

func checkAll(t *testing.T, root string, examples []doccheck.Example) {
	t.Helper()
	c, err := doccheck.NewChecker(root, policyContext, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples {
		t.Run(ex.Name(), func(t *testing.T) {
			if ex.NotChecked != "" {
				t.Logf("not checked: %s", ex.NotChecked)
				return
			}
			kind, notes, err := c.Check(ex)
			for _, n := range notes {
				t.Logf("%s: %s", kind, n)
			}
			if err != nil {
				t.Fatalf("%s, the example starting at line %d:\n%s\n%s", ex.Name(), ex.Line, indent(ex.Text), err)
			}
			t.Logf("valid %s", kind)
		})
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

func rel(t *testing.T, root, path string) string {
	t.Helper()
	r, err := filepath.Rel(root, path)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(r)
}

// repoRoot is the directory above this one, which holds go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod in %s: %v", root, err)
	}
	return root
}
