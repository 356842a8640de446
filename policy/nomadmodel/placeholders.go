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
// leave them out with PlacingMarks, and size each placeholder with Holds.

// PlacingMarks sums, by node ID, the GPUs of marks set aside for work
// Nomad is to place in this round (placing reports which): what a
// placeholder must not count as free. A placeholder of that work is
// purged in this round: the caller counts its GPUs as free. need reports
// the GPUs the work asks for in all (0: not known), asked once per
// beneficiary's group and node with the marks there summed: marks beyond
// it are not the work's to take, and count as free. A victim may free
// more than its beneficiary asks for (4 GPUs for a 1-GPU notebook), and
// the plan may have promised the rest to a second beneficiary beside its
// own victims (an Earmark, engine takeSurplus); counted whole for the
// first, they were left to whatever Nomad placed next, and the second's
// victims stopped for nothing (issue 31).
func PlacingMarks(marks []engine.Earmark, placing func(m engine.Earmark) bool, need func(m engine.Earmark) int) map[string]int {
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
		if need != nil {
			if n := need(engine.Earmark{NodeID: k.node, GPUs: g, For: k.ref, ForGroup: k.group}); n > 0 {
				g = min(g, n)
			}
		}
		if out == nil {
			out = map[string]int{}
		}
		out[k.node] += g
	}
	return out
}

// Placeholder is one for a beneficiary's group on a node: Want, the
// GPUs set aside for it there; Held, what it holds now (0: none yet).
type Placeholder struct {
	Node       string
	Want, Held int
}

// Holds is what each placeholder of hs is to hold after this round, in
// the order given: what it holds, up to Want (a caller holding more gives
// it up), and the GPUs free on its node now, up to Want; free, by node
// ID, is the GPUs no allocation or placeholder holds and no work placed
// now is to take (PlacingMarks), less what the placeholders take. So
// GPUs promised to a beneficiary while still draining (an Earmark beside
// another victim's GPUs) are held once they free, while it waits. Before,
// a placeholder held only what was free when it was first registered:
// when the rest freed, Nomad placed other work there and the
// beneficiary's victims had stopped for nothing (issue 31: Helios seed 5,
// an 8-GPU notebook at 117.9 h).
func Holds(hs []Placeholder, free map[string]int) []int {
	out := make([]int, len(hs))
	for i, h := range hs {
		g := max(0, min(h.Held, h.Want))
		if more := min(h.Want-g, free[h.Node]); more > 0 {
			g += more
			free[h.Node] -= more
		}
		out[i] = g
	}
	return out
}
