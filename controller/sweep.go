package controller

import (
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// GPU activity matters only to idle rules, so a sweep reads the nodes that
// run work an idle rule covers (statsTargets), and only those: a cluster
// of training, whose idleness no rule judges, costs no reads at all. Reads
// go out statsConcurrency at a time, each bounded by a timeout, because
// the server forwards each one to its client: read one after another, a
// sweep of 10,000 nodes took minutes, and one hung client held up every
// node after it.

// statsConcurrency bounds the stats reads in flight during a sweep.
const statsConcurrency = 32

// statsTimeout bounds one node's stats read: half the stats interval, at
// least a second and at most five, so that a hung client costs one slot for
// a moment, not the sweep.
func statsTimeout(interval time.Duration) time.Duration {
	return min(5*time.Second, max(time.Second, interval/2))
}

// statsTarget is a node to read, with the running allocations on it that
// an idle rule covers.
type statsTarget struct {
	node   string
	allocs []ObservedAlloc
}

// statsTargets returns, sorted by node, the nodes whose running
// allocations an idle rule of pol covers.
func statsTargets(pol *policy.Policy, obs *Observation) []statsTarget {
	byNode := map[string][]ObservedAlloc{}
	covered := map[jobKey]bool{}
	for _, a := range obs.Allocs {
		if a.ClientStatus != "running" {
			continue
		}
		k := jobKey{a.Namespace, a.JobID}
		c, seen := covered[k]
		if !seen {
			if job := obs.Jobs[k]; job != nil {
				c = pol.ResolveJob(job.Namespace, job.Meta).IdleRule != nil
			}
			covered[k] = c
		}
		if c {
			byNode[a.NodeID] = append(byNode[a.NodeID], a)
		}
	}
	out := make([]statsTarget, 0, len(byNode))
	for node, allocs := range byNode {
		out = append(out, statsTarget{node: node, allocs: allocs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].node < out[j].node })
	return out
}

// sweepStats reads the targets' GPU activity and adds one sample per
// allocation, at the time its node answered. It returns how many nodes
// failed to answer (each is logged at debug level and retried next sweep).
func (sp *sampler) sweepStats(ctx context.Context, targets []statsTarget) int {
	timeout := statsTimeout(sp.cfg().StatsInterval)
	sem := make(chan struct{}, statsConcurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	sp.gpuRefused.keep(targets)
	for _, t := range targets {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return failed
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			readings, err := sp.nodeGPUReadings(rctx, t.node)
			cancel()
			if err != nil {
				sp.log().Debug("read GPU stats", "node", t.node, "error", err)
				mu.Lock()
				failed++
				mu.Unlock()
				return
			}
			sp.sampleNode(t, readings, sp.now())
		}()
	}
	wg.Wait()
	sp.metrics.statsFailures.Add(float64(failed))
	return failed
}

// sampleNode adds a sample at now for each target allocation on a node
// whose GPUs all report utilisation. An allocation with a GPU that does
// not is neither idle nor busy: its samples go, and the GPU is refused
// (logged the first time).
func (sp *sampler) sampleNode(t statsTarget, readings map[string]gpuReading, now time.Time) {
	for _, a := range t.allocs {
		u, refused, ok := allocUtil(readings, a.GPUIDs)
		for _, id := range sp.gpuRefused.accept(t.node, reportingGPUs(a.GPUIDs, refused)) {
			sp.log().Info("GPU reports utilisation again: idle rules act on its allocation", "node", t.node, "gpu", id, "alloc", a.ID)
		}
		if len(refused) > 0 {
			sp.usage.forget(a.ID)
			for _, id := range slices.Sorted(maps.Keys(refused)) {
				if sp.gpuRefused.refuse(t.node, id, refused[id], a) {
					sp.log().Warn("GPU refused: it has no utilisation reading, so idle rules do not act on its allocation",
						"source", sp.activitySource(), "node", t.node, "gpu", id, "alloc", a.ID, "job", jobKey{a.Namespace, a.JobID}, "reason", refused[id])
				}
			}
			continue
		}
		if ok {
			sp.usage.add(a.ID, engine.Sample{At: now, Util: u})
		}
	}
}

// reportingGPUs are the ids not refused.
func reportingGPUs(ids []string, refused map[string]string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, no := refused[id]; !no {
			out = append(out, id)
		}
	}
	return out
}

// pollStats sweeps the nodes the last round found idle rules covering,
// every StatsInterval, until ctx ends; the sample ages it finds at each
// sweep's start go to steward_gpu_sample_age_seconds.
func (sp *sampler) pollStats(ctx context.Context) {
	t := time.NewTicker(sp.cfg().StatsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		targets := sp.usage.targetsNow()
		if len(targets) == 0 {
			continue // nothing an idle rule covers: nothing to read
		}
		start := sp.now()
		for _, age := range sp.usage.ages(targets, start) {
			sp.metrics.sampleAge.Observe(age.Seconds())
		}
		if sp.prom != nil {
			sp.sweepPrometheus(ctx, targets)
		} else {
			sp.sweepStats(ctx, targets)
		}
		sp.metrics.sweepSeconds.Observe(sp.now().Sub(start).Seconds())
	}
}
