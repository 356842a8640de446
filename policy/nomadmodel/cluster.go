package nomadmodel

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Bounds on what a caller may build: a model is fed from traces and
// captures that tenants can size.
const (
	MaxNodes       = 100_000
	MaxGPUsPerNode = 1024
	MaxCount       = 100_000
)

// Cluster is Nomad's state as Steward changes it: nodes, the allocations
// running on them (draining ones included), the job groups and their
// counts, and the drains in progress.
type Cluster struct {
	nodes  []engine.Node
	nodeIx map[string]int
	allocs []alloc
	groups []*Group
	drains []*drain
	marks  []mark
	seq    int
}

// alloc is a running allocation and the group it belongs to.
type alloc struct {
	a     engine.Alloc
	group *Group
	node  int
}

// Group is one task group of a job as Nomad and Steward hold it. Its
// queued allocations are its count less those running: Nomad places them
// when they fit. Steward holds work by lowering the count (Held).
type Group struct {
	Job          engine.Job
	Name         string
	GPUsPerAlloc int
	// Count is the group's count in Nomad: running and queued.
	Count int
	// Held is what Steward took out of the count and keeps.
	Held     int
	NodePool string   // "" or "all": any node
	Devices  []string // device classes its request accepts; nil: any
	Nodes    []string // nodes it is pinned to; nil: any
	Since    time.Time
	// Requeued, OwnerResumed and Preempted are as engine.Demand's.
	Requeued, OwnerResumed, Preempted bool
	// ahead: resumed ahead of Nomad's queue (engine.Action.Ahead).
	ahead bool
}

// New makes a cluster of nodes, none running anything.
func New(nodes []engine.Node) (*Cluster, error) {
	if len(nodes) > MaxNodes {
		return nil, fmt.Errorf("nomadmodel: %d nodes, at most %d", len(nodes), MaxNodes)
	}
	c := &Cluster{nodes: slices.Clone(nodes), nodeIx: make(map[string]int, len(nodes))}
	for i, n := range nodes {
		if n.GPUs < 0 || n.GPUs > MaxGPUsPerNode {
			return nil, fmt.Errorf("nomadmodel: node %s has %d GPUs, want 0 to %d", n.ID, n.GPUs, MaxGPUsPerNode)
		}
		if _, dup := c.nodeIx[n.ID]; dup || n.ID == "" {
			return nil, fmt.Errorf("nomadmodel: node ID %q empty or not unique", n.ID)
		}
		c.nodeIx[n.ID] = i
	}
	return c, nil
}

// AddGroup registers a job group: its Count allocations queued, none
// running (Start places some).
func (c *Cluster) AddGroup(g Group) (*Group, error) {
	if g.GPUsPerAlloc <= 0 || g.GPUsPerAlloc > MaxGPUsPerNode {
		return nil, fmt.Errorf("nomadmodel: group %s/%s asks %d GPUs an allocation, want 1 to %d", g.Job.Ref, g.Name, g.GPUsPerAlloc, MaxGPUsPerNode)
	}
	if g.Count < 0 || g.Count > MaxCount || g.Held < 0 || g.Held > MaxCount {
		return nil, fmt.Errorf("nomadmodel: group %s/%s has count %d, held %d, want 0 to %d", g.Job.Ref, g.Name, g.Count, g.Held, MaxCount)
	}
	if c.group(g.Job.Ref, g.Name) != nil {
		return nil, fmt.Errorf("nomadmodel: group %s/%s registered twice", g.Job.Ref, g.Name)
	}
	for _, o := range c.groups {
		if o.Job.Ref == g.Job.Ref {
			g.Job = o.Job // one job: the groups share its priority and record
		}
	}
	p := &g
	c.groups = append(c.groups, p)
	return p, nil
}

// Start runs one allocation of g on node at at, as if Nomad had placed it
// before the model began; it must fit.
func (c *Cluster) Start(g *Group, node string, at time.Time) (string, error) {
	n, ok := c.nodeIx[node]
	if !ok {
		return "", fmt.Errorf("nomadmodel: no node %s", node)
	}
	if c.queued(g) < 1 {
		return "", fmt.Errorf("nomadmodel: group %s/%s has no allocation left to start", g.Job.Ref, g.Name)
	}
	if c.free(n) < g.GPUsPerAlloc {
		return "", fmt.Errorf("nomadmodel: node %s has %d GPUs free, %s/%s asks %d", node, c.free(n), g.Job.Ref, g.Name, g.GPUsPerAlloc)
	}
	return c.start(g, n, at), nil
}

