package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// fakeCluster is the cluster the fake's reads answer from: what Nomad
// would list, kept as API objects so that the controller's conversions
// (observe.go) run in unit tests as they do against a real agent. The fake's
// writes change it the way Nomad would, as far as the controller can tell:
// a scale changes the group's count and stops or queues allocations, a
// stopped allocation leaves the list.
type fakeCluster struct {
	nodes   []*api.NodeListStub
	jobs    map[string]*api.Job // "ns/id"
	allocs  []*api.AllocationListStub
	evals   []*api.Evaluation
	summary map[string]*api.JobSummary
	stats   map[string]*api.HostStats // node ID
	reads   int
	seq     int    // allocations placed by schedule
	index   uint64 // Nomad's index: what lists return
	events  chan *api.Events
	// statsHook, when set, runs before each stats read, outside the
	// fake's lock (a slow or hung client).
	statsHook func(ctx context.Context, node string) error
	// summaryHook, when set, runs after a summary read has its answer
	// and before it returns, outside the fake's lock (what happens
	// while the answer is on its way).
	summaryHook func(ns, id string)
}

func (f *fakeNomad) cl() *fakeCluster {
	if f.cluster == nil {
		f.cluster = &fakeCluster{jobs: map[string]*api.Job{}, summary: map[string]*api.JobSummary{}, stats: map[string]*api.HostStats{}}
	}
	return f.cluster
}

// readErr fails a read whose name starts with a prefix in f.fail (the
// reads are not recorded as calls: tests compare the writes).
func (f *fakeNomad) readErr(name string) error {
	f.cl().reads++
	for prefix, err := range f.fail {
		if strings.HasPrefix(name, prefix) {
			return err
		}
	}
	return nil
}

func (f *fakeNomad) ListNodes(context.Context, bool) ([]*api.NodeListStub, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.readErr("read nodes"); err != nil {
		return nil, 0, err
	}
	return slices.Clone(f.cl().nodes), f.cl().index, nil
}

func (f *fakeNomad) ListJobs(context.Context, bool) ([]*api.JobListStub, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.readErr("read jobs"); err != nil {
		return nil, 0, err
	}
	var out []*api.JobListStub
	for _, k := range sortedIDs(f.cl().jobs) {
		j := f.cl().jobs[k]
		out = append(out, &api.JobListStub{ID: *j.ID, Namespace: *j.Namespace, Type: *j.Type, Stop: j.Stop != nil && *j.Stop,
			JobModifyIndex: derefU64(j.JobModifyIndex), ParentID: deref(j.ParentID), Periodic: j.Periodic != nil,
			JobSummary: f.cl().summary[k]}) // Nomad's list carries each job's summary
	}
	return out, f.cl().index, nil
}

func (f *fakeNomad) ReadJob(_ context.Context, ns, id string, _ bool) (*api.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.readErr("read job " + ns + "/" + id); err != nil {
		return nil, err
	}
	return f.cl().jobs[ns+"/"+id], nil
}

func (f *fakeNomad) ListAllocs(context.Context, bool) ([]*api.AllocationListStub, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.readErr("read allocs"); err != nil {
		return nil, 0, err
	}
	return slices.Clone(f.cl().allocs), f.cl().index, nil
}

func (f *fakeNomad) AllocsByPrefix(_ context.Context, ns, prefix string) ([]*api.AllocationListStub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prefixReads++
	if err := f.readErr("read allocs"); err != nil {
		return nil, err
	}
	var out []*api.AllocationListStub
	for _, a := range append(slices.Clone(f.ended), f.cl().allocs...) {
		if a.Namespace == ns && strings.HasPrefix(a.ID, prefix) {
			out = append(out, a)
		}
	}
	return out, nil
}

func (f *fakeNomad) ListBlockedEvals(context.Context, bool) ([]*api.Evaluation, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.readErr("read evals"); err != nil {
		return nil, 0, err
	}
	return slices.Clone(f.cl().evals), f.cl().index, nil
}

func (f *fakeNomad) JobSummary(_ context.Context, ns, id string, _ bool) (*api.JobSummary, error) {
	f.mu.Lock()
	if err := f.readErr("read summary " + ns + "/" + id); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	sum, hook := f.cl().summary[ns+"/"+id], f.cl().summaryHook
	f.mu.Unlock()
	if hook != nil {
		hook(ns, id)
	}
	return sum, nil
}

