package controller

import (
	"slices"
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
	// Done is, per batch job and group, the allocations that finished by
	// themselves (client status complete, desired status run) in the
	// job's current version: completed work, never waiting work. Nomad
	// counts them in the group's count until the job's next version; from
	// then on it ignores them (a batch job's terminal allocations of an
	// older version, scheduler/reconciler filterOldTerminalAllocs, nomad
	// v1.11.3) and places the count anew. Every count Steward writes for
	// a batch group therefore leaves them out (round.takeDone).
	Done map[jobKey]map[string]int
	// Ended are a batch job's allocations, by ID, that finished by
	// themselves (client status complete, desired status run) in any
	// version of the job: a preemption's victim that completed its work
	// before the stop reached it is done, not preempted (finishDrain).
	Ended map[string]jobKey
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
	// Skipped are the jobs left out of Jobs (skipJobType), kept only
	// while the controller guards node pools: system jobs, periodic
	// children, any of which can put a task on the controller's nodes
	// (poolguard.go).
	Skipped map[jobKey]*ObservedJob
	// PoolNodes are, per guarded node pool (Config.ControllerPools), the
	// names of its nodes: every node registered, GPUs or none, ready or
	// not (a node down now may join again).
	PoolNodes map[string][]string
	// Draining are the nodes an operator drains in Nomad (nomad node
	// drain -enable), by node ID: their GPU work is checkpointed and
	// held, to resume elsewhere (maintenance.go).
	Draining map[string]DrainingNode
}

// DrainingNode is a node Nomad drains.
type DrainingNode struct {
	Name string
	// Deadline is when Nomad stops what is still on the node (zero:
	// not known, the drain began before this controller followed the
	// node's events); Forced: a drain that stops everything at once.
	Deadline time.Time
	Forced   bool
}

// ObservedNode is a ready, eligible client and its healthy GPUs.
type ObservedNode struct {
	ID       string
	Name     string
	NodePool string
	GPUs     int
	Drivers  []string // detected and healthy task drivers
	// GPUGroups are its GPU device groups with healthy instances: the
	// models and attributes device requests are matched against
	// (devices.go).
	GPUGroups []GPUGroup
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
	// Version is the job's version: each scale or registration makes a
	// new one.
	Version uint64
	// Groups maps each task group to its count and GPUs per allocation.
	Groups map[string]GroupSpec
}

// GroupSpec is one task group's count and GPU ask.
type GroupSpec struct {
	// Count is the group's count; for a system or sysbatch job, the
	// allocations it runs (systemCounts), and PerNode its count as
	// written, per node (nomadCount).
	Count        int
	PerNode      int
	GPUsPerAlloc int
	// Tasks are the group's task names; SignalTasks those that take the
	// checkpoint signal: steward-exec tasks and tasks that use the group's
	// GPUs, unless their meta says "steward.checkpoint" = "false", and any
	// task whose meta says "true". A sidecar without GPUs, which the
	// signal's default action would kill, gets none.
	Tasks       []string
	SignalTasks []string
	// GPURequests are its tasks' GPU device requests, with their
	// constraints: which nodes' GPUs it can use (devices.go).
	GPURequests []*api.RequestedDevice
	// Scaling is the group's scaling block (a Nomad Autoscaler policy),
	// nil when it has none: Steward pins it while it holds the group
	// (scaling.go).
	Scaling *ScalingPolicy
	// Volumes are the group's host and CSI volumes: re-registering the
	// job needs rights on them (backoff.go, missingRight).
	Volumes []VolumeUse
	// Pins are its constraints that pin it to nodes by name or ID: the
	// only nodes it may use (pinning.go).
	Pins []NodePin
}

// VolumeUse is one volume a group mounts.
type VolumeUse struct {
	Type, Source string
	ReadOnly     bool
}

// CheckpointTaskMetaKey opts a task in or out of the checkpoint signal.
const CheckpointTaskMetaKey = "steward.checkpoint"

// ObservedAlloc is a non-terminal allocation that holds GPUs (or, in the
// cache only, one that finished: finished).
type ObservedAlloc struct {
	ID, Name     string
	Namespace    string
	JobID, Group string
	// JobVersion is the version of its job it was placed for.
	JobVersion   uint64
	NodeID       string
	GPUIDs       []string
	ClientStatus string
	// StartedAt is when the allocation was created: its age for
	// min_runtime, whatever its tasks' restarts (toObservedAlloc).
	StartedAt time.Time
	// CheckpointAt is when it last saved a checkpoint (its driver's
	// events); zero when unknown.
	CheckpointAt time.Time
	// CheckpointDone is, per task, when it last said that the checkpoint
	// its checkpoint signal asked for is written (checkpointsDone).
	CheckpointDone map[string]time.Time
	RunningTasks   []string
	DesiredStatus  string
	// StopRequested: Nomad was asked to stop it (its desired transition
	// is to migrate) and will when it evaluates the job. Known from
	// events only (the list does not say).
	StopRequested bool
}

