package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// `steward job check JOBSPEC` asks the leading controller what it would do
// with a job if it were submitted now: the controller alone sees the whole
// cluster and its own state (holds, drains, preemption history), which a
// tenant's token cannot read. The answer comes from the same engine, on the
// snapshot of the controller's latest round with the job added as new
// waiting work.

// CheckResult is what Steward makes of a jobspec, and what it would do with
// it now.
type CheckResult struct {
	Job       string `json:"job"`
	Namespace string `json:"namespace"`
	Tenant    string `json:"tenant"`
	// Tier is the tier the job runs as; Requested its tier meta value.
	Tier      string `json:"tier"`
	Requested string `json:"requested,omitempty"`
	// Priority is the Nomad priority Steward gives the job (its tier's);
	// SpecPriority the one its jobspec sets.
	Priority     int  `json:"priority"`
	SpecPriority int  `json:"spec_priority"`
	Gang         bool `json:"gang"`
	// CheckpointSignal is "" when the job takes none; Grace is the
	// policy's preemption grace (a pool may set its own for backfill).
	CheckpointSignal string        `json:"checkpoint_signal,omitempty"`
	Grace            time.Duration `json:"grace"`
	// Problems are the job's meta values Steward refuses, and what it uses
	// instead.
	Problems []string     `json:"problems,omitempty"`
	Groups   []GroupCheck `json:"groups"`
	// At is when the cluster was read (the controller's latest round).
	At     time.Time `json:"at"`
	Leader string    `json:"leader"`
}

// GroupCheck is the verdict on one task group.
type GroupCheck struct {
	Group        string `json:"group"`
	Count        int    `json:"count"`
	GPUsPerAlloc int    `json:"gpus_per_alloc"`
	// Verdict is run (free GPUs fit it), preempt (it runs once Victims
	// have checkpointed and stopped), wait (Reason says why) or no-gpus
	// (Steward leaves it to Nomad).
	Verdict string        `json:"verdict"`
	Reason  string        `json:"reason,omitempty"`
	Victims []CheckVictim `json:"victims,omitempty"`
	// Nomad is what Nomad's own plan says when it cannot place the group
	// now, for reasons other than GPUs Steward would free ("" when it can).
	Nomad string `json:"nomad,omitempty"`
}

// Verdicts of a GroupCheck.
const (
	VerdictRun     = "run"
	VerdictPreempt = "preempt"
	VerdictWait    = "wait"
	VerdictNoGPUs  = "no-gpus"
)

// CheckVictim is work that would be preempted (or released as idle) for
// the job. Job is "" for work in another namespace than the job's: a
// tenant learns which tenant and tier lose GPUs, not the names of their
// jobs.
type CheckVictim struct {
	Job    string        `json:"job,omitempty"`
	Tenant string        `json:"tenant"`
	Tier   string        `json:"tier"`
	GPUs   int           `json:"gpus"`
	Kind   string        `json:"kind"`
	Signal string        `json:"signal,omitempty"`
	Grace  time.Duration `json:"grace,omitempty"`
	Reason string        `json:"reason"`
}