func (f *fakeNomad) NodeStats(ctx context.Context, node string) (*api.HostStats, error) {
	f.mu.Lock()
	hook := f.cl().statsHook
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, node); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.readErr("read stats " + node); err != nil {
		return nil, err
	}
	s, ok := f.cl().stats[node]
	if !ok {
		return nil, fmt.Errorf("read stats of node %s: no such node", node)
	}
	return s, nil
}

func (f *fakeNomad) Events(ctx context.Context, _ uint64) (<-chan *api.Events, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cl().events == nil {
		f.cl().events = make(chan *api.Events)
	}
	return f.cl().events, nil
}

// stopAlloc drops a stopped allocation from the lists.
func (c *fakeCluster) stopAlloc(id string) {
	c.allocs = slices.DeleteFunc(c.allocs, func(a *api.AllocationListStub) bool { return a.ID == id })
}

// change bumps a job's modify index after checking the writer's (0: any).
func (c *fakeCluster) change(j *api.Job, index uint64) (uint64, error) {
	if index != 0 && index != derefU64(j.JobModifyIndex) {
		return 0, fmt.Errorf("Enforcing job modify index %d: job exists with conflicting job modify index: %d: %w",
			index, derefU64(j.JobModifyIndex), errJobChanged)
	}
	next := derefU64(j.JobModifyIndex) + 1
	j.JobModifyIndex = &next
	return next, nil
}

// scale sets a group's count; allocations beyond it stop (the newest
// first, as Nomad does). Allocations it adds are the test's to place.
func (c *fakeCluster) scale(ns, id, group string, count int, index uint64) (uint64, error) {
	j := c.jobs[ns+"/"+id]
	if j == nil {
		return 0, fmt.Errorf("scale %s/%s: job not found", ns, id)
	}
	// As Nomad's Job.Scale: a count outside the group's scaling policy
	// is refused, enabled or not.
	for _, tg := range j.TaskGroups {
		if s := tg.Scaling; *tg.Name == group && s != nil {
			if int64(count) < *s.Min {
				return 0, fmt.Errorf("group count was less than scaling policy minimum: %d < %d", count, *s.Min)
			}
			if int64(count) > *s.Max {
				return 0, fmt.Errorf("group count was greater than scaling policy maximum: %d > %d", count, *s.Max)
			}
		}
	}
	// As Nomad's Job.Scale: a system group is scaled to 0 or 1 alone.
	if *j.Type == api.JobTypeSystem && count > 1 {
		return 0, fmt.Errorf(`jobs of type "system" can only be scaled between 0 and 1`)
	}
	return c.setCount(j, ns, id, group, count, index)
}

// scaleWithPolicy sets a group's count and scaling policy (a job
// registration: the job's validation checks the count against it).
func (c *fakeCluster) scaleWithPolicy(ns, id, group string, count int, p ScalingPolicy, index uint64) (uint64, error) {
	j := c.jobs[ns+"/"+id]
	if j == nil {
		return 0, fmt.Errorf("scale %s/%s: job not found", ns, id)
	}
	if int64(count) < p.Min || int64(count) > p.Max {
		return 0, fmt.Errorf("Scaling policy invalid: count %d outside min %d, max %d", count, p.Min, p.Max)
	}
	var tg *api.TaskGroup
	for _, g := range j.TaskGroups {
		if *g.Name == group {
			tg = g
		}
	}
	if tg == nil || tg.Scaling == nil {
		return 0, fmt.Errorf("group %s has no scaling policy", group)
	}
	next, err := c.setCount(j, ns, id, group, count, index)
	if err != nil {
		return 0, err
	}
	enabled, lo, hi := p.Enabled, p.Min, p.Max
	tg.Scaling = &api.ScalingPolicy{Enabled: &enabled, Min: &lo, Max: &hi}
	return next, nil
}

func (c *fakeCluster) setCount(j *api.Job, ns, id, group string, count int, index uint64) (uint64, error) {
	next, err := c.change(j, index)
	if err != nil {
		return 0, err
	}
	for _, tg := range j.TaskGroups {
		if *tg.Name == group {
			tg.Count = &count
		}
	}
	var mine []*api.AllocationListStub
	for _, a := range c.allocs {
		if a.Namespace == ns && a.JobID == id && a.TaskGroup == group {
			mine = append(mine, a)
		}
	}
	slices.SortFunc(mine, func(a, b *api.AllocationListStub) int { return int(b.CreateTime - a.CreateTime) })
	if t := *j.Type; t == api.JobTypeSystem || t == api.JobTypeSysbatch {
		// A system group's count is per node: 0 stops every one.
		if count == 0 {
			for _, a := range mine {
				c.stopAlloc(a.ID)
			}
		}
		return next, nil
	}
	for i := 0; i < len(mine)-count; i++ {
		c.stopAlloc(mine[i].ID)
	}
	return next, nil
}