// QueuedGroup is a group Nomad has allocations queued for.
type QueuedGroup struct {
	Count int
	Since time.Time
	// Seen is when the event stream brought the blocking to this
	// controller (zero: a full read did); a slow decision's line splits
	// its latency from here (split.go).
	Seen time.Time
}

type jobKey struct{ Namespace, ID string }

func (k jobKey) String() string { return k.Namespace + "/" + k.ID }

// lacksGPUs reports whether a group's placement failed for want of
// devices on every node it could run on: some nodes exhausted on
// "devices: ..." or filtered for "missing devices", and no node it may use
// failed on anything else. Nodes its own constraints filtered out are not
// its to use and do not count. A group that one node turned away for CPU,
// memory or ports is not Steward's to make room for: preempting GPU work
// elsewhere would not place it (issue 29). Without failure details the
// group counts (Nomad reports them for every blocked group it tried).
func lacksGPUs(m *api.AllocationMetric) bool {
	if m == nil {
		return true
	}
	devices, other := 0, 0
	for k, n := range m.DimensionExhausted {
		if strings.HasPrefix(k, "devices") {
			devices += n
		} else {
			other += n
		}
	}
	filtered := 0
	for k, n := range m.ConstraintFiltered {
		if strings.Contains(k, "missing devices") {
			devices += n
		} else {
			filtered += n
		}
	}
	if devices == 0 || other > 0 {
		return false
	}
	// Nodes evaluated that neither a constraint filtered nor a dimension
	// exhausted turned it away for a reason the metric does not name.
	if m.NodesEvaluated > 0 && m.NodesEvaluated-filtered > devices {
		return false
	}
	return true
}

func toObservedJob(j *api.Job) *ObservedJob {
	oj := &ObservedJob{
		Namespace: deref(j.Namespace), ID: deref(j.ID), Type: deref(j.Type),
		Priority: derefInt(j.Priority), NodePool: deref(j.NodePool), Meta: keptMeta(j.Meta),
		Stopped: j.Stop != nil && *j.Stop, ModifyIndex: derefU64(j.JobModifyIndex), Version: derefU64(j.Version),
		Groups: map[string]GroupSpec{},
	}
	for _, tg := range j.TaskGroups {
		gs := GroupSpec{Count: derefInt(tg.Count), Scaling: toScalingPolicy(tg.Scaling), Pins: groupPins(j, tg)}
		for _, v := range tg.Volumes {
			if v != nil {
				gs.Volumes = append(gs.Volumes, VolumeUse{Type: v.Type, Source: v.Source, ReadOnly: v.ReadOnly})
			}
		}
		slices.SortFunc(gs.Volumes, func(a, b VolumeUse) int { return strings.Compare(a.Type+"/"+a.Source, b.Type+"/"+b.Source) })
		for _, t := range tg.Tasks {
			gs.Tasks = append(gs.Tasks, t.Name)
			gpus := 0
			for _, d := range gpuRequests(t) {
				if d.Count != nil {
					gpus += int(*d.Count)
				}
				gs.GPURequests = append(gs.GPURequests, d)
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

// toScalingPolicy is a group's scaling block as Steward sees it; Nomad
// fills in enabled (true) and min (the group's count) when a jobspec
// leaves them out.
func toScalingPolicy(p *api.ScalingPolicy) *ScalingPolicy {
	if p == nil {
		return nil
	}
	out := &ScalingPolicy{Enabled: p.Enabled == nil || *p.Enabled}
	if p.Min != nil {
		out.Min = *p.Min
	}
	if p.Max != nil {
		out.Max = *p.Max
	}
	return out
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
		JobVersion: a.JobVersion, NodeID: a.NodeID, ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus,
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
	// Age (min_runtime, the youngest-first order) counts from the
	// allocation's creation, never from a task's start: a task that
	// restarts, on its own or on purpose, must not stay forever young
	// (issue 29). StartedAt is set from CreateTime above.
	for name, ts := range a.TaskStates {
		if ts.State == "running" {
			oa.RunningTasks = append(oa.RunningTasks, name)
		}
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
