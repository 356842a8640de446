package engine

import (
	"fmt"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// JobRef names a Nomad job: tenants are namespaces, so the namespace is part
// of a job's identity.
type JobRef struct {
	Namespace string
	ID        string
}

func (j JobRef) String() string { return j.Namespace + "/" + j.ID }

// Snapshot is the cluster as the engine sees it: what the controller read
// from Nomad (and from its own state) at one moment. The engine never
// mutates it.
type Snapshot struct {
	Nodes   []Node
	Allocs  []Alloc
	Waiting []Demand
	// Earmarks are GPUs a preemption freed for a beneficiary that Nomad
	// has not placed yet: its victims are gone, their GPUs free in Nomad,
	// but until the beneficiary runs they are its own (earmarks.go).
	Earmarks []Earmark
	// WaitingOrder, optional, lists the indices of Waiting by since when
	// each demand waits (Since), then by job (namespace/ID) and group:
	// the order in which demands the policy ranks equal are served. A
	// caller that keeps its queue in that order (the simulator) spares
	// each plan a sort of the whole queue. The plan does not depend on
	// it: the engine checks the order, and sorts when it is missing or
	// wrong.
	WaitingOrder []int32
	// Usage is each tenant's decayed use of borrowed GPUs as of the
	// plan's time, by tenant name (a namespace no tenant names: the
	// namespace): GPU-seconds held beyond its reserve, halving every
	// policy.Preemption.FairShareHalfLife (DecayUsage). Read only when the
	// policy sets a half-life; a tenant missing has used none.
	Usage map[string]float64
}

// Earmark is GPUs on a node set aside for a waiting beneficiary.
type Earmark struct {
	NodeID string
	GPUs   int
	For    JobRef
	// ForGroup is the beneficiary's task group, as in Action.ForGroup.
	ForGroup string
}

// Node is a Nomad client node with GPUs.
type Node struct {
	ID       string
	Name     string // for reasons; "" shows the ID
	NodePool string // Nomad node pool ("default" when unset)
	GPUs     int    // healthy GPUs
	// Device is the node's GPU device class: nodes of one class offer the
	// same GPUs to every device request (same vendor, type, model and
	// attributes). Demand.Devices lists the classes a demand may use. ""
	// is a class like any other (snapshots that do not tell models apart).
	Device string
	// Model is the GPUs' model as users know it ("H100 80GB HBM3"), for
	// reasons; "" when unknown.
	Model string
	// Share is the part of a whole GPU each of its devices is: 1/7 for a
	// 1g MIG instance of an A100 or H100 (1 of its 7 compute slices). 0
	// means 1, a whole GPU. Reserves and limits count devices by it
	// (units.go). Nodes of one device class must have the same.
	Share float64
}

// Job holds what the engine needs to know about a job, repeated on each of
// its allocations and demands so that the engine needs no job index.
type Job struct {
	Ref JobRef
	// Tier is the value of the job's tier meta key ("" when absent), as
	// the job wrote it: the engine resolves it in the job's tenant
	// (policy.TenantTier) and never trusts it.
	Tier     string
	Priority int  // the job's current Nomad priority
	Gang     bool // all allocations preempted and resumed together
	// Checkpoint overrides the policy's checkpoint signal for this job: ""
	// uses the policy's, policy.CheckpointNone ("none") means the job takes
	// no signal (no grace).
	// The controller passes what policy.ResolveJob made of the job's meta.
	Checkpoint string
	// Promoted is set once Steward promoted the job (a promote action): its
	// priority may then lie above its tier's by up to the boost. Any other
	// priority than its tier's is corrected (set-priority).
	Promoted bool
	// Preemptions are the times Steward preempted this job (oldest first),
	// as recorded by the controller: the eviction cap and promotion read it.
	Preemptions []time.Time
	// PreemptionsTotal is how often Steward preempted this job over its
	// life, as the controller counts them (Preemptions keeps only recent
	// times): preemption.max_per_job reads the larger of it and
	// len(Preemptions) (protect.go).
	PreemptionsTotal int
	// Snooze is a person's snooze of the job's idle rule (steward snooze,
	// the "keep-my-notebook" action), as the controller recorded it; zero
	// when none. The rule does not take the job's GPUs until it ends
	// (SnoozeEnd).
	Snooze Snooze
}

// Snooze holds a job's idle rule off: asked for At, until Until.
type Snooze struct {
	At    time.Time
	Until time.Time
}

// SnoozeEnd is when a snooze of rule ends: its Until, cut to the rule's
// max_snooze after it was asked for (a policy lowered since applies to
// snoozes already granted). Zero when there is no snooze or rule.
func SnoozeEnd(s Snooze, rule *policy.IdleRule) time.Time {
	if rule == nil || s.Until.IsZero() {
		return time.Time{}
	}
	if longest := s.At.Add(rule.MaxSnooze); s.Until.After(longest) {
		return longest
	}
	return s.Until
}

// Alloc is a running (or starting) allocation that holds GPUs.
type Alloc struct {
	ID    string
	Job   Job
	Group string
	// Name is its Nomad name, "job.group[3]"; "" when unknown. Nomad
	// stops a group's allocations with the highest indexes in their names
	// first when its count drops, and Steward preempts part of a group by
	// lowering its count: the engine takes a group's allocations as
	// victims from the top of that order only (chains.go).
	Name      string
	NodeID    string
	GPUIDs    []string
	StartedAt time.Time
	// CheckpointAt is when the allocation last saved a checkpoint, as its
	// task driver reported it; zero when unknown. Victims with the least
	// progress at risk (GPUs × time since the later of this and StartedAt)
	// are taken first among those the policy ranks equal.
	CheckpointAt time.Time
	// Usage holds recent GPU utilisation samples, oldest first: the mean
	// over the allocation's GPUs, in percent.
	Usage []Sample
	// IdleWarned is when its owners were last warned that an idle rule
	// would release its GPUs (Plan.Warnings); zero: never. A warning given
	// since its current idle stretch began is not given again.
	IdleWarned time.Time
	// Draining is set while a preemption decided earlier is in progress
	// (checkpoint grace): it is no victim again, and its GPUs count as
	// free: for the beneficiary named in For while that still waits
	// (earmarks.go), for any work otherwise.
	Draining bool
	// For and ForGroup name the work a draining allocation's GPUs were
	// freed for (nil: none, or unknown; ForGroup "": the job's first
	// waiting group).
	For      *JobRef
	ForGroup string
}

// Sample is one GPU utilisation reading.
type Sample struct {
	At   time.Time
	Util float64 // percent, 0..100
}

// Demand is work waiting for GPUs: allocations Nomad could not place
// (blocked evaluations, queued in the job summary), or a job group Steward
// holds (scaled down) after a preemption, an idle requeue or an admission
// decision.
type Demand struct {
	Job          Job
	Group        string
	GPUsPerAlloc int
	Count        int       // allocations waiting
	Since        time.Time // waiting (or held) since
	// NodePool is the Nomad node pool the job is placed in; "" or "all"
	// means any node.
	NodePool string
	// Devices are the device classes (Node.Device) whose GPUs the group's
	// device request accepts: its device name ("nvidia/gpu/H100") and its
	// constraints, as Nomad would match them. nil means any GPU. The
	// engine frees GPUs for a demand only on nodes of these classes:
	// preempting work on GPUs the demand cannot use would free nothing for
	// it. Demands that ask alike may share one slice.
	Devices []string
	// Nodes, when not nil, are the only nodes (Node.ID) the group may
	// run on: its constraints pin it there (a node name or ID). The
	// engine frees GPUs for it only on those: preempting work elsewhere
	// would free nothing it can use. Empty but not nil: no node will do.
	Nodes []string
	// Asks describes the device request for reasons ("nvidia/gpu/H100");
	// "" when it asks for any GPU.
	Asks string
	// Held is true when Steward holds the group; false when Nomad has it
	// queued.
	Held bool
	// Requeued is true for work held after an idle release: it waits
	// behind all other work, whatever its priority, and takes only free
	// GPUs (it preempts nobody), so that the GPUs it gave back go to the
	// work that needed them, not back to it.
	Requeued bool
	// OwnerResumed is true for requeued work whose owner asked for it back
	// (steward resume) since the idle release. Work requeued by a rule in
	// mode "always" otherwise waits, held, until its owner resumes it or
	// snoozes the rule (Job.Snooze): resumed by itself onto the GPUs it
	// just gave back, it would idle, be stopped again, and loop
	// (waitsForOwner).
	OwnerResumed bool
	// Preempted is true for work Steward preempted mid-run (a Preempt
	// action: for other work or for its tenant's limit; not an idle
	// release, which is Requeued) that has not run since: held after the
	// preemption, or resumed but not yet placed again. It has progress to
	// resume from a checkpoint. It is false for work that never ran: held
	// by a limit, capacity or the reserve rule before it started, or
	// queued by Nomad. With resume_order "preempted-first" (the default)
	// it goes before such work among demands otherwise ranked equal
	// (orderDemands).
	Preempted bool
	// QueueAt, when set, is where the job's own tenant moved it in its
	// waiting order (steward queue move): within the places its tenant's
	// demands of the same class (tier, reservation, priority, share,
	// fresh) already hold, it ranks as if it waited since QueueAt instead
	// of Since (honourMoves). It never moves a demand past another
	// tenant's, nor out of its class. Zero: not moved.
	QueueAt time.Time
}

// GPUs returns the GPUs the whole demand needs.
func (d Demand) GPUs() int { return d.GPUsPerAlloc * d.Count }

// demandGPUs is d.GPUs() for the engine's own calls. GPUs has a value
// receiver, so a call through a pointer copied the whole Demand (336
// bytes, six cache lines of the snapshot) to the stack first, once per
// demand in serve, orderDemands and the rest.
func demandGPUs(d *Demand) int { return d.GPUsPerAlloc * d.Count }

func (d Demand) String() string {
	return fmt.Sprintf("%s/%s (%d×%d GPUs)", d.Job.Ref, d.Group, d.Count, d.GPUsPerAlloc)
}
