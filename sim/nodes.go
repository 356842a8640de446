package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxGPUsPerNode bounds a node's GPUs: the cluster model keeps GPU indices
// in an int8.
const MaxGPUsPerNode = 127

// NodeShape is Count nodes of GPUs each, of one GPU model ("" when the
// cluster has none): one term of -nodes 4x8:H100,8x4:A100.
type NodeShape struct {
	Count int    `json:"count"`
	GPUs  int    `json:"gpus"`
	Model string `json:"model,omitempty"`
}

// ParseNodes reads -nodes: a plain number N is N nodes of gpusPerNode
// GPUs; a list COUNTxGPUS[:MODEL][,COUNTxGPUS[:MODEL]...] gives the nodes
// of each size, and of each GPU model. It returns every node's GPU count
// and model, in the order given (nodes are numbered in that order, which
// breaks best-fit ties), and whether s was a list. models is nil when no
// term names a model; when some do, every term must.
func ParseNodes(s string, gpusPerNode int) (gpus []int, models []string, list bool, err error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || gpusPerNode <= 0 || gpusPerNode > MaxGPUsPerNode {
			return nil, nil, false, fmt.Errorf("-nodes must be at least 1 and -gpus-per-node between 1 and %d; got %d and %d",
				MaxGPUsPerNode, n, gpusPerNode)
		}
		return slices.Repeat([]int{gpusPerNode}, n), nil, false, nil
	}
	if s == "" {
		return nil, nil, false, fmt.Errorf("-nodes is empty: give a number of nodes, or sizes like 4x8,8x4 (or 4x8:H100,8x4:A100)")
	}
	named := 0
	terms := strings.Split(s, ",")
	for _, term := range terms {
		term = strings.TrimSpace(term)
		shape, model, hasModel := strings.Cut(term, ":")
		model = strings.TrimSpace(model)
		count, size, ok := strings.Cut(strings.ToLower(shape), "x")
		c, errC := strconv.Atoi(strings.TrimSpace(count))
		g, errG := strconv.Atoi(strings.TrimSpace(size))
		if !ok || errC != nil || errG != nil || hasModel && model == "" {
			return nil, nil, true, fmt.Errorf("-nodes %q: %q is not COUNTxGPUS[:MODEL] (e.g. 4x8: four nodes of 8 GPUs; 4x8:H100: of H100s)", s, term)
		}
		if c <= 0 || g <= 0 || g > MaxGPUsPerNode {
			return nil, nil, true, fmt.Errorf("-nodes %q: %q needs at least 1 node of 1 to %d GPUs", s, term, MaxGPUsPerNode)
		}
		gpus = append(gpus, slices.Repeat([]int{g}, c)...)
		models = append(models, slices.Repeat([]string{model}, c)...)
		if hasModel {
			named++
		}
	}
	switch named {
	case 0:
		models = nil
	case len(terms):
	default:
		return nil, nil, true, fmt.Errorf("-nodes %q: some terms name a GPU model and some do not: name one for every term", s)
	}
	return gpus, models, true, nil
}

// nodeGPUs is every node's GPU count: NodeGPUs when set, else Nodes nodes
// of GPUsPerNode (Config's original, uniform form).
func (c *Config) nodeGPUs() ([]int, error) {
	gpus := c.NodeGPUs
	if len(gpus) == 0 {
		if c.Nodes <= 0 || c.GPUsPerNode <= 0 || c.GPUsPerNode > MaxGPUsPerNode {
			return nil, fmt.Errorf("cluster of %d nodes × %d GPUs: need at least 1 × 1 and at most %d GPUs a node",
				c.Nodes, c.GPUsPerNode, MaxGPUsPerNode)
		}
		return slices.Repeat([]int{c.GPUsPerNode}, c.Nodes), nil
	}
	for n, g := range gpus {
		if g <= 0 || g > MaxGPUsPerNode {
			return nil, fmt.Errorf("node %d has %d GPUs: need 1 to %d", n, g, MaxGPUsPerNode)
		}
	}
	return gpus, nil
}

// totalGPUs is the cluster's capacity (0 for an invalid configuration,
// which newSimulator rejects first).
func (c *Config) totalGPUs() int {
	gpus, _ := c.nodeGPUs()
	total := 0
	for _, g := range gpus {
		total += g
	}
	return total
}

// Shapes groups nodes by size and model (models: nil, or one per node), in
// the order they first appear: 4 nodes of 8 then 8 of 4 for -nodes 4x8,8x4.
func Shapes(gpus []int, models []string) []NodeShape {
	var shapes []NodeShape
	for n, g := range gpus {
		model := ""
		if n < len(models) {
			model = models[n]
		}
		if i := slices.IndexFunc(shapes, func(s NodeShape) bool { return s.GPUs == g && s.Model == model }); i >= 0 {
			shapes[i].Count++
		} else {
			shapes = append(shapes, NodeShape{Count: 1, GPUs: g, Model: model})
		}
	}
	return shapes
}

// describeShapes says the cluster in words: "2 nodes × 8 GPUs", or
// "4 nodes × 8 GPUs + 8 nodes × 4 GPUs (64 GPUs)".
func describeShapes(shapes []NodeShape) string {
	parts := make([]string, len(shapes))
	total := 0
	for i, s := range shapes {
		noun := "nodes"
		if s.Count == 1 {
			noun = "node"
		}
		parts[i] = fmt.Sprintf("%d %s × %d GPUs", s.Count, noun, s.GPUs)
		if s.Model != "" {
			parts[i] = fmt.Sprintf("%d %s × %d %s GPUs", s.Count, noun, s.GPUs, s.Model)
		}
		total += s.Count * s.GPUs
	}
	out := strings.Join(parts, " + ")
	if len(shapes) > 1 {
		out += fmt.Sprintf(" (%d GPUs)", total)
	}
	return out
}

// slotsFor is how many allocations of g GPUs of model ("": any) the empty
// cluster holds (models: nil, or one per node).
func slotsFor(gpus []int, models []string, model string, g int) int {
	n := 0
	for i, size := range gpus {
		if model == "" || i < len(models) && models[i] == model {
			n += size / g
		}
	}
	return n
}
