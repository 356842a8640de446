package engine

import (
	"fmt"
	"strings"
	"time"
)

// Kind is what an action does.
type Kind string

const (
	// Preempt checkpoints the victims (signal, grace) and then holds them so
	// that the beneficiary gets their GPUs; held work resumes by itself.
	Preempt Kind = "preempt"
	// IdleStop releases GPUs held by idle work: stopped for good, or held
	// and requeued (Requeue).
	IdleStop Kind = "idle-stop"
	// Hold keeps waiting work out of Nomad's queue until Steward admits it.
	Hold Kind = "hold"
	// Resume gives held work back to Nomad to place.
	Resume Kind = "resume"
	// Promote raises the priority of a starved job.
	Promote Kind = "promote"
	// SetPriority brings a job's Nomad priority back to its tier's.
	SetPriority Kind = "set-priority"
	// Move re-registers waiting work's job in another node pool
	// (NodePool), by its pool precedence (precedence.go).
	Move Kind = "move"
)

// Rule names the policy rule behind an action: machine-readable, for
// metrics and tests. Reason.Message is the human text.
type Rule string

const (
	RuleReclaim    Rule = "reclaim"  // a tenant under its reservation takes back borrowed GPUs
	RulePriority   Rule = "priority" // a higher tier takes GPUs from a lower one
	RuleBackfill   Rule = "backfill" // a pool's owners take back GPUs lent to other tiers
	RuleIdle       Rule = "idle"     // idle work gives its GPUs back
	RuleLimit      Rule = "limit"    // a tenant may not hold more than its limit
	RuleReserve    Rule = "reserve"  // non-preemptible work runs only within its tenant's reserve
	RuleCapacity   Rule = "capacity" // not enough GPUs and nothing may be preempted
	RuleAdmit      Rule = "admit"    // capacity and limits allow held work to run
	RuleDraining   Rule = "draining" // waits, held, while victims checkpoint for it
	RulePromoteRun Rule = "promote-preemptions"
	RulePromoteAge Rule = "promote-wait"
	RuleTier       Rule = "tier"
	RulePrecedence Rule = "precedence" // waiting work goes to the first pool of its precedence with room
	RuleProtected  Rule = "protected"  // work preempted max_per_job times resumes only where it keeps no one from what they are owed
	RuleFairShare  Rule = "fair_share" // a tenant far above its fair share over time gives borrowed GPUs to one below

	// Rules of the people's requests (steward pause, resume, snooze), which
	// the controller carries out around the plan: declared here so that
	// every rule a decision can name is in this one list.
	RulePause  Rule = "pause"  // a person paused the job: it is held until resumed
	RuleResume Rule = "resume" // a person resumed a paused job
	RuleSnooze Rule = "snooze" // a person snoozed the job's idle reclaim for a while
	// RuleMaintenance: an operator drains the node in Nomad; the job's
	// work there is checkpointed, held and resumed elsewhere.
	RuleMaintenance Rule = "maintenance"
)

// Reason explains an action to the people who read it in the Nomad UI.
type Reason struct {
	Rule    Rule
	Message string
}

func (r Reason) String() string { return string(r.Rule) + ": " + r.Message }

// Action is one decision. Fields that do not apply to a Kind are zero.
type Action struct {
	Kind  Kind
	Job   JobRef
	Group string // "" for whole-job actions (Promote, SetPriority, gangs)
	// Allocs are the allocations to stop (Preempt, IdleStop), sorted.
	Allocs []string
	GPUs   int // GPUs freed (Preempt, IdleStop) or asked for (Hold, Resume)
	Count  int // allocations held or resumed (Hold, Resume)
	// Priority is the new priority (Promote, SetPriority).
	Priority int
	// Grace is the time between the checkpoint signal and the stop.
	Grace  time.Duration
	Signal string // checkpoint signal; "" when none is sent
	// Requeue: held and resumed later by Steward (always for Preempt);
	// false for an IdleStop means the job is stopped for good.
	Requeue bool
	// For is the work the GPUs are freed for (Preempt, pressure IdleStop).
	For      *JobRef
	ForGroup string
	// NodePool is the node pool a Move sends the job to.
	NodePool string
	// MoveTo names the node where a Preempt's victims fit at once in GPUs
	// no one waits for (migration.go): they are checkpointed, stopped and
	// resumed there as soon as the beneficiary is placed. "": a hold.
	MoveTo string
	// AfterVictims: a Resume whose allocations go on GPUs its victims are
	// still freeing (a checkpoint grace): release it when they have
	// stopped, not before, or Nomad would place it on the first GPUs
	// anyone frees. Without it, the GPUs it goes on are free now.
	AfterVictims bool
	// Ahead: a Resume of work that GPUs were set aside for (freed, or
	// being freed, by a preemption made for it, or counted on beside its
	// victims). Nomad places queued work by priority, then on the fullest
	// node: work of a higher priority queued at the same time would take
	// exactly those GPUs first. The controller asks Nomad to evaluate it
	// ahead of all other queued work.
	Ahead  bool
	Reason Reason
}

