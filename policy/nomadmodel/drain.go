package nomadmodel

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// SignalDelay is how long after a preemption is decided its checkpoint
// signal goes out, as the controller sends it (controller/act.go:
// signalDelay; its TestContract checks that they agree): the grace runs
// from the signal.
const SignalDelay = time.Second

// DrainTime is how long after a preemption or idle stop is decided its
// victims stop, as the controller carries it out: with a checkpoint
// signal and a grace, the signal SignalDelay after the decision and the
// grace from it; without, 0: they stop in the round that decided it.
// The simulator and the forecast's replay time their drains by it.
func DrainTime(a *engine.Action) time.Duration {
	if a.Signal == "" || a.Grace <= 0 {
		return 0
	}
	return SignalDelay + a.Grace
}

// drain is a preemption or idle stop in progress: its victims run on
// (Draining) until end, then stop. Their GPUs are free only then.
type drain struct {
	job     engine.JobRef
	group   string // "": the whole job (a gang)
	allocs  []string
	decided time.Time
	end     time.Time
	// preempted: a preemption; false: an idle stop.
	preempted bool
	requeue   bool
	rule      engine.Rule
	forJob    *engine.JobRef
	forGroup  string
}

func (c *Cluster) startDrain(a *engine.Action, s Stop) error {
	if len(a.Allocs) == 0 {
		return fmt.Errorf("nomadmodel: %s names no allocations", a)
	}
	for _, id := range a.Allocs {
		i := c.allocIndex(id)
		if i < 0 || c.allocs[i].group.Job.Ref != a.Job {
			return fmt.Errorf("nomadmodel: %s names allocation %s, not running for the job", a, id)
		}
		if c.allocs[i].a.Draining {
			return fmt.Errorf("nomadmodel: %s names allocation %s, draining already", a, id)
		}
	}
	d := &drain{job: a.Job, group: a.Group, allocs: slices.Clone(a.Allocs), preempted: s.Preempted,
		decided: s.Decided, requeue: s.Requeue, rule: a.Reason.Rule, forJob: s.For, forGroup: s.ForGroup}
	if !s.Drain {
		c.finish(d, s.Decided)
		return nil
	}
	d.end = s.End
	if s.For != nil {
		c.extendMarks(*s.For, s.Decided, s.End)
	}
	for _, id := range a.Allocs {
		al := &c.allocs[c.allocIndex(id)].a
		al.Draining, al.For, al.ForGroup = true, s.For, s.ForGroup
	}
	c.drains = append(c.drains, d)
	return nil
}

// Advance finishes the drains whose grace is over by now, in the order
// they were decided.
func (c *Cluster) Advance(now time.Time) {
	c.marks = slices.DeleteFunc(c.marks, func(m mark) bool { return !now.Before(m.until) })
	c.drains = slices.DeleteFunc(c.drains, func(d *drain) bool {
		if d.end.After(now) {
			return false
		}
		c.finish(d, now)
		return true
	})
}

// finish stops a drain's victims at now, as the controller's finishDrain:
// the group's count lowered by the victims (a whole job: every group's
// whole count), held when requeued, and the stop recorded on the job
// (the eviction cap, Job.Preemptions). Their GPUs are set aside for the
// work they were freed for, while it waits.
func (c *Cluster) finish(d *drain, now time.Time) {
	stopped := map[*Group]int{}
	until := c.lastDrainFor(d.forJob, d, now).Add(MarkTTL)
	keep := c.allocs[:0]
	for _, al := range c.allocs {
		victim := al.group.Job.Ref == d.job && (d.group == "" || slices.Contains(d.allocs, al.a.ID))
		if !victim {
			keep = append(keep, al)
			continue
		}
		stopped[al.group]++
		if d.forJob != nil {
			c.marks = append(c.marks, mark{Earmark: engine.Earmark{NodeID: al.a.NodeID, GPUs: len(al.a.GPUIDs), For: *d.forJob,
				ForGroup: d.forGroup}, until: until})
		}
	}
	c.allocs = keep
	if d.group == "" {
		for _, g := range c.jobGroups(d.job) {
			stopped[g] = g.Count // the whole count, queued allocations too
		}
	}
	for _, g := range c.jobGroups(d.job) {
		n := min(stopped[g], g.Count)
		if n == 0 {
			continue
		}
		g.Count -= n
		if d.requeue {
			g.Held += n
			g.Since = now
			g.Preempted = d.preempted
			g.Requeued, g.OwnerResumed = !d.preempted, false
		}
	}
	c.setJob(d.job, func(j *engine.Job) {
		j.PreemptionsTotal = max(j.PreemptionsTotal, len(j.Preemptions)) + 1
		j.Preemptions = append(slices.Clip(j.Preemptions), now)
	})
}

func (c *Cluster) allocIndex(id string) int {
	return slices.IndexFunc(c.allocs, func(a alloc) bool { return a.a.ID == id })
}

// drainingFor reports whether victims still drain for job ref.
func (c *Cluster) drainingFor(ref engine.JobRef) bool {
	return slices.ContainsFunc(c.drains, func(d *drain) bool { return d.forJob != nil && *d.forJob == ref })
}

// dropMarks forgets GPUs set aside for work that no longer waits.
func (c *Cluster) dropMarks() {
	c.marks = slices.DeleteFunc(c.marks, func(m mark) bool {
		for _, g := range c.jobGroups(m.For) {
			if g.Held > 0 || c.queued(g) > 0 {
				return false
			}
		}
		return true
	})
}

// pending is job ref's drains in progress, by when they were decided: the
// engine counts them toward the eviction cap before they take effect, as
// the controller shows them (or it would preempt the job's other
// allocations in the grace past the cap).
func (c *Cluster) pending(ref engine.JobRef) []time.Time {
	var out []time.Time
	for _, d := range c.drains {
		if d.job == ref {
			out = append(out, d.decided)
		}
	}
	return out
}

// withPending is j as the engine sees it: its stops, and its drains in
// progress.
func (c *Cluster) withPending(j engine.Job) engine.Job {
	pending := c.pending(j.Ref)
	if len(pending) == 0 {
		return j
	}
	total := max(j.PreemptionsTotal, len(j.Preemptions)) + len(pending)
	j.Preemptions = append(slices.Clone(j.Preemptions), pending...)
	slices.SortFunc(j.Preemptions, func(a, b time.Time) int { return a.Compare(b) })
	j.PreemptionsTotal = total
	return j
}

// DrainsEnd is when the last victim of the drains in progress stops; zero
// when none is in progress.
func (c *Cluster) DrainsEnd() time.Time {
	var end time.Time
	for _, d := range c.drains {
		if d.end.After(end) {
			end = d.end
		}
	}
	return end
}
