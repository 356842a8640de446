package controller

import (
	"context"

	"github.com/hashicorp/nomad/api"
)

// The controller leaves some jobs out of its view (skipJobType: system and
// sysbatch jobs, periodic children): they are not Steward's to schedule.
// Any of them can still put a task on the controller's nodes, a system job
// in node pool "all" on every node. While the controller guards node pools
// (Config.ControllerPools), the cache keeps them apart, in skipped, for the
// pool guard alone (poolguard.go); nothing else reads them. Without guarded
// pools it keeps none, as before.

// guard sets the controller's node pools; the cache keeps skipped jobs
// only while there are any.
func (c *clusterCache) guard(pools []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.guarded = map[string]bool{}
	for _, p := range pools {
		c.guarded[p] = true
	}
}

// guards reports whether a job in the node pool can run on the
// controller's nodes: one of its pools, or "all".
func (c *clusterCache) guards(pool string) bool {
	return len(c.guarded) > 0 && (c.guarded[pool] || pool == api.NodePoolAll)
}

// keepSkipped takes an event's job that skipJobType leaves out, and
// reports whether it matters to a plan: it can run on the controller's
// nodes, or could before this event (its owner moved it away).
func (c *clusterCache) keepSkipped(k jobKey, j *api.Job) bool {
	delete(c.jobs, k) // re-registered as a type the controller leaves out
	if len(c.guarded) == 0 {
		return false
	}
	prev := c.skipped[k]
	oj := toObservedJob(j)
	c.skipped[k] = oj
	return c.guards(oj.NodePool) || prev != nil && c.guards(prev.NodePool)
}

// mergeSkipped folds the cache's skipped jobs into a full read's, as
// replace and rebuild do jobs (merge). A job is in jobs or in skipped,
// never both, so they share the entity key "j/<ns>/<job>".
func (c *clusterCache) mergeSkipped(rd *clusterRead, readWins func(string, bool) bool) int {
	if rd.skipped == nil {
		rd.skipped = map[jobKey]*ObservedJob{}
	}
	return merge(c.skipped, rd.skipped, func(k jobKey) string { return "j/" + k.String() }, readWins,
		func(a, b *ObservedJob) bool { return a.ModifyIndex == b.ModifyIndex && a.Stopped == b.Stopped })
}

// readSkipped is a full read's copy of a job skipJobType leaves out: the
// spec the cache holds at the list's modify index, else read afresh (the
// list's stub says nothing of its node pool). Nil, nil: not kept (no
// guarded pools, or purged since the list).
func (o *observer) readSkipped(ctx context.Context, rd *clusterRead, s *api.JobListStub, known map[jobKey]*ObservedJob, fresh bool) (*ObservedJob, error) {
	o.cache.mu.Lock()
	guarding := len(o.cache.guarded) > 0
	o.cache.mu.Unlock()
	if !guarding {
		return nil, nil
	}
	k := jobKey{s.Namespace, s.ID}
	if j := known[k]; j != nil && j.ModifyIndex == s.JobModifyIndex && j.Stopped == s.Stop {
		return j, nil
	}
	full, err := o.n.ReadJob(ctx, s.Namespace, s.ID, fresh)
	rd.jobReads++
	if err != nil || full == nil {
		return nil, err
	}
	return toObservedJob(full), nil
}
