package controller

import (
	"fmt"
	"sort"
	"sync"
)

// gpuRefusals are the GPUs whose stats carry no utilisation (gpuutil.go),
// with the allocation an idle rule covers that holds each. A GPU is
// reported when it is first refused — one warning in the log — and for as
// long as it stays refused in the status (`steward status` warnings, the
// job's namespace view) and /healthz (warnings). It is forgotten when it
// reports utilisation again or its allocation is no longer read.
//
// Sweeps run beside the control loop, so it has a lock of its own. Its
// zero value is ready to use.
type gpuRefusals struct {
	mu    sync.Mutex
	byGPU map[gpuRef]refusedGPU
	// hint is where the reading comes from, for the warnings; "": a
	// node's device stats.
	hint string
}

// gpuRef is a GPU by node: device IDs are only unique per node.
type gpuRef struct{ node, device string }

type refusedGPU struct {
	reason string
	alloc  string
	job    jobKey
}

// refuse records that a GPU of alloc has no utilisation. It reports
// whether that is news (first refusal, or a new reason), to log once.
func (g *gpuRefusals) refuse(node, device, reason string, a ObservedAlloc) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byGPU == nil {
		g.byGPU = map[gpuRef]refusedGPU{}
	}
	ref := gpuRef{node, device}
	old, had := g.byGPU[ref]
	g.byGPU[ref] = refusedGPU{reason: reason, alloc: a.ID, job: jobKey{a.Namespace, a.JobID}}
	return !had || old.reason != reason
}

// accept forgets the refusals of GPUs that now report utilisation, and
// returns those it forgot.
func (g *gpuRefusals) accept(node string, devices []string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, d := range devices {
		ref := gpuRef{node, d}
		if _, ok := g.byGPU[ref]; ok {
			delete(g.byGPU, ref)
			out = append(out, d)
		}
	}
	return out
}

// keep forgets the refusals of GPUs no target allocation holds any more:
// the allocation ended, or no idle rule covers it now.
func (g *gpuRefusals) keep(targets []statsTarget) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.byGPU) == 0 {
		return
	}
	held := map[gpuRef]bool{}
	for _, t := range targets {
		for _, a := range t.allocs {
			for _, d := range a.GPUIDs {
				held[gpuRef{t.node, d}] = true
			}
		}
	}
	for ref := range g.byGPU {
		if !held[ref] {
			delete(g.byGPU, ref)
		}
	}
}

// sorted returns the refusals in a stable order (job, allocation, node,
// device).
func (g *gpuRefusals) sorted() ([]gpuRef, []refusedGPU) {
	g.mu.Lock()
	defer g.mu.Unlock()
	refs := make([]gpuRef, 0, len(g.byGPU))
	for ref := range g.byGPU {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(i, k int) bool {
		a, b := g.byGPU[refs[i]], g.byGPU[refs[k]]
		switch {
		case a.job != b.job:
			return a.job.String() < b.job.String()
		case a.alloc != b.alloc:
			return a.alloc < b.alloc
		case refs[i].node != refs[k].node:
			return refs[i].node < refs[k].node
		}
		return refs[i].device < refs[k].device
	})
	out := make([]refusedGPU, len(refs))
	for i, ref := range refs {
		out[i] = g.byGPU[ref]
	}
	return refs, out
}

// jobWarnings are the refusals as `steward status` warnings, one per GPU,
// on the job that holds it (so its namespace's view shows them too).
func (g *gpuRefusals) jobWarnings() []JobWarning {
	refs, rs := g.sorted()
	out := make([]JobWarning, 0, len(refs))
	for i, ref := range refs {
		out = append(out, JobWarning{Job: rs[i].job.String(), Problem: refusalText(ref, rs[i], g.hint)})
	}
	return out
}

// healthWarnings are the refusals as /healthz warnings.
func (g *gpuRefusals) healthWarnings() []string {
	refs, rs := g.sorted()
	var out []string
	for i, ref := range refs {
		out = append(out, rs[i].job.String()+": "+refusalText(ref, rs[i], g.hint))
	}
	return out
}

func refusalText(ref gpuRef, r refusedGPU, hint string) string {
	if hint == "" {
		hint = fmt.Sprintf("Steward reads the %q statistic in %q: docs/reference/devices.md", UtilizationStat, UtilizationUnit)
	}
	return fmt.Sprintf("GPU %s on node %s has no utilisation: %s; idle rules do not act on allocation %s (%s)",
		ref.device, shortID(ref.node), r.reason, shortID(r.alloc), hint)
}
