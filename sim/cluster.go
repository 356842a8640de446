package sim

import (
	"fmt"
	"slices"

	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// cluster is the model of Nomad's placement: nodes of any GPU count,
// allocations bin-packed onto them (best fit: the node with the fewest
// free GPUs that still fits, lowest index on ties, as Nomad's binpack
// scoring prefers the fullest node), and gangs placed all or nothing.
type cluster struct {
	maxGPUs   int       // of the largest node
	free      []int     // per node
	owner     [][]int32 // [node][gpu] job index, -1 when free
	byFree    []int     // [f] number of nodes with exactly f free GPUs
	totalFree int
	gpuIDs    [][]string // [node][gpu] IDs for the engine's snapshot
	nodeIDs   []string
	nodeIdx   map[string]int // node ID → index
	// nodeModel is each node's GPU model (an index into models); nil
	// when the cluster has no models (every job runs anywhere).
	nodeModel []int32
	models    []string
	byFreeM   [][]int // [model][f] as byFree, per model
}

// anyModel is the model of a job that asks for none; noModel that of one
// asking for a model no node has.
const (
	anyModel int32 = -1
	noModel  int32 = -2
)

// newCluster makes one node per entry of gpus, with that many GPUs, and of
// the GPU model given in models (nil: none).
func newCluster(gpus []int, models []string) *cluster {
	nodes := len(gpus)
	c := &cluster{
		maxGPUs: slices.Max(gpus),
		free:    make([]int, nodes),
		owner:   make([][]int32, nodes),
		gpuIDs:  make([][]string, nodes),
		nodeIDs: make([]string, nodes),
		nodeIdx: make(map[string]int, nodes),
	}
	c.byFree = make([]int, c.maxGPUs+1)
	for n, size := range gpus {
		c.free[n] = size
		c.totalFree += size
		c.byFree[size]++
		c.owner[n] = make([]int32, size)
		c.gpuIDs[n] = make([]string, size)
		c.nodeIDs[n] = fmt.Sprintf("node-%03d", n)
		c.nodeIdx[c.nodeIDs[n]] = n
		for g := range c.owner[n] {
			c.owner[n][g] = -1
			c.gpuIDs[n][g] = fmt.Sprintf("%s-gpu%d", c.nodeIDs[n], g)
		}
	}
	if len(models) == nodes {
		c.nodeModel = make([]int32, nodes)
		for n, m := range models {
			i := c.modelOf(m)
			if i == noModel {
				i = int32(len(c.models))
				c.models = append(c.models, m)
				c.byFreeM = append(c.byFreeM, make([]int, c.maxGPUs+1))
			}
			c.nodeModel[n] = i
			c.byFreeM[i][gpus[n]]++
		}
	}
	return c
}

// modelOf is the model index of a job asking for model ("": any).
func (c *cluster) modelOf(model string) int32 {
	if model == "" {
		return anyModel
	}
	if i := slices.Index(c.models, model); i >= 0 {
		return int32(i)
	}
	return noModel
}

// usable reports whether node n has GPUs of model m.
func (c *cluster) usable(n int, m int32) bool {
	return m == anyModel || m >= 0 && c.nodeModel[n] == m
}

// mask zeroes, in free, the nodes without GPUs of model m: bestFit then
// finds only nodes the job can use.
func (c *cluster) mask(free []int, m int32) {
	if m == anyModel {
		return
	}
	for n := range free {
		if !c.usable(n, m) {
			free[n] = 0
		}
	}
}

// fits reports whether count allocations of g GPUs each fit now: each node
// holds floor(free/g) of them.
func (c *cluster) fits(g, count int, m int32) bool {
	if g <= 0 || g > c.maxGPUs || g*count > c.totalFree || m == noModel {
		return false
	}
	byFree := c.byFree
	if m >= 0 {
		byFree = c.byFreeM[m]
	}
	room := 0
	for f := c.maxGPUs; f >= g; f-- {
		room += byFree[f] * (f / g)
		if room >= count {
			return true
		}
	}
	return false
}

// bestFitOf is bestFit among the nodes with GPUs of model m.
func (c *cluster) bestFitOf(free []int, g int, m int32) int {
	if m == anyModel {
		return bestFit(free, g)
	}
	return nomadmodel.BestFitWhere(free, g, func(n int) bool { return c.usable(n, m) })
}

// bestFit returns the node with the fewest free GPUs, at least g, in free
// (the cluster's own counts or a scratch copy); -1 when none has room:
// Nomad's binpack as the one model of it has it.
func bestFit(free []int, g int) int { return nomadmodel.BestFit(free, g) }

// plan places count allocations of g GPUs of model m by best fit, all or nothing, and
// returns their nodes (one per allocation) without changing the cluster.
func (c *cluster) plan(g, count int, m int32, scratch []int) ([]int, bool) {
	if !c.fits(g, count, m) {
		return nil, false
	}
	copy(scratch, c.free)
	c.mask(scratch, m)
	nodes := make([]int, 0, count)
	for range count {
		n := bestFit(scratch, g)
		if n < 0 {
			return nil, false
		}
		scratch[n] -= g
		nodes = append(nodes, n)
	}
	return nodes, true
}

// take gives g GPUs of node n to job j and returns their indices.
func (c *cluster) take(n, g int, j int32) []int8 {
	if c.free[n] < g {
		panic(fmt.Sprintf("sim: node %d has %d free GPUs, %d taken", n, c.free[n], g))
	}
	gpus := make([]int8, 0, g)
	for i, o := range c.owner[n] {
		if o < 0 {
			c.owner[n][i] = j
			gpus = append(gpus, int8(i))
			if len(gpus) == g {
				break
			}
		}
	}
	c.setFree(n, c.free[n]-g)
	return gpus
}

// give returns GPUs of node n to the free pool.
func (c *cluster) give(n int, gpus []int8) {
	for _, i := range gpus {
		c.owner[n][i] = -1
	}
	c.setFree(n, c.free[n]+len(gpus))
}

func (c *cluster) setFree(n, f int) {
	if c.nodeModel != nil {
		m := c.byFreeM[c.nodeModel[n]]
		m[c.free[n]]--
		m[f]++
	}
	c.byFree[c.free[n]]--
	c.totalFree += f - c.free[n]
	c.free[n] = f
	c.byFree[f]++
}
