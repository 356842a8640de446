package controller

import (
	"maps"
	"slices"

	"github.com/gpu-steward/steward/policy/engine"

	"github.com/hashicorp/nomad/api"
)

// System and sysbatch jobs (issue 29) are governed like any job: their
// GPUs count in their tenant's In Use, limit and reserve; their priority
// is reset to their tier's; they are preempted and idle-reclaimed. Two
// facts of Nomad (v1.11.3) shape how:
//
//   - A system group's count is allocations per node, not in all: Nomad
//     places count allocations on every eligible node
//     (scheduler/reconciler materializeSystemTaskGroups), and its Scale
//     API takes a system group only to 0 or 1 (nomad/job_endpoint.go
//     Scale). Steward cannot take one node's allocation away: stopped
//     (Allocations().Stop), Nomad places it again on the same node at
//     once. So a system or sysbatch group is all or nothing: the engine
//     sees the job as a gang (victims take every allocation, a limit
//     holds the whole job), a hold scales each GPU group to 0, which
//     stops every allocation and keeps the job registered, resumable,
//     and a resume scales it back to its per-node count.
//   - The count Steward reasons about is the allocations the group runs
//     (systemCounts), which is what a hold takes back and a resume gives
//     back; nomadCount turns it into the count Nomad is given.
//
// A sysbatch job's completed allocations run again when the job gets a
// new version (reconcile_node.go: a terminal sysbatch allocation of an
// older JobModifyIndex is updated, that is placed again): any write to a
// sysbatch job part of which completed is refused with the reason in its
// record (round.rerun), as for a multi-group batch job.

// allOrNothing reports whether a job of this type is governed whole.
func allOrNothing(typ string) bool {
	return typ == api.JobTypeSystem || typ == api.JobTypeSysbatch
}

// systemCounts gives each system and sysbatch job of an observation the
// count Steward reasons about: per GPU group, the allocations it runs
// plus, sysbatch, those of its current version that completed
// (Observation.Done, as a batch group's count holds them). A group Nomad
// was told to run 0 of (held) counts 0. Jobs are copied: the cache's are
// shared and never changed.
func systemCounts(obs *Observation) {
	live := map[jobKey]map[string]int{}
	for _, a := range obs.Allocs {
		k := jobKey{a.Namespace, a.JobID}
		if j := obs.Jobs[k]; j == nil || !allOrNothing(j.Type) {
			continue
		}
		if live[k] == nil {
			live[k] = map[string]int{}
		}
		live[k][a.Group]++
	}
	for k, j := range obs.Jobs {
		if !allOrNothing(j.Type) {
			continue
		}
		cp := *j
		cp.Groups = maps.Clone(j.Groups)
		for g, spec := range cp.Groups {
			spec.PerNode = spec.Count
			if spec.Count > 0 {
				spec.Count = live[k][g] + obs.Done[k][g]
			}
			cp.Groups[g] = spec
		}
		obs.Jobs[k] = &cp
	}
}

// nomadCount is the count Nomad is given for a group Steward sets to
// count allocations: unchanged for service and batch jobs; for a system
// or sysbatch group 0 (held) or its per-node count (at least 1: a group
// Steward held shows 0), whatever part of it the engine asked for,
// since a system group cannot run on some of its nodes only.
func nomadCount(job *ObservedJob, group string, count int) int {
	if job == nil || !allOrNothing(job.Type) {
		return count
	}
	if count <= 0 {
		return 0
	}
	return max(job.Groups[group].PerNode, 1)
}

// countApplied reports whether Nomad shows a group at the count Steward
// wants it at (syncHolds). A system group's observed count is what it
// runs, which Nomad places only after the write: the write shows in its
// per-node count, 0 or not.
func countApplied(job *ObservedJob, group string, want int) bool {
	spec := job.Groups[group]
	if !allOrNothing(job.Type) {
		return spec.Count == want
	}
	return (spec.PerNode == 0) == (want == 0)
}

// systemNodes is how many nodes a system or sysbatch group would run on:
// the nodes of its pool (and its pins) with GPUs of a class it accepts,
// enough of them for one allocation. Nomad places its per-node count on
// each (job check asks for all of them, as Nomad would place them).
func systemNodes(pool string, gpus int, devices, pins []string, nodes []engine.Node) int {
	n := 0
	for _, node := range nodes {
		switch {
		case pool != "" && pool != "all" && node.NodePool != pool,
			pool == "" && node.NodePool != "default",
			node.GPUs < gpus,
			devices != nil && !slices.Contains(devices, node.Device),
			pins != nil && !slices.Contains(pins, node.ID):
			continue
		}
		n++
	}
	return n
}

// systemCheckCounts is a system or sysbatch job as job check plans it:
// each GPU group's count the allocations Nomad would place, its per-node
// count on every node it fits (systemNodes).
func systemCheckCounts(j *ObservedJob, nodes []engine.Node, devices *deviceMatcher) *ObservedJob {
	cp := *j
	cp.Groups = maps.Clone(j.Groups)
	for g, spec := range cp.Groups {
		if spec.GPUsPerAlloc == 0 {
			continue
		}
		spec.PerNode = spec.Count
		spec.Count *= systemNodes(j.NodePool, spec.GPUsPerAlloc, devices.accepts(spec.GPURequests), pinnedNodes(spec.Pins, nodes), nodes)
		cp.Groups[g] = spec
	}
	return &cp
}
