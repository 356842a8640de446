package controller

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Observation is what the controller read from Nomad in one pass: plain
// data, so that turning it into the engine's snapshot (snapshot.go) is a
// pure function with table tests.
type Observation struct {
	At     time.Time
	Nodes  []ObservedNode
	Jobs   map[jobKey]*ObservedJob
	Allocs []ObservedAlloc
	// Queued is, per job and group, the allocations Nomad could not place
	// (job summary), for jobs with a blocked evaluation.
	Queued map[jobKey]map[string]QueuedGroup
	// NewPressure is when the earliest blocked evaluation not seen in an
	// earlier observation was blocked (zero when none is new): the start
	// of the decision latency.
	NewPressure time.Time
	// Placeholders are Steward's own jobs holding free GPUs for
	// beneficiaries (placeholder.go), by job ID. They and their
	// allocations are in no other field: to the engine their GPUs are
	// free, and marked for the work they hold them for.
	Placeholders map[string]Placeholder
}

// ObservedNode is a ready, eligible client and its healthy GPUs.
type ObservedNode struct {
	ID       string
	Name     string
	NodePool string
	GPUs     int
	Drivers  []string // detected and healthy task drivers
}

// ObservedJob is the part of a Nomad job the controller needs.
type ObservedJob struct {
	Namespace, ID string
	Type          string
	Priority      int
	NodePool      string
	Meta          map[string]string
	Stopped       bool
	ModifyIndex   uint64
	// Groups maps each task group to its count and GPUs per allocation.
	Groups map[string]GroupSpec
}

// GroupSpec is one task group's count and GPU ask.
type GroupSpec struct {
	Count        int
	GPUsPerAlloc int
	// Tasks are the group's task names; SignalTasks those that take the
	// checkpoint signal: steward-exec tasks and tasks that use the group's
	// GPUs, unless their meta says "steward.checkpoint" = "false", and any
	// task whose meta says "true". A sidecar without GPUs, which the
	// signal's default action would kill, gets none.
	Tasks       []string
	SignalTasks []string
}

// CheckpointTaskMetaKey opts a task in or out of the checkpoint signal.
const CheckpointTaskMetaKey = "steward.checkpoint"

// ObservedAlloc is a non-terminal allocation that holds GPUs.
type ObservedAlloc struct {
	ID, Name     string
	Namespace    string
	JobID, Group string
	NodeID       string
	GPUIDs       []string
	ClientStatus string
	StartedAt    time.Time
	// CheckpointAt is when it last saved a checkpoint (its driver's
	// events); zero when unknown.
	CheckpointAt time.Time
	// CheckpointDone is, per task, when it last said that the checkpoint
	// its checkpoint signal asked for is written (checkpointsDone).
	CheckpointDone map[string]time.Time
	RunningTasks   []string
	DesiredStatus  string
}

// QueuedGroup is a group Nomad has allocations queued for.
type QueuedGroup struct {
	Count int
	Since time.Time
}

type jobKey struct{ Namespace, ID string }

func (k jobKey) String() string { return k.Namespace + "/" + k.ID }

// observer reads the cluster. It caches full job specs by modify index:
// the list endpoint says when a job changed, so only changed jobs cost a
// second request.
type observer struct {
	n Nomad
	// placeholders is the namespace of Steward's placeholder jobs
	// (Config.StateNamespace).
	placeholders string
	jobs         map[jobKey]*ObservedJob
	blocked      map[string]bool // blocked evaluations already seen
}

func newObserver(n Nomad, placeholders string) *observer {
	return &observer{n: n, placeholders: placeholders, jobs: map[jobKey]*ObservedJob{}, blocked: map[string]bool{}}
}

