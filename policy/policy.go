// Package policy is Steward's policy language: HCL files that describe GPU
// tiers, tenant reservations and limits, pools kept for some tiers, idle
// rules and preemption guards. Parse turns files into a resolved Policy with
// every default filled in; the decision engine (policy/engine) consumes it.
//
// This package does no I/O beyond reading the files it is handed and imports
// no Nomad client.
package policy

import (
	"slices"
	"sort"
	"time"
)

// Defaults that apply when a policy leaves an attribute out. They are part of
// the language's contract: docs/reference/policy.md and example.hcl document each one.
const (
	DefaultTierMetaKey       = "steward.tier"
	DefaultGangMetaKey       = "steward.gang"
	DefaultCheckpointMetaKey = "steward.checkpoint_signal"

	DefaultTenantWeight = 1.0

	DefaultIdleThreshold = 10.0
	DefaultIdleAfter     = 15 * time.Minute
	DefaultIdleMode      = IdleModePressure
	DefaultIdleAction    = IdleActionRequeue
	// DefaultIdleMaxSnooze is the longest a person may snooze an idle
	// rule for one job (steward snooze, the "keep my notebook" action): a
	// working day.
	DefaultIdleMaxSnooze = 8 * time.Hour

	DefaultNotifyTimeout  = 10 * time.Second
	DefaultNotifyAttempts = 8

	DefaultMinRuntime       = 10 * time.Minute
	DefaultGrace            = 2 * time.Minute
	DefaultCheckpointSignal = "SIGUSR1"
	// CheckpointNone is how "no checkpoint signal" is spelt wherever a
	// signal is written as text: a policy's checkpoint_signal, the
	// checkpoint meta key, the engine's Job.Checkpoint, the driver's
	// checkpoint_signal option. Policy itself holds "" for it
	// (NormalizeSignal). One constant, so that the spellings cannot drift.
	CheckpointNone          = "none"
	DefaultMaxPerJobPerHour = 2
	// DefaultMaxPerJob bounds the preemptions of one job over its life:
	// past it the job is protected until it ends, so that every job
	// completes (issue 31: one job was preempted 84 to 178 times over a
	// trace, within the hourly cap).
	DefaultMaxPerJob         = 10
	DefaultPromoteBoost      = 10
	DefaultPromotePreemption = 3
	DefaultPromoteWait       = time.Hour
	DefaultResumeOrder       = ResumeOrderPreemptedFirst

	// Unlimited is the Limit of a tenant that sets none.
	Unlimited = -1

	// MinPriority and MaxPriority bound Nomad job priorities.
	MinPriority = 1
	MaxPriority = 100
)

// IdleMode says when an idle rule acts.
type IdleMode string

const (
	// IdleModePressure releases idle GPUs only when other work waits for them.
	IdleModePressure IdleMode = "pressure"
	// IdleModeAlways releases idle GPUs as soon as the rule matches.
	IdleModeAlways IdleMode = "always"
)

// IdleAction says what happens to a job whose GPUs an idle rule releases.
type IdleAction string

const (
	// IdleActionStop stops the job; a person restarts it.
	IdleActionStop IdleAction = "stop"
	// IdleActionRequeue holds the job and resumes it when GPUs are free.
	IdleActionRequeue IdleAction = "requeue"
)

// BeyondReserve says what a non-preemptible tier's work does when it
// would take its tenant's non-preemptible GPUs beyond its reserve.
type BeyondReserve string

const (
	// BeyondReserveRun runs it all the same, on free GPUs or GPUs its
	// priority may take; beyond the reserve it is preemptible by other
	// tenants' reserve reclaims (and its tenant's limit). The default:
	// serving never waits while GPUs are free.
	BeyondReserveRun BeyondReserve = "run"
	// BeyondReserveWait keeps it waiting (Run:ai's rule: non-preemptible
	// work is scheduled in-quota only).
	BeyondReserveWait BeyondReserve = "wait"
)

// ResumeOrder says which of a tenant's held work resumes first when GPUs
// free up: among demands that the tiers, reservations, promotions and
// weighted shares leave equal.
type ResumeOrder string

const (
	// ResumeOrderPreemptedFirst resumes work preempted mid-run before work
	// that never started, so that progress already made is not left
	// waiting and preempted work completes; each group longest waiting
	// first.
	ResumeOrderPreemptedFirst ResumeOrder = "preempted-first"
	// ResumeOrderLongestWaiting resumes the longest-waiting work first,
	// whether it was preempted or never started.
	ResumeOrderLongestWaiting ResumeOrder = "longest-waiting"
)

