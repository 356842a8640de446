package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// Node maintenance (issue 34, item 7). An operator drains a node in Nomad
// (`nomad node drain -enable NODE`, which takes node write: no tenant can);
// Nomad makes it ineligible at once, so nothing new is placed there. A
// Nomad drain alone stops GPU work without a checkpoint: batch allocations
// at the drain's deadline, killed. The controller acts as soon as it sees
// the drain, long before that deadline (Nomad's default is an hour): every
// batch job's GPU allocations on the node get a drain of kind maintenance,
// the same path as a preemption's (the record first, then the checkpoint
// signal, the grace, the hold), and the job is held and resumed on other
// nodes when GPUs are free there, like any held work. The operator's
// deadline must exceed the longest grace (docs/operations.md).
//
// Service jobs are left to Nomad's own migration (their migrate block),
// which starts at once, before any signal could go out; system and
// sysbatch jobs and work without GPUs are Nomad's to drain too.

// maintenanceDrain is the work one job's group has on draining nodes.
type maintenanceDrain struct {
	Job    jobKey
	Group  string
	Allocs []string // full IDs, sorted
	Nodes  []string // the draining nodes' names, sorted
	GPUs   int
	// Deadline is the earliest of their drains' deadlines (zero: none
	// known).
	Deadline time.Time
}

// deadlineMargin is how long before the drain's deadline a grace cut to
// fit it ends: time for the hold and the stop, before Nomad's own.
const deadlineMargin = 10 * time.Second

// fitGrace is the grace a maintenance drain gives: the policy's, cut to
// end deadlineMargin before the drain's deadline (signalDelay after now
// the signal goes out). A deadline too near leaves none: the work is held
// at once, rather than stopped by Nomad and placed again elsewhere.
func fitGrace(grace time.Duration, deadline, now time.Time) (time.Duration, bool) {
	if deadline.IsZero() {
		return grace, false
	}
	left := deadline.Sub(now) - signalDelay - deadlineMargin
	if left >= grace {
		return grace, false
	}
	return max(left, 0).Truncate(time.Second), true
}

// maintenanceDrains decides which work a node maintenance drains: per
// batch job and GPU group, its allocations on draining nodes that no drain
// covers yet. Paused jobs (being held already) are left out. Pure: the
// observation and the states in, the drains out, in job and group order.
func maintenanceDrains(obs *Observation, states map[jobKey]*JobState) []maintenanceDrain {
	if len(obs.Draining) == 0 {
		return nil
	}
	byGroup := map[jobKey]map[string]*maintenanceDrain{}
	for _, a := range obs.Allocs {
		node, ok := obs.Draining[a.NodeID]
		if !ok || node.Forced || len(a.GPUIDs) == 0 {
			// A forced drain stops everything at once: no time to
			// checkpoint, and Nomad places the work again elsewhere.
			continue
		}
		k := jobKey{a.Namespace, a.JobID}
		j := obs.Jobs[k]
		if j == nil || j.Stopped || j.Type != api.JobTypeBatch || j.Groups[a.Group].GPUsPerAlloc == 0 {
			continue
		}
		if st := states[k]; st != nil && (st.Paused || st.draining(a.ID) != nil) {
			continue
		}
		if byGroup[k] == nil {
			byGroup[k] = map[string]*maintenanceDrain{}
		}
		d := byGroup[k][a.Group]
		if d == nil {
			d = &maintenanceDrain{Job: k, Group: a.Group}
			byGroup[k][a.Group] = d
		}
		d.Allocs = append(d.Allocs, a.ID)
		if !slices.Contains(d.Nodes, node.Name) {
			d.Nodes = append(d.Nodes, node.Name)
		}
		if !node.Deadline.IsZero() && (d.Deadline.IsZero() || node.Deadline.Before(d.Deadline)) {
			d.Deadline = node.Deadline
		}
		d.GPUs += len(a.GPUIDs)
	}
	var out []maintenanceDrain
	for _, groups := range byGroup {
		for _, d := range groups {
			sort.Strings(d.Allocs)
			sort.Strings(d.Nodes)
			out = append(out, *d)
		}
	}
	sort.Slice(out, func(i, k int) bool {
		if out[i].Job != out[k].Job {
			if out[i].Job.Namespace != out[k].Job.Namespace {
				return out[i].Job.Namespace < out[k].Job.Namespace
			}
			return out[i].Job.ID < out[k].Job.ID
		}
		return out[i].Group < out[k].Group
	})
	return out
}

