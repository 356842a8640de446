package nomadmodel

import (
	"slices"

	"github.com/gpu-steward/steward/policy/engine"
)

// Fits reports whether Nomad may place an allocation of d on node n, GPUs
// aside: in its node pool ("" and "all": any), on a device class its
// request accepts (nil: any), on a node its constraints pin it to (nil:
// any; empty: none).
func Fits(d *engine.Demand, n *engine.Node) bool {
	if d.NodePool != "" && d.NodePool != "all" && d.NodePool != n.NodePool {
		return false
	}
	if d.Devices != nil && !slices.Contains(d.Devices, n.Device) {
		return false
	}
	return d.Nodes == nil || slices.Contains(d.Nodes, n.ID)
}

// BestFit is Nomad's binpack choice: the node with the fewest free GPUs
// that still has g, the first of them on ties; -1 when none has room.
// free[i] is node i's free GPUs (0 for a node the allocation may not use).
func BestFit(free []int, g int) int {
	best := -1
	for i, f := range free {
		if f >= g && (best < 0 || f < free[best]) {
			best = i
			if f == g {
				break
			}
		}
	}
	return best
}

// BestFitWhere is BestFit among the nodes ok accepts.
func BestFitWhere(free []int, g int, ok func(i int) bool) int {
	best := -1
	for i, f := range free {
		if f >= g && (best < 0 || f < free[best]) && ok(i) {
			best = i
			if f == g {
				break
			}
		}
	}
	return best
}
