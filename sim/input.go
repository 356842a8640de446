package sim

import (
	"fmt"
	"strings"
)

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
	// UnknownTierJobs counts, by tier name, jobs whose tier the policy
	// lacks; they ran as their tenant's default tier (unknown_tier.go).
	UnknownTierJobs map[string]int `json:"unknown_tier_jobs,omitempty"`
	unknown         []UnknownTier
}

// prepare derives the trace's workload for a comparison (Derive, with the
// options' cluster) and says what went in.
func prepare(tr *Trace, o Options) (*Derivation, Input, error) {
	nodeGPUs, err := o.Config.nodeGPUs()
	if err != nil {
		return nil, Input{}, fmt.Errorf("trace %s: %w", tr.Name, err)
	}
	rows := len(tr.Jobs) + tr.Dropped // job rows, CPU-only ones included
	if err := o.Window.Check(); err != nil {
		return nil, Input{}, fmt.Errorf("trace %s: %w", tr.Name, err)
	}
	window := o.Window.apply(tr) // before Derive: -limit counts from the window's start
	d, err := Derive(tr, DeriveOptions{Seed: o.Seed, Policy: o.Policy, Nodes: o.Nodes,
		GPUsPerNode: o.GPUsPerNode, NodeGPUs: o.NodeGPUs, NodeModels: o.NodeModels, Limit: o.Limit})
	if err != nil {
		return nil, Input{}, fmt.Errorf("trace %s: %w", tr.Name, err)
	}
	if len(tr.Jobs) == 0 {
		return nil, Input{}, &NothingToSimulate{Trace: tr.Name, Reason: nothingReason(rows, tr.Dropped, window, d)}
	}
	in := Input{NodeShapes: Shapes(nodeGPUs, o.NodeModels), GPUs: d.Capacity, DroppedTooLarge: d.Dropped, FractionalGPUJobs: d.Fractional,
		Window: window, UnknownTierJobs: unknownTierJobs(d.Unknown), unknown: d.Unknown}
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

// NothingToSimulate is a trace that leaves no job to simulate: it has no
// job rows, or every job was left out (CPU-only, outside the window, too
// large for the cluster). Not an error in the trace, but no figures
// either: steward simulate warns and exits 2.
type NothingToSimulate struct {
	Trace  string
	Reason string
}

func (e *NothingToSimulate) Error() string {
	return fmt.Sprintf("trace %s: nothing to simulate: %s", e.Trace, e.Reason)
}

// nothingReason says why no job is left of rows job rows.
func nothingReason(rows, cpuOnly int, window *WindowInfo, d *Derivation) string {
	if rows == 0 {
		return "0 job rows"
	}
	outside, outsideText := 0, ""
	if window != nil {
		outside = window.JobsOutside
		to := window.To
		if to == "" {
			to = "the end"
		}
		outsideText = fmt.Sprintf("submitted outside the window (%s to %s)", window.From, to)
	}
	largeText := fmt.Sprintf("larger than the cluster (%d GPUs)", d.Capacity)
	causes := []struct {
		n          int
		verb, text string
	}{{cpuOnly, "are", "CPU-only (gpu_num 0)"}, {outside, "were", outsideText}, {d.Dropped, "are", largeText}}
	var parts []string
	for _, c := range causes {
		if c.n == rows {
			return fmt.Sprintf("all %d jobs %s %s", rows, c.verb, c.text)
		}
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.text))
		}
	}
	return fmt.Sprintf("none of %d jobs is left: %s", rows, strings.Join(parts, ", "))
}
