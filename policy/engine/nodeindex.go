package engine

import (
	"github.com/gpu-steward/steward/policy"
)

// nodeIndex is what finds nodes and victims fast: free GPUs per set of
// nodes, candidates per set, potentials and lower bounds per node, and the
// searches' scratch. It hears every change to the model's GPUs through one
// call, change, which keeps capacity, the units' taken flags and the dirty
// nodes (potentials and bounds, settled when next read) in step.
type nodeIndex struct {
	// m is the model the index is over: read here (units, nodes, the
	// placement's cells), never written here; the model's take, untake
	// and place report each change to the index (change).
	m *model

	cap      *capacity
	setOrder map[int32]policy.PoolOrder // orderOf's answers
	cands    []candidates               // [set]: preemptible units, best victims first

	levels    []int          // distinct priorities of preemptible work
	pot       []*capacity    // [level] node potentials (potential.go)
	nodeUnits [][]nodeUnit   // [node] preemptible units, best victims first
	lb        []uint64       // [node*(maxGPUs+1)+g] lower bound on the worst victim for g GPUs
	order     nodeOrder      // nodes by lower bound (nodeorder.go)
	dirty     dirtyNodes     // nodes whose pot and lb lag behind (potential.go)
	bars      []barPotential // wait promotions' potentials (waitbars.go)
	refusable refusable      // the units a bar may refuse, for building bars
	settled   []int32        // nodes settled since the first of bars was built
	pick      nodePick       // searchNodes' scratch
	walk      walkScratch    // findVictims' scratch
	pruned    []victim       // the block prune carves its lists from
}

// noUnit is change's unit for a change no unit made: a placement, or GPUs
// set aside that become free.
const noUnit = -1

// change is how the index hears of every change to node n: gpus freed
// there (negative: filled), by taking unit ui (gpus > 0) or putting it
// back (gpus < 0), or by no unit (noUnit). It keeps the unit's taken flag
// in the node's list, the node's free GPUs, and marks the node dirty, in
// that order.
func (ix *nodeIndex) change(n int32, ui int32, gpus int32) {
	if ui != noUnit {
		ix.setTaken(n, ui, gpus > 0)
	}
	ix.cap.add(n, gpus)
	ix.touched(n)
}
