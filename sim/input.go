package sim

import "fmt"

// Input says what of a trace was simulated, and on what cluster: the
// report's header and results.json carry it next to the figures.
type Input struct {
	// NodeShapes are the cluster's nodes by size (-nodes 4x8,8x4 gives
	// two); GPUs is their total.
	NodeShapes []NodeShape `json:"node_shapes"`
	GPUs       int         `json:"gpus"`
	// DroppedTooLarge jobs could never be placed on the cluster.
	DroppedTooLarge int `json:"dropped_too_large"`
	// FractionalGPUJobs asked for a fraction of a GPU (gpus 0.5) and were
	// simulated with one whole GPU.
	FractionalGPUJobs int `json:"fractional_gpu_jobs"`
	// Window is the part of the trace simulated (-from, -to); nil: all.
	Window *WindowInfo `json:"window,omitempty"`
}

// prepare derives the trace's workload for a comparison (Derive, with the
// options' cluster) and says what went in.
func prepare(tr *Trace, o Options) (*Derivation, Input, error) {
	nodeGPUs, err := o.Config.nodeGPUs()
	if err != nil {
		return nil, Input{}, fmt.Errorf("trace %s: %w", tr.Name, err)
	}
	if err := o.Window.Check(); err != nil {
		return nil, Input{}, fmt.Errorf("trace %s: %w", tr.Name, err)
	}
	window := o.Window.apply(tr) // before Derive: -limit counts from the window's start
	d, err := Derive(tr, DeriveOptions{Seed: o.Seed, Policy: o.Policy, Nodes: o.Nodes,
		GPUsPerNode: o.GPUsPerNode, NodeGPUs: o.NodeGPUs, Limit: o.Limit})
	if err != nil {
		return nil, Input{}, fmt.Errorf("trace %s: %w", tr.Name, err)
	}
	in := Input{NodeShapes: Shapes(nodeGPUs), GPUs: d.Capacity, DroppedTooLarge: d.Dropped, FractionalGPUJobs: d.Fractional,
		Window: window}
	return d, in, nil
}

// nodes and gpusPerNode are the report's original cluster fields: the
// node count, and their size when all nodes have the same (else 0, left
// out of results.json; node_shapes has them).
func (in *Input) nodes() (nodes, gpusPerNode int) {
	for _, s := range in.NodeShapes {
		nodes += s.Count
	}
	if len(in.NodeShapes) == 1 {
		gpusPerNode = in.NodeShapes[0].GPUs
	}
	return nodes, gpusPerNode
}

// setting says the cluster, and the window when there is one, for the
// table's header.
func (rep *Report) setting() string {
	shapes := rep.NodeShapes
	if len(shapes) == 0 { // a Report built by hand, not by Compare
		shapes = []NodeShape{{Count: rep.Nodes, GPUs: rep.GPUsPerNode}}
	}
	s := describeShapes(shapes)
	if rep.Window != nil {
		s += "; " + rep.Window.String()
	}
	return s
}