func (c *fakeCluster) setPriority(ns, id string, prio int, index uint64) (uint64, error) {
	j := c.jobs[ns+"/"+id]
	if j == nil {
		return 0, fmt.Errorf("set priority of %s/%s: job not found", ns, id)
	}
	next, err := c.change(j, index)
	if err != nil {
		return 0, err
	}
	j.Priority = &prio
	return next, nil
}

func (c *fakeCluster) move(ns, id, nodePool string, index uint64) (uint64, error) {
	j := c.jobs[ns+"/"+id]
	if j == nil {
		return 0, fmt.Errorf("move %s/%s: job not found", ns, id)
	}
	next, err := c.change(j, index)
	if err != nil {
		return 0, err
	}
	j.NodePool = &nodePool
	return next, nil
}

// schedule plays Nomad's scheduler after a round's writes: each group
// with fewer allocations than its count gets them on the first node with
// enough free GPUs, or a blocked evaluation (and queued allocations in its
// summary) when none has; a group with as many as its count has none.
func (c *fakeCluster) schedule(now time.Time) {
	used := map[string]bool{}
	for _, a := range c.allocs {
		work := a.AllocatedResources.Tasks["work"]
		if work == nil {
			continue // a group without GPUs
		}
		for _, d := range work.Devices {
			for _, id := range d.DeviceIDs {
				used[id] = true
			}
		}
	}
	c.evals = c.evals[:0]
	for _, k := range sortedIDs(c.jobs) {
		j := c.jobs[k]
		if j.Stop != nil && *j.Stop {
			continue
		}
		for _, tg := range j.TaskGroups {
			have := 0
			for _, a := range c.allocs {
				if a.Namespace == *j.Namespace && a.JobID == *j.ID && a.TaskGroup == *tg.Name {
					have++
				}
			}
			if len(tg.Tasks[0].Resources.Devices) == 0 {
				continue // no GPUs (a control group): the test places it
			}
			gpus := int(*tg.Tasks[0].Resources.Devices[0].Count)
			if t := *j.Type; t == api.JobTypeSystem || t == api.JobTypeSysbatch {
				c.placeSystem(j, tg, gpus, used, now)
				continue
			}
			queued := 0
			for ; have < *tg.Count; have++ {
				var ids []string
				var node string
				for _, n := range c.nodes {
					ids = ids[:0]
					for _, inst := range n.NodeResources.Devices[0].Instances {
						if !used[inst.ID] && len(ids) < gpus {
							ids = append(ids, inst.ID)
						}
					}
					if len(ids) == gpus {
						node = n.ID
						break
					}
				}
				if node == "" {
					queued++
					continue
				}
				for _, id := range ids {
					used[id] = true
				}
				c.seq++
				c.allocs = append(c.allocs, apiAlloc(fmt.Sprintf("a-%s-%d", *j.ID, c.seq), j, node, slices.Clone(ids), now))
			}
			if queued > 0 {
				ev, sum := apiBlockedEval(j, queued, now)
				c.evals = append(c.evals, ev)
				c.summary[k] = sum
			} else {
				delete(c.summary, k)
			}
		}
	}
}

// placeSystem places a system or sysbatch group as Nomad does: its count
// on every node with room that has none of it yet (a sysbatch allocation
// that completed stays done).
func (c *fakeCluster) placeSystem(j *api.Job, tg *api.TaskGroup, gpus int, used map[string]bool, now time.Time) {
	if *tg.Count == 0 {
		return
	}
	for _, n := range c.nodes {
		if slices.ContainsFunc(c.allocs, func(a *api.AllocationListStub) bool {
			return a.Namespace == *j.Namespace && a.JobID == *j.ID && a.TaskGroup == *tg.Name && a.NodeID == n.ID
		}) {
			continue
		}
		var ids []string
		for _, inst := range n.NodeResources.Devices[0].Instances {
			if !used[inst.ID] && len(ids) < gpus {
				ids = append(ids, inst.ID)
			}
		}
		if len(ids) < gpus {
			continue
		}
		for _, id := range ids {
			used[id] = true
		}
		c.seq++
		c.allocs = append(c.allocs, apiAlloc(fmt.Sprintf("a-%s-%d", *j.ID, c.seq), j, n.ID, slices.Clone(ids), now))
	}
}