// Policy is a resolved policy: every default filled in, every reference
// checked. Build one with Parse (or by hand in tests and simulations).
type Policy struct {
	Defaults Defaults
	Tiers    map[string]*Tier
	Tenants  map[string]*Tenant
	// Departments group tenants under a reserve and limit of their own
	// (department.go); nil or empty: none.
	Departments map[string]*Department
	Pools       map[string]*Pool
	Idle        []*IdleRule // in file order; the first matching rule applies
	Preemption  Preemption
	// Notify are the webhooks decisions are sent to, in file order
	// (notify.go).
	Notify []*Notify

	// Files lists the files the policy was read from, in order.
	Files []string
}

// Defaults holds how jobs name their tier and gang membership.
type Defaults struct {
	// Tier is the tier of jobs that name none (or name an unknown one).
	// When the policy sets none it is the lowest-priority tier.
	Tier string
	// TierMetaKey is the job meta key that names a job's tier.
	TierMetaKey string
	// GangMetaKey is the job meta key that, set to "true", makes all of a
	// job's allocations one gang: preempted together, resumed together.
	GangMetaKey string
	// CheckpointMetaKey is the job meta key that overrides the checkpoint
	// signal for one job ("none" opts out: the job is stopped without grace).
	CheckpointMetaKey string
	// UnnamedTiers are the tiers a namespace no tenant block names may
	// use (TenantOf); empty: Tier alone.
	UnnamedTiers []string
}

// Tier is a class of work with a Nomad priority.
type Tier struct {
	Name        string
	Priority    int  // Nomad job priority, 1..100
	Preemptible bool // false: never a victim
	// PreemptGrace caps the checkpoint grace of victims preempted for this
	// tier's work (rules priority, reclaim and backfill): work that cannot
	// wait, such as serving, sets it low or to 0. nil: no cap of its own,
	// Preemption.Grace (or a pool's grace) applies. A pointer, so that a
	// hand-built Tier without it keeps the policy's grace rather than 0.
	PreemptGrace *time.Duration
	// PreemptsReserved lists lower tiers whose work this tier's jobs may
	// preempt even within another tenant's reserve (as Kueue's
	// borrowWithinCohort lets a higher priority borrow from a cohort's
	// lower work). A reserve still protects that work from every other
	// tier, and its tenant's demands do not reclaim GPUs from this tier's
	// work in return (that would undo the one with the other). Empty: a
	// reserve protects all of its tenant's work from other tenants.
	PreemptsReserved []string
	// BeyondReserve is what work of a non-preemptible tier does beyond
	// its tenant's reserve: run (preemptible there by reserve reclaims) or
	// wait. "" (left out) is BeyondReserveRun. Preemptible
	// tiers ignore it.
	BeyondReserve BeyondReserve
	// Pools is a precedence of pools (names of pools with a node pool):
	// waiting work of the tier that runs in one of them goes to the first
	// with room for it now (Steward re-registers the job in that pool's
	// node pool), and back to an earlier one when room frees there. A
	// tenant's Pools, when set, replace it for the tenant's work.
	Pools []string
}

// WaitsBeyondReserve reports whether the tier's work waits rather than
// run beyond its tenant's reserve: a non-preemptible tier with
// beyond_reserve = "wait".
func (t *Tier) WaitsBeyondReserve() bool {
	return !t.Preemptible && t.BeyondReserve == BeyondReserveWait
}

// MayPreemptReserved reports whether this tier's work may preempt tier
// victim's work within another tenant's reserve.
func (t *Tier) MayPreemptReserved(victim string) bool {
	return slices.Contains(t.PreemptsReserved, victim)
}

// CapGrace returns the grace a victim freed for this tier's work gets when
// it would otherwise get grace: the lesser of grace and the tier's
// PreemptGrace.
func (t *Tier) CapGrace(grace time.Duration) time.Duration {
	if t.PreemptGrace != nil && *t.PreemptGrace < grace {
		return *t.PreemptGrace
	}
	return grace
}

