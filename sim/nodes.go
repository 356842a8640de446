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

// NodeShape is Count nodes of GPUs each: one term of -nodes 4x8,8x4.
type NodeShape struct {
	Count int `json:"count"`
	GPUs  int `json:"gpus"`
}

// ParseNodes reads -nodes: a plain number N is N nodes of gpusPerNode
// GPUs; a list COUNTxGPUS[,COUNTxGPUS...] gives the nodes of each size. It
// returns every node's GPU count, in the order given (nodes are numbered
// in that order, which breaks best-fit ties), and whether s was a list.
func ParseNodes(s string, gpusPerNode int) (gpus []int, list bool, err error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || gpusPerNode <= 0 || gpusPerNode > MaxGPUsPerNode {
			return nil, false, fmt.Errorf("-nodes must be at least 1 and -gpus-per-node between 1 and %d; got %d and %d",
				MaxGPUsPerNode, n, gpusPerNode)
		}
		return slices.Repeat([]int{gpusPerNode}, n), false, nil
	}
	if s == "" {
		return nil, false, fmt.Errorf("-nodes is empty: give a number of nodes, or sizes like 4x8,8x4")
	}
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		count, size, ok := strings.Cut(strings.ToLower(term), "x")
		c, errC := strconv.Atoi(strings.TrimSpace(count))
		g, errG := strconv.Atoi(strings.TrimSpace(size))
		if !ok || errC != nil || errG != nil {
			return nil, true, fmt.Errorf("-nodes %q: %q is not COUNTxGPUS (e.g. 4x8: four nodes of 8 GPUs)", s, term)
		}
		if c <= 0 || g <= 0 || g > MaxGPUsPerNode {
			return nil, true, fmt.Errorf("-nodes %q: %q needs at least 1 node of 1 to %d GPUs", s, term, MaxGPUsPerNode)
		}
		gpus = append(gpus, slices.Repeat([]int{g}, c)...)
	}
	return gpus, true, nil
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

// Shapes groups nodes by size, in the order sizes first appear: 4 nodes
// of 8 then 8 of 4 for -nodes 4x8,8x4.
func Shapes(gpus []int) []NodeShape {
	var shapes []NodeShape
	for _, g := range gpus {
		if i := slices.IndexFunc(shapes, func(s NodeShape) bool { return s.GPUs == g }); i >= 0 {
			shapes[i].Count++
		} else {
			shapes = append(shapes, NodeShape{Count: 1, GPUs: g})
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
		total += s.Count * s.GPUs
	}
	out := strings.Join(parts, " + ")
	if len(shapes) > 1 {
		out += fmt.Sprintf(" (%d GPUs)", total)
	}
	return out
}

// slotsFor is how many allocations of g GPUs the empty cluster holds.
func slotsFor(gpus []int, g int) int {
	n := 0
	for _, size := range gpus {
		n += size / g
	}
	return n
}