// observe reads nodes, jobs, allocations and blocked evaluations; fresh
// asks the leader (after the round's own writes), else any server answers.
func (o *observer) observe(ctx context.Context, now time.Time, fresh bool) (*Observation, error) {
	obs := &Observation{At: now, Jobs: map[jobKey]*ObservedJob{}, Queued: map[jobKey]map[string]QueuedGroup{},
		Placeholders: map[string]Placeholder{}}
	isPlaceholder := func(ns, id string) bool {
		return ns == o.placeholders && strings.HasPrefix(id, placeholderPrefix)
	}

	nodes, err := o.n.ListNodes(ctx, fresh)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.Status != api.NodeStatusReady || n.SchedulingEligibility != api.NodeSchedulingEligible || n.Drain {
			continue
		}
		gpus := 0
		if n.NodeResources != nil {
			for _, d := range n.NodeResources.Devices {
				if d.Type != "gpu" {
					continue
				}
				for _, inst := range d.Instances {
					if inst.Healthy {
						gpus++
					}
				}
			}
		}
		if gpus > 0 {
			var drivers []string
			for name, d := range n.Drivers {
				if d != nil && d.Detected && d.Healthy {
					drivers = append(drivers, name)
				}
			}
			sort.Strings(drivers)
			obs.Nodes = append(obs.Nodes, ObservedNode{ID: n.ID, Name: n.Name, NodePool: n.NodePool, GPUs: gpus, Drivers: drivers})
		}
	}

	stubs, err := o.n.ListJobs(ctx, fresh)
	if err != nil {
		return nil, err
	}
	seen := map[jobKey]bool{}
	for _, s := range stubs {
		if s.Type == api.JobTypeSystem || s.Type == api.JobTypeSysbatch || s.ParentID != "" && s.Periodic {
			continue
		}
		if isPlaceholder(s.Namespace, s.ID) {
			if !s.Stop {
				obs.Placeholders[s.ID] = Placeholder{ID: s.ID}
			}
			continue
		}
		k := jobKey{s.Namespace, s.ID}
		seen[k] = true
		j := o.jobs[k]
		if j == nil || j.ModifyIndex != s.JobModifyIndex || j.Stopped != s.Stop {
			full, err := o.n.ReadJob(ctx, s.Namespace, s.ID, fresh)
			if err != nil {
				return nil, err
			}
			if full == nil {
				// Purged between the list and this read: gone.
				delete(o.jobs, k)
				continue
			}
			j = toObservedJob(full)
			o.jobs[k] = j
		}
		obs.Jobs[k] = j
	}
	for k := range o.jobs {
		if !seen[k] {
			delete(o.jobs, k)
		}
	}

	allocs, err := o.n.ListAllocs(ctx, fresh)
	if err != nil {
		return nil, err
	}
	for _, a := range allocs {
		oa := toObservedAlloc(a)
		if isPlaceholder(oa.Namespace, oa.JobID) {
			if p, ok := obs.Placeholders[oa.JobID]; ok {
				p.Node, p.GPUs = oa.NodeID, len(oa.GPUIDs)
				obs.Placeholders[oa.JobID] = p
			}
			continue
		}
		if len(oa.GPUIDs) > 0 {
			obs.Allocs = append(obs.Allocs, oa)
		}
	}
	sort.Slice(obs.Allocs, func(i, k int) bool { return obs.Allocs[i].ID < obs.Allocs[k].ID })

	evals, err := o.n.ListBlockedEvals(ctx, fresh)
	if err != nil {
		return nil, err
	}
	seenEvals := map[string]bool{}
	for _, ev := range evals {
		if isPlaceholder(ev.Namespace, ev.JobID) {
			continue // Steward's own: no work waits there
		}
		seenEvals[ev.ID] = true
		if !o.blocked[ev.ID] {
			at := time.Unix(0, ev.ModifyTime)
			if ev.ModifyTime == 0 || at.After(now) {
				at = now
			}
			if obs.NewPressure.IsZero() || at.Before(obs.NewPressure) {
				obs.NewPressure = at
			}
		}
		k := jobKey{ev.Namespace, ev.JobID}
		j := obs.Jobs[k]
		if j == nil || j.Stopped {
			continue
		}
		if _, done := obs.Queued[k]; done {
			continue
		}
		sum, err := o.n.JobSummary(ctx, ev.Namespace, ev.JobID, fresh)
		if err != nil {
			return nil, err
		}
		if sum == nil {
			continue // purged since it was listed
		}
		groups := map[string]QueuedGroup{}
		for g, s := range sum.Summary {
			if s.Queued > 0 && j.Groups[g].GPUsPerAlloc > 0 && lacksGPUs(ev.FailedTGAllocs[g]) {
				groups[g] = QueuedGroup{Count: s.Queued, Since: time.Unix(0, ev.CreateTime)}
			}
		}
		obs.Queued[k] = groups
	}
	o.blocked = seenEvals
	return obs, nil
}