func (a Action) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", a.Kind, a.Job)
	if a.Group != "" {
		fmt.Fprintf(&b, "/%s", a.Group)
	}
	if len(a.Allocs) > 0 {
		fmt.Fprintf(&b, " allocs=%d", len(a.Allocs))
	}
	if a.GPUs > 0 {
		fmt.Fprintf(&b, " gpus=%d", a.GPUs)
	}
	if a.Count > 0 {
		fmt.Fprintf(&b, " count=%d", a.Count)
	}
	if a.Priority > 0 {
		fmt.Fprintf(&b, " priority=%d", a.Priority)
	}
	if a.For != nil {
		fmt.Fprintf(&b, " for=%s", *a.For)
	}
	if a.MoveTo != "" {
		fmt.Fprintf(&b, " move-to=%s", a.MoveTo)
	}
	if a.NodePool != "" {
		fmt.Fprintf(&b, " node-pool=%s", a.NodePool)
	}
	if a.AfterVictims {
		b.WriteString(" after-victims")
	}
	if a.Ahead {
		b.WriteString(" ahead")
	}
	fmt.Fprintf(&b, ": %s", a.Reason.Message)
	return b.String()
}

// Plan is the engine's output: actions in the order to carry them out, what
// keeps waiting work waiting, and the input it had to skip.
type Plan struct {
	Actions []Action
	// Waiting explains each demand that stays waiting after this plan.
	Waiting []Waiting
	// Warnings are idle rules' warnings before a release (warn_before):
	// not actions, nothing in the cluster changes.
	Warnings []IdleWarning
	// Skipped lists inconsistent snapshot items the engine ignored.
	Skipped []Skipped
	// Tenants summarises GPU use per tenant after the plan.
	Tenants []TenantUsage
	// Departments is each department's accounting (policy.Department),
	// by name; nil when the policy has none.
	Departments []DepartmentUsage
	// Earmarks are free GPUs a preemption in this plan counts on beside
	// its victims' (see markBeside): the caller keeps them for the
	// beneficiary, as Snapshot.Earmarks, until it runs or the victims'
	// grace and a plan or two have passed.
	Earmarks []Earmark
	// Unmarked are GPUs set aside for a waiting beneficiary (Snapshot.
	// Earmarks) that the plan gives to work of a higher tier for which
	// nothing else is free or may be preempted: the caller stops setting
	// them aside, and frees whatever holds them for the beneficiary.
	Unmarked []Unmark
}

// Unmark is GPUs no longer set aside for Earmark.For, with the work that
// takes them and why.
type Unmark struct {
	Earmark
	To     JobRef
	Reason Reason
}

// Waiting is a demand left waiting, with why.
type Waiting struct {
	Job    JobRef
	Group  string
	GPUs   int
	Held   bool
	Reason Reason
}

// Skipped is a snapshot item the engine ignored, with why.
type Skipped struct {
	Item   string
	Reason string
}

// TenantUsage is one tenant's GPU accounting after the plan.
type TenantUsage struct {
	Tenant  string
	Reserve int
	Limit   int // policy.Unlimited when unset
	InUse   int
	Waiting int // GPUs wanted by waiting work
	// Note says why a tenant stays over its limit after the plan (the
	// eviction cap), "" otherwise.
	Note string
	// With fair share over time (policy.Preemption.FairShareHalfLife):
	// UsageGPUHours is its decayed use of borrowed GPUs (Snapshot.Usage,
	// in GPU-hours), FairShare its weight over the weights of the tenants
	// that used, hold or wait for GPUs, and UsedShare its part of their
	// decayed use. All 0 when off.
	UsageGPUHours, FairShare, UsedShare float64
}

// Borrowed returns the GPUs held beyond the reservation.
func (t TenantUsage) Borrowed() int {
	if t.InUse > t.Reserve {
		return t.InUse - t.Reserve
	}
	return 0
}
