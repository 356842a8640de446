package doccheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Kind is what an example is, and so which parser checks it.
type Kind string

// The kinds of example the checker knows. Jobspec fragments (a group, a
// task, blocks of a task) are wrapped into a job before Nomad's parser
// reads them.
const (
	KindPolicy   Kind = "Steward policy"
	KindJob      Kind = "Nomad jobspec"
	KindGroup    Kind = "jobspec group"
	KindTask     Kind = "jobspec task"
	KindTaskPart Kind = "jobspec task blocks"
	KindPlugin   Kind = "Nomad agent plugin block"
	KindACL      Kind = "Nomad ACL policy"
)

// Top-level block types of the Nomad languages an example may be in. The
// policy language's come from the policy context (example.hcl, which uses
// every block), so that new policy blocks need no change here.
var (
	jobBlocks = map[string]Kind{
		"job": KindJob, "variable": KindJob, "locals": KindJob,
		"group": KindGroup,
		"task":  KindTask,
	}
	// taskPartBlocks are blocks of a task that docs show on their own.
	taskPartBlocks = []string{"template", "resources", "artifact", "env", "lifecycle", "logs", "restart", "volume_mount", "identity"}
	// aclBlocks are the top-level blocks of a Nomad ACL policy; its
	// unlabelled plugin block is told from the agent's labelled one.
	aclBlocks = []string{"namespace", "node", "agent", "operator", "quota", "host_volume", "node_pool"}
)

// classify tells an example's kind from its top-level blocks. Every block
// must be of one kind; top-level attributes, unknown blocks and a mix of
// kinds are errors, so that no example goes unchecked by mistake.
func classify(body *hclsyntax.Body, policyBlocks map[string]bool) (Kind, error) {
	if len(body.Attributes) > 0 {
		names := slices.Sorted(maps.Keys(body.Attributes))
		return "", fmt.Errorf("cannot classify: top-level attributes %s (no language the checker knows has them)", strings.Join(names, ", "))
	}
	if len(body.Blocks) == 0 {
		return "", fmt.Errorf("cannot classify: no blocks")
	}
	var kind Kind
	for _, b := range body.Blocks {
		k, ok := blockKind(b, policyBlocks)
		if !ok {
			return "", fmt.Errorf("cannot classify: a top-level %q block is in none of the languages the checker knows (policy blocks: %s; jobspec, agent plugin and ACL policy blocks)",
				b.Type, strings.Join(slices.Sorted(maps.Keys(policyBlocks)), ", "))
		}
		if kind != "" && k != kind {
			return "", fmt.Errorf("cannot classify: mixes a %s and a %s (%q block at line %d): split the example", kind, k, b.Type, b.TypeRange.Start.Line)
		}
		kind = k
	}
	return kind, nil
}

func blockKind(b *hclsyntax.Block, policyBlocks map[string]bool) (Kind, bool) {
	switch {
	case policyBlocks[b.Type]:
		return KindPolicy, true
	case jobBlocks[b.Type] != "":
		return jobBlocks[b.Type], true
	case b.Type == "plugin" && len(b.Labels) == 1:
		return KindPlugin, true
	case b.Type == "plugin" && len(b.Labels) == 0, slices.Contains(aclBlocks, b.Type):
		return KindACL, true
	case slices.Contains(taskPartBlocks, b.Type):
		return KindTaskPart, true
	}
	return "", false
}