func (c *Cluster) group(ref engine.JobRef, name string) *Group {
	for _, g := range c.groups {
		if g.Job.Ref == ref && g.Name == name {
			return g
		}
	}
	return nil
}

// jobGroups are the groups of job ref, in registration order.
func (c *Cluster) jobGroups(ref engine.JobRef) []*Group {
	var out []*Group
	for _, g := range c.groups {
		if g.Job.Ref == ref {
			out = append(out, g)
		}
	}
	return out
}

// setJob changes what every group of a job records of it.
func (c *Cluster) setJob(ref engine.JobRef, fn func(j *engine.Job)) {
	for _, g := range c.jobGroups(ref) {
		fn(&g.Job)
	}
}

// running counts g's allocations (draining ones included: Nomad still
// runs them).
func (c *Cluster) running(g *Group) int {
	n := 0
	for i := range c.allocs {
		if c.allocs[i].group == g {
			n++
		}
	}
	return n
}

// queued is what Nomad has yet to place of g.
func (c *Cluster) queued(g *Group) int { return max(0, g.Count-c.running(g)) }

// free is node n's GPUs no allocation holds.
func (c *Cluster) free(n int) int {
	used := 0
	for i := range c.allocs {
		if c.allocs[i].node == n {
			used += len(c.allocs[i].a.GPUIDs)
		}
	}
	return c.nodes[n].GPUs - used
}

// start places one allocation of g on node n, on its lowest free GPUs.
func (c *Cluster) start(g *Group, n int, at time.Time) string {
	node := &c.nodes[n]
	used := map[string]bool{}
	for i := range c.allocs {
		if c.allocs[i].node == n {
			for _, id := range c.allocs[i].a.GPUIDs {
				used[id] = true
			}
		}
	}
	var ids []string
	for k := 0; len(ids) < g.GPUsPerAlloc && k < node.GPUs; k++ {
		if id := fmt.Sprintf("%s-gpu%d", node.ID, k); !used[id] {
			ids = append(ids, id)
		}
	}
	c.seq++
	id := fmt.Sprintf("%s-%s-%d", g.Job.Ref.ID, g.Name, c.seq)
	c.allocs = append(c.allocs, alloc{group: g, node: n, a: engine.Alloc{
		ID: id, Group: g.Name, Name: fmt.Sprintf("%s.%s[%d]", g.Job.Ref.ID, g.Name, c.running(g)),
		NodeID: node.ID, GPUIDs: ids, StartedAt: at}})
	if c.queued(g) == 0 && g.Held == 0 {
		g.Preempted = false // placed again in full
	}
	g.ahead = false
	return id
}

// SetUsage gives a running allocation its utilisation samples.
func (c *Cluster) SetUsage(allocID string, samples []engine.Sample) error {
	for i := range c.allocs {
		if c.allocs[i].a.ID == allocID {
			c.allocs[i].a.Usage = slices.Clone(samples)
			return nil
		}
	}
	return fmt.Errorf("nomadmodel: no allocation %s", allocID)
}

// Queued is what Nomad has yet to place of g: its count less what runs.
func (c *Cluster) Queued(g *Group) int { return c.queued(g) }

// Complete ends job ref as its allocations completing would: their GPUs
// free, and the job gone from Nomad's queue and from Steward's holds (a
// job of the same ID may be registered again).
func (c *Cluster) Complete(ref engine.JobRef) {
	c.allocs = slices.DeleteFunc(c.allocs, func(a alloc) bool { return a.group.Job.Ref == ref })
	c.groups = slices.DeleteFunc(c.groups, func(g *Group) bool { return g.Job.Ref == ref })
	c.drains = slices.DeleteFunc(c.drains, func(d *drain) bool { return d.job == ref })
	c.dropMarks()
}
