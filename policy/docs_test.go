package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// schemas maps each block type to its schema, the language's full surface.
var schemas = map[string]*hcl.BodySchema{
	blockDefaults:   defaultsSchema,
	blockTier:       tierSchema,
	blockTenant:     tenantSchema,
	blockDepartment: departmentSchema,
	blockPool:       poolSchema,
	blockIdle:       idleSchema,
	blockPreemption: preemptionSchema,
	blockPromote:    promoteSchema,
	quotaBlock:      quotaSchema,
	blockNotify:     notifySchema,
}

// quotaBlock is a tenant's pool block, as the walk below names it.
const quotaBlock = blockTenant + "." + blockPool

// example.hcl promises to use every block and attribute, and docs/reference/policy.md
// to describe them; this keeps both honest as the language grows.
func TestExampleAndDocsCoverLanguage(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "example.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	file, diags := hclsyntax.ParseConfig(src, "example.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	used := map[string]bool{}
	var walk func(b *hclsyntax.Body, block string)
	walk = func(b *hclsyntax.Body, block string) {
		for name := range b.Attributes {
			used[block+"."+name] = true
		}
		for _, child := range b.Blocks {
			name := child.Type
			if block == blockTenant && child.Type == blockPool {
				name = quotaBlock
			}
			used[name] = true
			walk(child.Body, name)
		}
	}
	walk(file.Body.(*hclsyntax.Body), "")

	docs, err := os.ReadFile(filepath.Join("..", "docs", "reference", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	for block, schema := range schemas {
		if !used[block] {
			t.Errorf("example.hcl has no %s block", block)
		}
		if !strings.Contains(string(docs), "`"+strings.ReplaceAll(block, ".", ` "NAME" { `)) {
			t.Errorf("docs/reference/policy.md does not describe the %s block", block)
		}
		for _, a := range schema.Attributes {
			if !used[block+"."+a.Name] {
				t.Errorf("example.hcl does not set %s.%s", block, a.Name)
			}
			if !strings.Contains(string(docs), "| `"+a.Name+"`") {
				t.Errorf("docs/reference/policy.md has no table row for %s.%s", block, a.Name)
			}
		}
	}
	for _, sig := range SignalNames() {
		if !strings.Contains(string(docs), sig) {
			t.Errorf("docs/reference/policy.md does not list signal %s", sig)
		}
	}
}

// The README's policy snippet is a whole policy: it must parse and
// validate without a diagnostic, and every hcl block of docs/reference/policy.md
// must at least be valid HCL (several attributes in a one-line block are
// not).
func TestDocsExamplesParse(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	i := strings.Index(section, "## Writing a policy")
	if i < 0 {
		t.Fatal(`README.md has no "## Writing a policy" section`)
	}
	blocks := hclBlocks(section[i:])
	if len(blocks) == 0 {
		t.Fatal(`README.md's "Writing a policy" has no hcl block`)
	}
	if _, diags := ParseBytes("README.md", []byte(blocks[0])); len(diags) > 0 {
		t.Errorf("README.md's policy snippet: %v", diags)
	}

	docs, err := os.ReadFile(filepath.Join("..", "docs", "reference", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	for n, b := range hclBlocks(string(docs)) {
		if _, diags := hclsyntax.ParseConfig([]byte(b), "policy.md", hcl.InitialPos); diags.HasErrors() {
			t.Errorf("docs/reference/policy.md hcl block %d does not parse: %v\n%s", n+1, diags, b)
		}
	}
}

// hclBlocks returns the contents of the ```hcl fences in markdown.
func hclBlocks(md string) []string {
	var out []string
	for {
		i := strings.Index(md, "```hcl\n")
		if i < 0 {
			return out
		}
		md = md[i+len("```hcl\n"):]
		j := strings.Index(md, "```")
		if j < 0 {
			return out
		}
		out = append(out, md[:j])
		md = md[j+3:]
	}
}