// lacksGPUs reports whether a group's placement failed for want of
// devices: nodes exhausted on "devices: ..." or filtered for "missing
// devices". Work blocked on CPU or memory is not Steward's to make room for:
// preempting GPU work would not help it. Without failure details the group
// counts (Nomad reports them for every blocked group it tried).
func lacksGPUs(m *api.AllocationMetric) bool {
	if m == nil {
		return true
	}
	for k := range m.DimensionExhausted {
		if strings.HasPrefix(k, "devices") {
			return true
		}
	}
	for k := range m.ConstraintFiltered {
		if strings.Contains(k, "missing devices") {
			return true
		}
	}
	return false
}

func toObservedJob(j *api.Job) *ObservedJob {
	oj := &ObservedJob{
		Namespace: deref(j.Namespace), ID: deref(j.ID), Type: deref(j.Type),
		Priority: derefInt(j.Priority), NodePool: deref(j.NodePool), Meta: map[string]string{},
		Stopped: j.Stop != nil && *j.Stop, ModifyIndex: derefU64(j.JobModifyIndex), Groups: map[string]GroupSpec{},
	}
	for k, v := range j.Meta {
		oj.Meta[k] = v
	}
	for _, tg := range j.TaskGroups {
		gs := GroupSpec{Count: derefInt(tg.Count)}
		for _, t := range tg.Tasks {
			gs.Tasks = append(gs.Tasks, t.Name)
			gpus := 0
			if t.Resources != nil {
				for _, d := range t.Resources.Devices {
					if isGPURequest(d.Name) && d.Count != nil {
						gpus += int(*d.Count)
					}
				}
			}
			gs.GPUsPerAlloc += gpus
			takes := t.Driver == "steward-exec" || gpus > 0
			if v, ok := t.Meta[CheckpointTaskMetaKey]; ok {
				if b, err := strconv.ParseBool(v); err == nil {
					takes = b
				}
			}
			if takes {
				gs.SignalTasks = append(gs.SignalTasks, t.Name)
			}
		}
		// Group meta may name the tier too; job meta wins (it is what the
		// engine sees per job).
		oj.Groups[deref(tg.Name)] = gs
	}
	return oj
}

// isGPURequest reports whether a device request ("gpu", "nvidia/gpu",
// "nvidia/gpu/A100") asks for GPUs.
func isGPURequest(name string) bool {
	parts := strings.Split(name, "/")
	switch len(parts) {
	case 1:
		return parts[0] == "gpu"
	default:
		return parts[1] == "gpu"
	}
}

func toObservedAlloc(a *api.AllocationListStub) ObservedAlloc {
	oa := ObservedAlloc{ID: a.ID, Name: a.Name, Namespace: a.Namespace, JobID: a.JobID, Group: a.TaskGroup,
		NodeID: a.NodeID, ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus,
		StartedAt: time.Unix(0, a.CreateTime)}
	if a.AllocatedResources != nil {
		names := make([]string, 0, len(a.AllocatedResources.Tasks))
		for name := range a.AllocatedResources.Tasks {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			for _, d := range a.AllocatedResources.Tasks[name].Devices {
				if d.Type == "gpu" {
					oa.GPUIDs = append(oa.GPUIDs, d.DeviceIDs...)
				}
			}
		}
	}
	// Runtime counts from the first task start (min_runtime is about
	// work done), falling back to the allocation's creation.
	var first time.Time
	for name, ts := range a.TaskStates {
		if ts.State == "running" {
			oa.RunningTasks = append(oa.RunningTasks, name)
			if !ts.StartedAt.IsZero() && (first.IsZero() || ts.StartedAt.Before(first)) {
				first = ts.StartedAt
			}
		}
	}
	if !first.IsZero() {
		oa.StartedAt = first
	}
	oa.CheckpointAt = lastCheckpoint(a.TaskStates)
	oa.CheckpointDone = checkpointsDone(a.TaskStates)
	sort.Strings(oa.RunningTasks)
	return oa
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(i *int) int {
	if i == nil {
		return 0
	}
	return *i
}

func derefU64(i *uint64) uint64 {
	if i == nil {
		return 0
	}
	return *i
}
