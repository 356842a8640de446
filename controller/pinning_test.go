package controller

import (
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestPinnedNodes: a group pinned to a node by its constraints (job, group
// or task level) may use that node only, so that Steward never preempts
// elsewhere for it (issue 29); constraints that do not name a node leave it
// free to use any.
func TestPinnedNodes(t *testing.T) {
	nodes := []engine.Node{{ID: "id-1", Name: "gpu-1"}, {ID: "id-2", Name: "gpu-2"}, {ID: "id-3", Name: "gpu-3"}}
	pin := func(l, op, r string) *api.Constraint { return &api.Constraint{LTarget: l, Operand: op, RTarget: r} }
	cases := []struct {
		name             string
		job, group, task []*api.Constraint
		want             []string
	}{
		{"no constraints: any node", nil, nil, nil, nil},
		{"an attribute constraint: any node", nil, []*api.Constraint{pin("${attr.cpu.arch}", "=", "amd64")}, nil, nil},
		{"group pinned by name", nil, []*api.Constraint{pin("${node.unique.name}", "=", "gpu-2")}, nil, []string{"id-2"}},
		{"job pinned by ID", []*api.Constraint{pin("${node.unique.id}", "==", "id-3")}, nil, nil, []string{"id-3"}},
		{"task pinned by name", nil, nil, []*api.Constraint{pin("${node.unique.name}", "is", "gpu-1")}, []string{"id-1"}},
		{"pinned to a node that is gone: none", nil, []*api.Constraint{pin("${node.unique.name}", "=", "gpu-9")}, nil, []string{}},
		{"two pins that disagree: none", []*api.Constraint{pin("${node.unique.name}", "=", "gpu-1")},
			[]*api.Constraint{pin("${node.unique.id}", "=", "id-2")}, nil, []string{}},
		{"a negated name: not a pin", nil, []*api.Constraint{pin("${node.unique.name}", "!=", "gpu-1")}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := &api.Job{ID: ptr("nb"), Namespace: ptr("ml"), Constraints: tc.job, TaskGroups: []*api.TaskGroup{{
				Name: ptr("work"), Count: ptr(1), Constraints: tc.group,
				Tasks: []*api.Task{{Name: "nb", Constraints: tc.task}}}}}
			got := pinnedNodes(toObservedJob(j).Groups["work"].Pins, nodes)
			if (got == nil) != (tc.want == nil) || !slices.Equal(got, tc.want) {
				t.Fatalf("pinned nodes = %#v, want %#v", got, tc.want)
			}
		})
	}
}