// checkJob answers a check on a snapshot: the job's own allocations and
// waiting work leave it, and its GPU groups join it as work Nomad has just
// queued. Pure: the tests call it with hand-made snapshots.
func checkJob(pol *policy.Policy, eng *engine.Engine, base *engine.Snapshot, devices *deviceMatcher, j *ObservedJob, st *JobState, now time.Time) CheckResult {
	set := pol.ResolveJob(j.Namespace, j.Meta)
	res := CheckResult{Job: j.ID, Namespace: j.Namespace, Tenant: set.Tenant.Name, Tier: set.Tier, Requested: set.Requested,
		Priority: pol.Tiers[set.Tier].Priority, SpecPriority: j.Priority, Gang: set.Gang,
		CheckpointSignal: set.CheckpointSignal, Problems: set.Problems}
	if set.CheckpointSignal != "" {
		res.Grace = pol.Preemption.Grace
	}
	ref := engine.JobRef{Namespace: j.Namespace, ID: j.ID}
	snap := &engine.Snapshot{Nodes: base.Nodes, Usage: base.Usage}
	for _, a := range base.Allocs {
		if a.Job.Ref != ref {
			snap.Allocs = append(snap.Allocs, a)
		}
	}
	for _, d := range base.Waiting {
		if d.Job.Ref != ref {
			snap.Waiting = append(snap.Waiting, d)
		}
	}
	ej := engineJob(pol, j, st)
	groups := make([]string, 0, len(j.Groups))
	for g := range j.Groups {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	if allOrNothing(j.Type) {
		// Governed whole (systemjobs.go): a gang of its per-node count on
		// every node it fits, as Nomad would place it.
		res.Gang = true
		j = systemCheckCounts(j, snap.Nodes, devices)
	}
	for _, g := range groups {
		spec := j.Groups[g]
		if spec.GPUsPerAlloc > 0 && spec.Count > 0 {
			snap.Waiting = append(snap.Waiting, engine.Demand{Job: ej, Group: g, GPUsPerAlloc: spec.GPUsPerAlloc,
				Count: spec.Count, Since: now, NodePool: j.NodePool, Devices: devices.accepts(spec.GPURequests),
				Nodes: pinnedNodes(spec.Pins, snap.Nodes), Asks: asks(spec.GPURequests)})
		}
	}
	plan := eng.Plan(snap, now)

	tierOfJob := map[engine.JobRef]string{}
	for _, a := range snap.Allocs {
		if _, ok := tierOfJob[a.Job.Ref]; !ok {
			tierOfJob[a.Job.Ref], _ = pol.TenantTier(pol.TenantOf(a.Job.Ref.Namespace), a.Job.Tier)
		}
	}
	for _, g := range groups {
		res.Groups = append(res.Groups, groupCheck(pol, plan, tierOfJob, j, g))
	}
	return res
}

// groupCheck is the verdict on one group of a checked job: run, wait
// (and why), or preempt (and whom), as the plan has it.
func groupCheck(pol *policy.Policy, plan *engine.Plan, tierOfJob map[engine.JobRef]string, j *ObservedJob, g string) GroupCheck {
	ref := engine.JobRef{Namespace: j.Namespace, ID: j.ID}
	spec := j.Groups[g]
	gc := GroupCheck{Group: g, Count: spec.Count, GPUsPerAlloc: spec.GPUsPerAlloc, Verdict: VerdictRun}
	if spec.GPUsPerAlloc == 0 || spec.Count == 0 {
		gc.Verdict, gc.Reason = VerdictNoGPUs, "asks for no GPUs: Steward leaves it to Nomad"
		return gc
	}
	for _, a := range plan.Actions {
		switch {
		case (a.Kind == engine.Preempt || a.Kind == engine.IdleStop) && a.For != nil && *a.For == ref &&
			(a.ForGroup == g || a.ForGroup == ""):
			v := CheckVictim{Tenant: pol.TenantOf(a.Job.Namespace).Name, Tier: tierOfJob[a.Job], GPUs: a.GPUs,
				Kind: string(a.Kind), Signal: a.Signal, Grace: a.Grace, Reason: a.Reason.Message}
			if a.Job.Namespace == j.Namespace {
				v.Job = a.Job.ID
			}
			gc.Victims = append(gc.Victims, v)
			gc.Verdict = VerdictPreempt
		case a.Kind == engine.Hold && a.Job == ref && a.Group == g && a.Reason.Rule != engine.RuleDraining:
			gc.Verdict, gc.Reason = VerdictWait, a.Reason.Message
		}
	}
	for _, w := range plan.Waiting {
		// Held only while its victims checkpoint: the verdict is
		// theirs (preempt).
		if w.Job == ref && w.Group == g && w.Reason.Rule != engine.RuleDraining {
			gc.Verdict, gc.Reason = VerdictWait, w.Reason.Message
		}
	}
	if gc.Verdict == VerdictRun {
		gc.Reason = "free GPUs fit it now"
	}
	return gc
}

// errNotLeading answers a check sent to a controller that does not lead.
var errNotLeading = errors.New("this controller is not leading: ask the leader (steward status names it)")

// errNoRound answers a check before the first round.
var errNoRound = errors.New("the controller has not read the cluster yet: try again in a few seconds")

// Check answers `steward job check` for a parsed job. The caller's token
// must be allowed to submit the job (Nomad's own plan endpoint decides, with
// that token), so a check never tells anyone more than Nomad would let
// them do.
func (c *Controller) Check(ctx context.Context, job *api.Job, token string) (*CheckResult, error) {
	if job == nil || job.ID == nil || *job.ID == "" {
		return nil, fmt.Errorf("the request carries no job")
	}
	if c.client == nil {
		return nil, fmt.Errorf("no Nomad client")
	}
	c.mu.Lock()
	leading, base, pol, eng := c.health.Leader || c.cfg().DryRun, c.lastCheck, c.pol, c.eng
	c.mu.Unlock()
	if !leading {
		return nil, errNotLeading
	}
	if base == nil {
		return nil, errNoRound
	}
	ns := deref(job.Namespace)
	if ns == "" {
		ns = "default"
		job.Namespace = &ns
	}
	wo := (&api.WriteOptions{Namespace: ns, AuthToken: token}).WithContext(ctx)
	planned, _, err := c.client.Jobs().PlanOpts(job, &api.PlanOptions{}, wo)
	if err != nil {
		return nil, needs(err, "submit-job (for the caller's token)", "plan job %s/%s with Nomad", ns, deref(job.ID))
	}
	oj := toObservedJob(job)
	res := checkJob(pol, eng, base.snap, newDeviceMatcher(base.nodes), oj, base.states[jobKey{ns, oj.ID}], c.now())
	res.At, res.Leader = base.at, c.cfg().Identity
	for i := range res.Groups {
		if m := planned.FailedTGAllocs[res.Groups[i].Group]; m != nil && !lacksGPUsOnly(m) {
			res.Groups[i].Nomad = "Nomad cannot place it now, for more than GPUs: " + describeFailure(m)
		}
	}
	return &res, nil
}

// lacksGPUsOnly reports whether a placement failure is about GPUs alone,
// which Steward's verdict already covers.
func lacksGPUsOnly(m *api.AllocationMetric) bool {
	for k := range m.DimensionExhausted {
		if !strings.HasPrefix(k, "devices") {
			return false
		}
	}
	for k := range m.ConstraintFiltered {
		if !strings.Contains(k, "missing devices") {
			return false
		}
	}
	return true
}

// describeFailure says why Nomad could not place a group, as `nomad job
// plan` does: the exhausted dimensions and filtering constraints, with
// their node counts.
func describeFailure(m *api.AllocationMetric) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m.DimensionExhausted)) {
		parts = append(parts, fmt.Sprintf("%s exhausted on %d nodes", k, m.DimensionExhausted[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(m.ConstraintFiltered)) {
		parts = append(parts, fmt.Sprintf("constraint %s filtered %d nodes", k, m.ConstraintFiltered[k]))
	}
	if m.NodesEvaluated == 0 {
		parts = append(parts, "no node is eligible")
	}
	return strings.Join(parts, "; ")
}

// checkBase is what a check plans on: the latest round's snapshot, and a
// copy of what the engine reads of each job's state.
type checkBase struct {
	snap   *engine.Snapshot
	nodes  []ObservedNode // for the device classes a job's requests accept
	at     time.Time
	states map[jobKey]*JobState
}

// keepCheckBase keeps a round's snapshot for checks. The engine never
// mutates a snapshot, so sharing it with the HTTP goroutine is safe; job
// states change in the loop, so the parts the engine reads are copied.
func (c *Controller) keepCheckBase(snap *engine.Snapshot, nodes []ObservedNode, at time.Time) {
	states := make(map[jobKey]*JobState, len(c.states()))
	for k, st := range c.states() {
		if len(st.Preemptions) > 0 || st.PreemptedTotal > 0 || st.Promoted {
			states[k] = &JobState{Namespace: k.Namespace, ID: k.ID, Preemptions: slices.Clone(st.Preemptions),
				PreemptedTotal: st.PreemptedTotal, Promoted: st.Promoted}
		}
	}
	c.mu.Lock()
	c.lastCheck = &checkBase{snap: snap, nodes: nodes, at: at, states: states}
	c.mu.Unlock()
}
