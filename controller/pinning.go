package controller

import (
	"slices"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// A group whose constraints pin it to one node (or a few, by name or ID)
// can use GPUs there only: preempting work on any other node frees nothing
// for it (issue 29). Steward reads the pins from the job's, the group's and
// its tasks' constraints and hands the engine the nodes they leave
// (engine.Demand.Nodes). Other constraints (attributes, meta, regexps) are
// not evaluated here: the group then counts as able to use any node of its
// pool and device class, as before.

// NodePin is one pinning constraint: the node attribute it names
// ("name" or "id") and the values it accepts.
type NodePin struct {
	By     string
	Values []string
}

// nodePins returns the pinning constraints among cs.
func nodePins(cs []*api.Constraint) []NodePin {
	var out []NodePin
	for _, c := range cs {
		if c == nil {
			continue
		}
		var by string
		switch c.LTarget {
		case "${node.unique.name}":
			by = "name"
		case "${node.unique.id}":
			by = "id"
		default:
			continue
		}
		switch c.Operand {
		case "", "=", "==", "is":
			out = append(out, NodePin{By: by, Values: []string{c.RTarget}})
		}
	}
	return out
}

// groupPins are the pins of a group: its job's, its own and its tasks'.
func groupPins(j *api.Job, tg *api.TaskGroup) []NodePin {
	pins := append(nodePins(j.Constraints), nodePins(tg.Constraints)...)
	for _, t := range tg.Tasks {
		if t != nil {
			pins = append(pins, nodePins(t.Constraints)...)
		}
	}
	return pins
}

// pinnedNodes returns the IDs of the nodes every pin accepts, in node
// order; nil when there are no pins (any node). A group pinned to a node
// that is gone gets an empty, non-nil list: no node will do.
func pinnedNodes(pins []NodePin, nodes []engine.Node) []string {
	if len(pins) == 0 {
		return nil
	}
	out := []string{}
	for _, n := range nodes {
		ok := true
		for _, p := range pins {
			v := n.ID
			if p.By == "name" {
				v = n.Name
			}
			if !slices.Contains(p.Values, v) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, n.ID)
		}
	}
	return out
}