// maintenanceReason is what the job's record, its tasks and its scaling
// event say: the nodes, the GPUs, the signal and the grace.
func maintenanceReason(m maintenanceDrain, signal string, grace, usual time.Duration, cut bool) engine.Reason {
	nodes := "node " + m.Nodes[0]
	if len(m.Nodes) > 1 {
		nodes = "nodes " + strings.Join(m.Nodes, ", ")
	}
	ckpt := fmt.Sprintf("checkpoint signal %s, grace %s", signal, shortDuration(grace))
	switch {
	case signal == "" && cut:
		ckpt = fmt.Sprintf("no checkpoint: the drain's deadline, %s, leaves no time for the grace of %s", m.Deadline.UTC().Format(time.TimeOnly+" UTC"), shortDuration(usual))
	case signal == "":
		ckpt = "no checkpoint signal (the job takes none)"
	case cut:
		ckpt += fmt.Sprintf(", cut from %s to end before the drain's deadline, %s", shortDuration(usual), m.Deadline.UTC().Format(time.TimeOnly+" UTC"))
	}
	return engine.Reason{Rule: engine.RuleMaintenance, Message: fmt.Sprintf(
		"node maintenance: %s drained by an operator: %s of group %s there (%s) stop and the job waits, held, "+
			"to resume on other nodes when GPUs are free",
		nodes, plural(m.GPUs, "GPU"), m.Group, ckpt)}
}

// drainNodes starts a maintenance drain for the work on nodes Nomad
// drains (maintenanceDrains): recorded first, signalled a moment later
// and held at the end of its grace by finishDrains, as a preemption.
func (c *Controller) drainNodes(ctx context.Context, r *round) {
	drains := maintenanceDrains(r.obs, c.states())
	if len(drains) == 0 {
		return
	}
	pol, _ := c.engineNow()
	for _, m := range drains {
		job := r.obs.Jobs[m.Job]
		st := c.state(m.Job)
		if err := r.rerun(m.Job, drainGroups(job, m.Group)...); err != nil {
			// Holding the group would run completed work again: Nomad's
			// own drain stops it at its deadline.
			c.log().Warn("node maintenance: not holding the job", "job", m.Job, "group", m.Group, "error", err)
			continue
		}
		signal := pol.ResolveJob(job.Namespace, job.Meta).CheckpointSignal
		usual := pol.Preemption.Grace
		grace, cut := fitGrace(usual, m.Deadline, r.now)
		if signal == "" || grace <= 0 {
			signal, grace = "", 0
		}
		why := maintenanceReason(m, signal, grace, usual, cut)
		d := &Drain{Group: m.Group, Allocs: shortIDs(m.Allocs), Signal: signal, Grace: grace, Decided: r.now,
			Requeue: true, Kind: DrainMaintenance, Rule: string(why.Rule), Reason: why.Message}
		st.Draining = append(st.Draining, d)
		if signal != "" {
			st.Resumes++ // its next start resumes (record.go)
		}
		st.keepWork(signal != "", r.ranOf(m.Allocs))
		for _, id := range d.Allocs {
			delete(st.Idle, id)
		}
		st.note(StatusDraining, why, r.now)
		dec := Decision{At: r.now, Kind: DrainMaintenance, Job: m.Job.String(), Group: m.Group, GPUs: m.GPUs,
			Rule: string(why.Rule), Reason: why.Message}
		if err := c.save(ctx, st); err != nil {
			c.log().Error("node maintenance: save job state", "job", m.Job, "error", err)
			st.Draining = slices.DeleteFunc(st.Draining, func(x *Drain) bool { return x == d })
			dec.Error = err.Error()
			c.decisions.add(dec)
			r.failed++
			continue
		}
		c.decisions.add(dec)
		c.log().Info("node maintenance: checkpointing and holding work on a drained node", "job", m.Job, "group", m.Group,
			"nodes", m.Nodes, "gpus", m.GPUs, "signal", signal, "grace", grace)
		if signal != "" {
			c.pub.writeRecord(ctx, r, pol, st)
			r.wake(r.now.Add(signalDelay))
			continue
		}
		if err := c.drains.finishDrain(ctx, r, st, d); err != nil && !refusedOrBackedOff(err) {
			c.log().Error("node maintenance: hold", "job", m.Job, "error", err)
			r.failed++
		}
	}
}
