package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Checker checks examples. Its zero value is not usable: use NewChecker.
type Checker struct {
	// Root is the repository root; jobspecs' file functions read from
	// their file's directory under it.
	Root string
	// TempDir stands in for absolute paths in plugin blocks: SetConfig
	// creates the directories they name, and a check must not create
	// /var/lib/steward on the machine running it.
	TempDir string

	policyContext []byte
	policyName    string
	policyBlocks  map[string]bool
}

// NewChecker returns a checker whose policy examples are read in the
// context of policyFile (example.hcl): a docs snippet is a fragment of a
// policy, and may name tiers it does not define. policyFile's top-level
// block types are the policy language's.
func NewChecker(root, policyFile, tempDir string) (*Checker, error) {
	src, err := os.ReadFile(filepath.Join(root, policyFile))
	if err != nil {
		return nil, fmt.Errorf("reading the policy context: %w", err)
	}
	f, diags := hclsyntax.ParseConfig(src, policyFile, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("parsing the policy context: %w", diags)
	}
	blocks := map[string]bool{}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		blocks[b.Type] = true
	}
	return &Checker{Root: root, TempDir: tempDir, policyContext: src, policyName: policyFile, policyBlocks: blocks}, nil
}

// Check parses an example with the parser for its kind. It returns the
// kind, notes worth logging (warnings), and an error when the example is
// invalid or cannot be classified.
func (c *Checker) Check(ex Example) (Kind, []string, error) {
	f, diags := hclsyntax.ParseConfig([]byte(padded(ex, "")), ex.File, hcl.InitialPos)
	if diags.HasErrors() {
		return "", nil, fmt.Errorf("not valid HCL: %w", diags)
	}
	body := f.Body.(*hclsyntax.Body)
	kind, err := classify(body, c.policyBlocks)
	if err != nil {
		return "", nil, err
	}
	var notes []string
	switch kind {
	case KindPolicy:
		notes, err = c.checkPolicy(ex, body)
	case KindJob, KindGroup, KindTask, KindTaskPart:
		err = c.checkJob(ex, kind)
	case KindPlugin:
		err = c.checkPlugins(ex)
	case KindACL:
		err = checkACL(ex)
	default:
		err = fmt.Errorf("no check for kind %q", kind)
	}
	return kind, notes, err
}

// padded is the example's text after blank lines and prefix, so that the
// text starts on the example's own line of its file and every parser's
// diagnostics name the file's lines. A prefix (a jobspec wrapper) goes on
// the lines just above the text; a file's text has no room above it, and
// its lines then move down.
func padded(ex Example, prefix string) string {
	above := ex.Line - 1 - strings.Count(prefix, "\n")
	if above < 0 {
		above = 0
	}
	return strings.Repeat("\n", above) + prefix + ex.Text
}