// Tenant is a team, one Nomad namespace.
type Tenant struct {
	Name      string
	Namespace string  // defaults to Name
	Reserve   int     // GPUs guaranteed while it has demand
	Limit     int     // most GPUs it may hold, borrowing included; Unlimited if unset
	Weight    float64 // share of spare GPUs relative to other tenants
	// Tiers lists the tiers the tenant's jobs may use; empty: every tier.
	// A job naming another tier runs as DefaultTier (see TenantTier).
	Tiers []string
	// DefaultTier is the tier of the tenant's jobs that name none, or one
	// they may not use; "" resolves as TenantDefaultTier says.
	DefaultTier string
	// Pools is a precedence of pools for the tenant's work, replacing its
	// tiers' (Tier.Pools); empty: the tiers'.
	Pools []string
	// Quotas are its reserves and limits within pools, by pool name (a
	// pool block inside the tenant block): each holds in that pool's
	// nodes, beside the tenant-wide Reserve and Limit.
	Quotas map[string]*Quota
	// Unnamed marks the tenant of a namespace no tenant block names
	// (TenantOf): it may use only the policy's default tier.
	Unnamed bool
}

// Quota is a tenant's reserve and limit within one pool.
type Quota struct {
	Reserve int // GPUs of the pool guaranteed while it has demand there
	Limit   int // most GPUs of the pool it may hold; Unlimited if unset
}

// Pool is a set of nodes: a Nomad node pool, the nodes of some GPU models,
// or both. Its capacity may be kept for some tiers (owners): other tiers
// may backfill it and lose those GPUs at once when an owner needs them.
// Tenants may have a reserve and a limit in it (Tenant.Quotas).
type Pool struct {
	Name string
	// NodePool is the Nomad node pool; "" means every node pool. It
	// defaults to Name when Models is empty.
	NodePool string
	// Models are the GPU models of its nodes, as the device plugin names
	// them ("H100 80GB HBM3"); empty: every model.
	Models []string
	Owners []string // tier names the capacity is kept for; may be empty
	// Grace replaces the preemption grace for backfill taken back here.
	Grace time.Duration
	// Order is how the pool's waiting work is ordered among work the
	// tiers, reservations and priorities rank equal: "" (the default
	// order), or one of the PoolOrder values.
	Order PoolOrder
}

// PoolOrder orders a pool's waiting work by size, or by time alone.
type PoolOrder string

// Pool orders.
const (
	PoolOrderDefault       PoolOrder = ""
	PoolOrderLargestFirst  PoolOrder = "largest-first"
	PoolOrderSmallestFirst PoolOrder = "smallest-first"
	PoolOrderFIFO          PoolOrder = "fifo"
)

// PrecedenceOf is the pool precedence of a tenant's work in a tier: the
// tenant's when it has one, else the tier's; nil when neither has.
func (p *Policy) PrecedenceOf(t *Tenant, tier string) []string {
	if t != nil && len(t.Pools) > 0 {
		return t.Pools
	}
	if tr := p.Tiers[tier]; tr != nil {
		return tr.Pools
	}
	return nil
}

// Holds reports whether a node of nodePool with GPUs of model is in the
// pool.
func (p *Pool) Holds(nodePool, model string) bool {
	return (p.NodePool == "" || p.NodePool == nodePool) && (len(p.Models) == 0 || slices.Contains(p.Models, model))
}

// IdleRule releases GPUs held by work that does not use them.
type IdleRule struct {
	Name      string
	Tiers     []string // empty: every preemptible tier
	Tenants   []string // empty: every tenant
	Threshold float64  // percent GPU utilisation below which a GPU is idle
	After     time.Duration
	Mode      IdleMode
	Action    IdleAction
	// MaxSnooze caps a snooze of the rule for one job (`steward snooze
	// JOB 2h`): the rule does not reclaim the job's GPUs until the snooze
	// ends, at most this long after it was asked for. 0 allows no snooze.
	MaxSnooze time.Duration
	// WarnBefore: this long before the rule would release a job's GPUs
	// (After - WarnBefore into an idle stretch), Steward warns the job's
	// owners once per idle stretch (a task event, a webhook). 0: no
	// warning. Less than After.
	WarnBefore time.Duration
}

