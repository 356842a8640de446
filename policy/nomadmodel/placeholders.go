package nomadmodel

import "github.com/gpu-steward/steward/policy/engine"

// Placeholders hold free GPUs set aside for a beneficiary Steward still
// holds (controller/placeholder.go; the simulator's marks model them). A
// placeholder registered in a round must leave alone the GPUs set aside
// for work Nomad is to place in that round (resumed onto them, its own
// placeholder purged): Nomad places that work on them, and a placeholder
// taking them too counts them twice, for two beneficiaries. The work
// placed then waits for GPUs that were set aside for it, and the other
// beneficiary's victims were preempted for GPUs it cannot have either.
// The controller (wantedPlaceholders) and the simulator (keepMarks) both
// leave them out with PlacingMarks.

// PlacingMarks sums, by node ID, the GPUs of marks set aside for work
// Nomad is to place in this round (placing reports which), less what held
// reports a placeholder of that work already holds of them on the node
// (GPUs the caller counts as taken already; nil: none): what a new
// placeholder must not count as free. held is asked once per
// beneficiary's group and node, with the marks there summed.
func PlacingMarks(marks []engine.Earmark, placing func(m engine.Earmark) bool, held func(m engine.Earmark) int) map[string]int {
	type key struct {
		ref         engine.JobRef
		group, node string
	}
	var sum map[key]int
	for _, m := range marks {
		if m.GPUs <= 0 || !placing(m) {
			continue
		}
		if sum == nil {
			sum = map[key]int{}
		}
		sum[key{m.For, m.ForGroup, m.NodeID}] += m.GPUs
	}
	var out map[string]int
	for k, g := range sum {
		if held != nil {
			g -= held(engine.Earmark{NodeID: k.node, GPUs: g, For: k.ref, ForGroup: k.group})
		}
		if g <= 0 {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[k.node] += g
	}
	return out
}
