package doccheck

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"

	"github.com/gpu-steward/steward/policy"
)

// checkPolicy parses a policy example as `steward policy validate` does. A
// whole file must be a valid policy on its own. A docs snippet is read with
// the policy context (example.hcl) less the context's blocks that the
// snippet defines again (same type and labels): the snippet stands in for
// them, and may refer to the context's tiers. Warnings are notes.
func (c *Checker) checkPolicy(ex Example, body *hclsyntax.Body) ([]string, error) {
	srcs := []policy.Source{{Name: ex.File, Bytes: []byte(padded(ex, ""))}}
	if ex.Fragment {
		ctx, err := c.policyContextWithout(body.Blocks)
		if err != nil {
			return nil, err
		}
		srcs = append([]policy.Source{{Name: c.policyName + " (context)", Bytes: ctx}}, srcs...)
	}
	p := policy.NewParser()
	pol, diags := p.ParseSources(srcs...)
	var buf bytes.Buffer
	if len(diags) > 0 {
		if err := p.WriteDiagnostics(&buf, diags); err != nil {
			return nil, err
		}
	}
	if pol == nil || diags.HasErrors() {
		return nil, fmt.Errorf("the policy parser rejects it:\n%s", buf.String())
	}
	var notes []string
	for _, d := range diags {
		if d.Severity == hcl.DiagWarning {
			notes = append(notes, d.Error())
		}
	}
	return notes, nil
}

// policyContextWithout is the policy context without the blocks that
// replace it.
func (c *Checker) policyContextWithout(replace hclsyntax.Blocks) ([]byte, error) {
	f, diags := hclwrite.ParseConfig(c.policyContext, c.policyName, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("parsing the policy context: %w", diags)
	}
	for _, b := range f.Body().Blocks() {
		for _, r := range replace {
			if b.Type() == r.Type && slices.Equal(b.Labels(), r.Labels) {
				f.Body().RemoveBlock(b)
				break
			}
		}
	}
	return f.Bytes(), nil
}