// Preemption holds the guards against pointless and repeated preemption.
type Preemption struct {
	MinRuntime       time.Duration
	Grace            time.Duration
	CheckpointSignal string // e.g. "SIGUSR1"; "" means no checkpoint signal
	MaxPerJobPerHour int    // 0: no cap
	// MaxPerJob is the most preemptions of one job over its life; a job
	// preempted that often is protected until it ends: only its tenant's
	// limit preempts it again, and it resumes only where it keeps no one
	// from what they are owed. 0: no bound (and in a hand-built policy).
	MaxPerJob   int
	ResumeOrder ResumeOrder // "" (in a hand-built policy) is DefaultResumeOrder
	// FairShareHalfLife, when above 0, orders waiting work of tenants the
	// rest of the order ranks equal by their decayed use of borrowed GPUs
	// (GPU-seconds beyond their reserve, halved every FairShareHalfLife;
	// Snapshot.Usage) per unit of weight, instead of their borrowed GPUs
	// now. 0: fair share over time is off (the default: a policy that does
	// not ask for it keeps its plans, and needs no remembered usage).
	FairShareHalfLife time.Duration
	// FairShareReclaimAbove, with FairShareHalfLife, lets a tenant waiting
	// to borrow GPUs preempt the borrowed work of a tenant that used more
	// than this many times its fair share over time, as long as the
	// waiting tenant then borrows no more per unit of weight than the
	// other keeps (so that the two never take GPUs back and forth). 0:
	// off (the default); else at least 1.
	FairShareReclaimAbove float64
	Promote               Promote
}

// Promote raises the priority of starved jobs.
type Promote struct {
	AfterPreemptions int           // 0: never by count
	AfterWait        time.Duration // 0: never by wait
	Boost            int           // priority points added
}

// TierOf returns the tier a job belongs to given the value of its tier meta
// key ("" when absent), and whether that value named a known tier.
func (p *Policy) TierOf(metaValue string) (*Tier, bool) {
	if t, ok := p.Tiers[metaValue]; ok {
		return t, true
	}
	return p.Tiers[p.Defaults.Tier], metaValue == ""
}

// TenantOf returns the tenant that a Nomad namespace belongs to. A namespace
// no tenant names is a tenant of its own with no reservation and no limit,
// that may use only the policy's default tier: anyone who may create a
// namespace (or a job in one the operator forgot) would otherwise get the
// top tier, preempts_reserved and all, by naming it in the job's meta.
//
// It is called per job and allocation on every control round: it walks
// the tenants without sorting them (a sorted copy per call was a tenth of
// the controller's time at 500 nodes), and the first name in order wins
// should two tenants claim the namespace (Validate refuses that).
func (p *Policy) TenantOf(namespace string) *Tenant {
	var found *Tenant
	var foundName string
	for name, t := range p.Tenants {
		if t.Namespace == namespace && (found == nil || name < foundName) {
			found, foundName = t, name
		}
	}
	if found != nil {
		return found
	}
	return p.UnnamedTenant(namespace)
}

// UnnamedTenant is the tenant of a namespace no tenant block names: reserve
// 0, no limit, weight 1, and only the policy's default tier unless
// defaults.unnamed_tiers lists others (then its default tier resolves as
// any tenant's: TenantDefaultTier).
func (p *Policy) UnnamedTenant(namespace string) *Tenant {
	t := &Tenant{Name: namespace, Namespace: namespace, Limit: Unlimited, Weight: DefaultTenantWeight, Unnamed: true,
		Tiers: p.Defaults.UnnamedTiers}
	if p.Defaults.Tier != "" && len(t.Tiers) == 0 {
		t.Tiers, t.DefaultTier = []string{p.Defaults.Tier}, p.Defaults.Tier
	}
	return t
}

// PoolOf returns the pool kept in a Nomad node pool, or nil.
func (p *Policy) PoolOf(nodePool string) *Pool {
	for _, name := range p.PoolNames() {
		if pl := p.Pools[name]; pl.NodePool == nodePool {
			return pl
		}
	}
	return nil
}

// IdleRuleFor returns the first idle rule that covers a tier and tenant.
func (p *Policy) IdleRuleFor(tier, tenant string) *IdleRule {
	for _, r := range p.Idle {
		if (len(r.Tiers) == 0 || contains(r.Tiers, tier)) && (len(r.Tenants) == 0 || contains(r.Tenants, tenant)) {
			if len(r.Tiers) == 0 {
				if t, ok := p.Tiers[tier]; ok && !t.Preemptible {
					continue
				}
			}
			return r
		}
	}
	return nil
}

// TierNames returns tier names by priority, highest first, then by name.
func (p *Policy) TierNames() []string {
	names := keys(p.Tiers)
	sort.SliceStable(names, func(i, j int) bool {
		return p.Tiers[names[i]].Priority > p.Tiers[names[j]].Priority
	})
	return names
}

// TenantNames returns tenant names sorted.
func (p *Policy) TenantNames() []string { return keys(p.Tenants) }

// PoolNames returns pool names sorted.
func (p *Policy) PoolNames() []string { return keys(p.Pools) }

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
