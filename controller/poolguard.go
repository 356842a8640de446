package controller

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// The controller runs on nodes of a node pool of its own, and no tenant's
// task may share them: a task there could reach the node's loopback, and
// run as root with raw_exec, where the controller's token file lies. Nomad
// CE does not enforce that: node pool governance (a node_pool rule checked
// when a job is registered) is Enterprise's, and CE's job registration
// checks nothing about the pool (nomad v1.11.3,
// nomad/job_endpoint_hook_node_pool_ce.go). Any token that may submit jobs
// can name the controller's pool, or "all", where a system job runs on
// every node. Steward closes that after the fact: every job outside its own
// namespace that can run there is held, every group scaled to 0, until its
// owner submits it to another pool. The decision is here, pure; carrying it
// out is poolguard_act.go.
//
// Not in the engine: the engine plans GPUs, and sees only jobs and
// allocations that use them; a CPU-only task beside the controller is the
// threat just the same, and so are system jobs and periodic children,
// which the controller's view otherwise leaves out (Observation.Skipped).

// ruleControllerPool is the rule of a hold of a job in the controller's
// node pool.
const ruleControllerPool = "controller-pool"

// poolRefusal is a job that can run on the controller's nodes.
type poolRefusal struct {
	Job jobKey
	// Pool is the job's node pool: one of the controller's, or "all".
	Pool string
	// Hold are its groups with a count above 0, sorted: each is scaled to
	// 0. None: nothing of it can run (held already).
	Hold   []string
	Reason engine.Reason
}

// reachesControllerPool reports whether a job in node pool pool ("" is
// Nomad's default) can run on the controller's nodes, and which of the
// controller's pools with nodes it reaches.
func reachesControllerPool(pool string, pools []string, poolNodes map[string][]string) []string {
	var out []string
	for _, p := range pools {
		switch {
		case pool == p:
			// Named: refused whether or not a node is there yet.
			return []string{p}
		case pool == api.NodePoolAll && len(poolNodes[p]) > 0:
			out = append(out, p)
		}
	}
	return out
}

// refusesPool reports whether the guard refuses a job: not Steward's own
// (namespace own), not stopped, and able to run on the controller's nodes.
func refusesPool(j *ObservedJob, pools []string, poolNodes map[string][]string, own string) bool {
	return j != nil && j.Namespace != own && !j.Stopped && len(reachesControllerPool(j.NodePool, pools, poolNodes)) > 0
}

// poolRefusals are the jobs the guard refuses, of those observed (Jobs and
// Skipped), in order of namespace and ID.
func poolRefusals(obs *Observation, pools []string, own string) []poolRefusal {
	if len(pools) == 0 {
		return nil
	}
	var out []poolRefusal
	refuse := func(k jobKey, j *ObservedJob) {
		if !refusesPool(j, pools, obs.PoolNodes, own) {
			return
		}
		rf := poolRefusal{Job: k, Pool: j.NodePool}
		for g := range j.Groups {
			if writtenCount(j, g) > 0 {
				rf.Hold = append(rf.Hold, g)
			}
		}
		sort.Strings(rf.Hold)
		rf.Reason = poolReason(j, rf.Hold, reachesControllerPool(j.NodePool, pools, obs.PoolNodes), obs.PoolNodes)
		out = append(out, rf)
	}
	for k, j := range obs.Jobs {
		refuse(k, j)
	}
	for k, j := range obs.Skipped {
		if _, admitted := obs.Jobs[k]; !admitted { // admitSkipped: seen above
			refuse(k, j)
		}
	}
	sort.Slice(out, func(i, k int) bool {
		if out[i].Job.Namespace != out[k].Job.Namespace {
			return out[i].Job.Namespace < out[k].Job.Namespace
		}
		return out[i].Job.ID < out[k].Job.ID
	})
	return out
}

// poolReason says why a job is held, with the pools and nodes it reaches
// and the counts held: "node pool steward is kept for the Steward
// controller (2 nodes: steward-1, steward-2): tenants' work may not run
// there, so Steward holds the job (group web: 2 allocations) until its
// owner submits it to another node pool (such as default)".
func poolReason(j *ObservedJob, hold []string, reached []string, poolNodes map[string][]string) engine.Reason {
	var b strings.Builder
	pool := j.NodePool
	if len(reached) == 1 && reached[0] == pool {
		fmt.Fprintf(&b, "node pool %s is kept for the Steward controller", pool)
	} else {
		fmt.Fprintf(&b, "node pool %s includes ", pool)
		if len(reached) == 1 {
			fmt.Fprintf(&b, "node pool %s, kept", reached[0])
		} else {
			fmt.Fprintf(&b, "node pools %s, kept", strings.Join(reached, ", "))
		}
		b.WriteString(" for the Steward controller")
	}
	var nodes []string
	for _, p := range reached {
		nodes = append(nodes, poolNodes[p]...)
	}
	if len(nodes) > 0 {
		fmt.Fprintf(&b, " (%s: %s)", plural(len(nodes), "node"), namesClipped(nodes, 3))
	}
	b.WriteString(": tenants' work may not run there, so Steward holds the job")
	if len(hold) > 0 {
		parts := make([]string, 0, len(hold))
		for _, g := range hold {
			if allOrNothing(j.Type) {
				parts = append(parts, fmt.Sprintf("%s: %d per node", g, writtenCount(j, g)))
			} else {
				parts = append(parts, g+": "+plural(j.Groups[g].Count, "allocation"))
			}
		}
		word := "group"
		if len(hold) > 1 {
			word = "groups"
		}
		fmt.Fprintf(&b, " (%s %s)", word, strings.Join(parts, ", "))
	}
	b.WriteString(" until its owner submits it to another node pool (such as default)")
	return engine.Reason{Rule: ruleControllerPool, Message: b.String()}
}

// writtenCount is a group's count as its job says: a system or sysbatch
// group's per node (systemCounts), any other's in all. Above 0, the
// group can run.
func writtenCount(j *ObservedJob, g string) int {
	if allOrNothing(j.Type) {
		return j.Groups[g].PerNode
	}
	return j.Groups[g].Count
}

// poolHeldCount is how many allocations a pool hold of a group takes back, as
// Steward counts a group (systemCounts): a system or sysbatch group's
// those it runs, at least 1 (its allocations without GPUs are not
// observed), any other's its count.
func poolHeldCount(j *ObservedJob, g string) int {
	if allOrNothing(j.Type) {
		return max(j.Groups[g].Count, 1)
	}
	return j.Groups[g].Count
}

// namesClipped lists at most n names, then how many more.
func namesClipped(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// admitSkipped puts into obs.Jobs the skipped jobs (Observation.Skipped)
// the rest of the round must see as any job: those the guard refuses (to
// hold them, record why, keep the hold: syncHolds) and those Steward has
// state for (held earlier, then moved by their owner: their holds end as
// any job's do). The others stay out: system jobs are not Steward's to
// schedule.
func admitSkipped(obs *Observation, pools []string, own string, hasState func(jobKey) bool) {
	for k, j := range obs.Skipped {
		if _, ok := obs.Jobs[k]; ok {
			continue
		}
		if refusesPool(j, pools, obs.PoolNodes, own) || hasState(k) {
			obs.Jobs[k] = j
		}
	}
}
