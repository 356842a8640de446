package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// StatusPath is the variable (in the state namespace) where the leader
// publishes what `steward status` prints for the whole cluster, and (in
// each tenant namespace with work) that namespace's view of it
// (status_views.go).
const StatusPath = "steward/status"

// Status is the cluster as Steward sees it after its latest round.
type Status struct {
	Updated time.Time `json:"updated"`
	Leader  string    `json:"leader"`
	// CheckAddress is where the leader answers `steward job check`.
	CheckAddress string         `json:"check_address,omitempty"`
	DryRun       bool           `json:"dry_run,omitempty"`
	Policy       string         `json:"policy"`
	Tenants      []TenantStatus `json:"tenants"`
	// Departments are the policy's departments (groups of tenants with a
	// reserve and a limit of their own); none without department blocks.
	Departments []DepartmentStatus `json:"departments,omitempty"`
	Held        []HeldStatus       `json:"held"`
	Idle        []IdleStatus       `json:"idle"`
	IdleGPUs    int                `json:"idle_gpus"`
	// HeldOmitted and IdleOmitted count the entries left out of Held
	// and Idle to keep the status within a variable's size (the longest
	// held, and the longest idle, are kept).
	HeldOmitted int        `json:"held_omitted,omitempty"`
	IdleOmitted int        `json:"idle_omitted,omitempty"`
	Decisions   []Decision `json:"decisions"`
	// Queue is every job waiting for GPUs, in the order the engine
	// would start them (cluster position 1 first), with its forecast.
	Queue []QueueEntry `json:"queue,omitempty"`
	// QueueOmitted counts the waiting jobs left out of Queue (its tail)
	// to keep the status within a variable's size.
	QueueOmitted int `json:"queue_omitted,omitempty"`
	// Warnings are job meta values Steward refused, and what it uses
	// instead, and GPUs of jobs an idle rule covers whose stats carry no
	// utilisation (gpurefusals.go).
	Warnings []JobWarning `json:"warnings,omitempty"`
	// Trimmed says what was left out of a status that would not fit a
	// variable even with its lists cut (fitStatus): empty when nothing
	// but the counted *Omitted entries was.
	Trimmed string `json:"trimmed,omitempty"`
}

// QueueEntry is one waiting job: where it stands, what blocks it, what
// would unblock it and when it is forecast to start. The controller fills
// it each round; `steward queue` and `steward status JOB` print it, and the
// job's record (nomad/jobs/<job>) carries the same figures as steward_*
// keys (steward_position, steward_forecast_p50, ...).
type QueueEntry struct {
	Job       string `json:"job"` // namespace/job
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	Tenant    string `json:"tenant"`
	Tier      string `json:"tier"`
	Priority  int    `json:"priority"`
	// GPUs the job waits for (all its waiting allocations together).
	GPUs int `json:"gpus"`
	// Position counts from 1: the next job the engine would start is 1.
	// TenantPosition is the same among its tenant's waiting jobs.
	Position       int       `json:"position"`
	TenantPosition int       `json:"tenant_position"`
	WaitingSince   time.Time `json:"waiting_since"`
	// Moved says where its owner moved it among its tenant's waiting
	// jobs (steward queue move), when they did.
	Moved string `json:"moved,omitempty"`
	// Rule and Reason: what blocks it, with the numbers.
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Unblock says what would let it start ("starts now if it asks for 2
	// GPUs instead of 4", "starts when research/train ends, or at 14:30
	// when its min_runtime passes"), one line each.
	Unblock []string `json:"unblock,omitempty"`
	// ForecastP50 and ForecastP90 are the forecast start times (zero: no
	// forecast, e.g. a GPU model no node has). ForecastNote says what the
	// forecast rests on ("run times from steward.expected_runtime of 3 of
	// 5 running jobs; similar jobs for the rest"). omitzero: with no
	// forecast, JSON (steward queue -json) leaves them out rather than
	// saying "0001-01-01T00:00:00Z" (omitempty never omits a struct).
	ForecastP50  time.Time `json:"forecast_p50,omitzero"`
	ForecastP90  time.Time `json:"forecast_p90,omitzero"`
	ForecastNote string    `json:"forecast_note,omitempty"`
	// QueueLength and TenantQueueLength are how many jobs wait in the
	// cluster and in its tenant ("3 of 12").
	QueueLength       int `json:"queue_length,omitempty"`
	TenantQueueLength int `json:"tenant_queue_length,omitempty"`
}

// JobWarning is one refused meta value of a job.
type JobWarning struct {
	Job     string `json:"job"`
	Problem string `json:"problem"`
}

// TenantStatus is one tenant's GPUs.
type TenantStatus struct {
	Tenant   string `json:"tenant"`
	Reserve  int    `json:"reserve"`
	Limit    int    `json:"limit"` // -1: none
	InUse    int    `json:"in_use"`
	Borrowed int    `json:"borrowed"`
	Pending  int    `json:"pending"`
	// Note says why the tenant stays over its limit (the eviction cap).
	Note string `json:"note,omitempty"`
	// With fair share over time (preemption.fair_share_half_life): the
	// tenant's decayed use of borrowed GPUs, in GPU-hours, its fair share
	// (its weight over the weights of the tenants that used, hold or wait
	// for GPUs) and its part of their decayed use. These drift every
	// round: a change of them alone publishes no status (writeStatus).
	UsageGPUHours float64 `json:"fair_share_usage_gpu_hours,omitempty"`
	FairShare     float64 `json:"fair_share,omitempty"`
	UsedShare     float64 `json:"used_share,omitempty"`
}

// DepartmentStatus is one department's GPUs: its tenants' together.
type DepartmentStatus struct {
	Department string   `json:"department"`
	Tenants    []string `json:"tenants"`
	Reserve    int      `json:"reserve"`
	Limit      int      `json:"limit"` // -1: none
	InUse      int      `json:"in_use"`
	Pending    int      `json:"pending"`
	// With fair share over time, as TenantStatus's: its tenants' decayed
	// use of borrowed GPUs together, its fair share among departments
	// (and tenants in none), and its part of their decayed use.
	UsageGPUHours float64 `json:"fair_share_usage_gpu_hours,omitempty"`
	FairShare     float64 `json:"fair_share,omitempty"`
	UsedShare     float64 `json:"used_share,omitempty"`
}

// HeldStatus is a job group Steward holds.
type HeldStatus struct {
	Job    string    `json:"job"`
	Group  string    `json:"group"`
	Count  int       `json:"count"`
	GPUs   int       `json:"gpus"`
	State  string    `json:"state"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
	// Scaling says what Steward did to the group's scaling policy (the
	// Nomad Autoscaler's) while it holds the group; empty when it has none.
	Scaling string `json:"scaling,omitempty"`
}

// IdleStatus is an allocation whose GPUs are under its idle threshold.
type IdleStatus struct {
	Job     string  `json:"job"`
	Alloc   string  `json:"alloc"`
	GPUs    int     `json:"gpus"`
	Minutes int     `json:"minutes"`
	Util    float64 `json:"util"`
	// Snoozed says when a snooze of the job's idle rule keeps it from
	// reclaiming the allocation: "idle reclaim snoozed until 15:30 UTC by
	// request ...".
	Snoozed string `json:"snoozed,omitempty"`
}

// buildStatus summarises a round.
func buildStatus(pol *policy.Policy, r *round, states []*JobState, usage map[string][]engine.Sample, decisions []Decision) Status {
	s := Status{Updated: r.now, Policy: policySummary(pol), Decisions: append([]Decision(nil), decisions...), Queue: r.queue}
	if r.plan != nil {
		for _, t := range r.plan.Tenants {
			s.Tenants = append(s.Tenants, TenantStatus{Tenant: t.Tenant, Reserve: t.Reserve, Limit: t.Limit,
				InUse: t.InUse, Borrowed: t.Borrowed(), Pending: t.Waiting, Note: t.Note,
				UsageGPUHours: t.UsageGPUHours, FairShare: t.FairShare, UsedShare: t.UsedShare})
		}
		for _, d := range r.plan.Departments {
			s.Departments = append(s.Departments, DepartmentStatus{Department: d.Department, Tenants: d.Tenants,
				Reserve: d.Reserve, Limit: d.Limit, InUse: d.InUse, Pending: d.Waiting,
				UsageGPUHours: d.UsageGPUHours, FairShare: d.FairShare, UsedShare: d.UsedShare})
		}
	}
	for _, st := range states {
		job := r.obs.Jobs[st.key()]
		for g, h := range st.Held {
			if h.Count == 0 {
				continue // resumed; kept until Nomad shows it
			}
			gpus := 0
			if job != nil {
				gpus = h.Count * job.Groups[g].GPUsPerAlloc
			}
			state := st.Status
			if st.Paused {
				state = StatusPaused
			}
			s.Held = append(s.Held, HeldStatus{Job: st.key().String(), Group: g, Count: h.Count, GPUs: gpus,
				State: state, Since: h.Since, Reason: st.Reason, Scaling: h.scalingNote()})
		}
	}
	sort.Slice(s.Held, func(i, k int) bool {
		if s.Held[i].Job != s.Held[k].Job {
			return s.Held[i].Job < s.Held[k].Job
		}
		return s.Held[i].Group < s.Held[k].Group
	})
	snoozed := map[jobKey]*JobState{}
	for _, st := range states {
		if st.Snooze != nil {
			snoozed[st.key()] = st
		}
	}
	for _, a := range r.obs.Allocs {
		job := r.obs.Jobs[jobKey{a.Namespace, a.JobID}]
		if job == nil {
			continue
		}
		threshold := 10.0
		if rule := pol.ResolveJob(job.Namespace, job.Meta).IdleRule; rule != nil {
			threshold = rule.Threshold
		}
		samples := usage[a.ID]
		since, ok := engine.IdleSince(samples, threshold)
		if !ok {
			continue
		}
		s.IdleGPUs += len(a.GPUIDs)
		is := IdleStatus{Job: jobKey{a.Namespace, a.JobID}.String(), Alloc: a.ID, GPUs: len(a.GPUIDs),
			Minutes: int(r.now.Sub(since) / time.Minute), Util: samples[len(samples)-1].Util}
		if st := snoozed[jobKey{a.Namespace, a.JobID}]; st != nil {
			is.Snoozed = snoozeRecord(pol, st, job, r.now)
		}
		s.Idle = append(s.Idle, is)
	}
	return s
}

// writeStatus publishes the round for `steward status` when it changed.
func (p *publisher) writeStatus(ctx context.Context, r *round, pol *policy.Policy) {
	s := buildStatus(pol, r, p.store.sortedStates(), p.usage().samples(pol), p.decisions())
	s.Leader, s.DryRun = p.cfg().Identity, p.cfg().DryRun
	p.metrics.idleGPUs.Set(float64(s.IdleGPUs))
	s.Warnings = append(append(p.meta.warnings(), p.sampler.activityJobWarnings()...), p.sampler.gpuRefused.jobWarnings()...)
	s.CheckAddress = p.checkAddr()
	cmp := withoutFairFigures(s)
	cmp.Updated = time.Time{}
	b, _ := json.Marshal(cmp)
	if p.statusOut == string(b) {
		return
	}
	// Idle minutes and utilisation change all the time: a change of
	// them alone is published at most every statusVolatileEvery, not at
	// every round.
	if p.statusStable == stableStatus(s) && r.now.Sub(p.statusAt) < statusVolatileEvery {
		return
	}
	// At most every statusEvery: at scale rounds follow each other, each
	// with a decision or two, and a write per round is a Raft write a
	// second for a view people read now and then.
	if !p.statusAt.IsZero() && r.now.Sub(p.statusAt) < statusEvery {
		r.wake(p.statusAt.Add(statusEvery))
		return
	}
	// Each namespace's view, cut before the cluster's status is trimmed
	// to fit (status_views.go).
	views := p.buildViews(r, &s, func(ns string) string { return pol.TenantOf(ns).Name })
	p.publishViews(ctx, views, s.Leader, s.CheckAddress)
	full := fitStatus(&s, statusMaxBytes)
	if !p.statusKnown {
		_, index, err := p.nomad().GetVar(ctx, p.cfg().StateNamespace, StatusPath)
		if err != nil {
			p.log().Error("read status", "error", err)
			return
		}
		p.statusIndex, p.statusKnown = index, true
	}
	index, err := p.nomad().PutVar(ctx, p.cfg().StateNamespace, StatusPath, map[string]string{"status": string(full)}, true, p.statusIndex)
	if err != nil {
		// A conflict: another controller wrote it; learn its index next time.
		p.statusKnown = false
		p.log().Error("publish status", "error", err)
		return
	}
	p.statusOut, p.statusIndex = string(b), index
	p.statusStable, p.statusAt = stableStatus(s), r.now
}

// statusMaxBytes keeps the status within a Nomad variable (64 KiB), with
// room for the encoding's overhead.
const statusMaxBytes = 60 << 10

// statusVolatileEvery is how often a status that changed only in idle
// minutes and utilisation is published; statusEvery how often one that
// changed otherwise is, at most.
const (
	statusVolatileEvery = time.Minute
	statusEvery         = 5 * time.Second
)

// stableStatus is the status without its time and the idle figures that
// change at every sample, for telling a real change from drift.
func stableStatus(s Status) string {
	s = withoutFairFigures(s)
	s.Updated = time.Time{}
	s.Idle = slices.Clone(s.Idle)
	for i := range s.Idle {
		s.Idle[i].Minutes, s.Idle[i].Util = 0, 0
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// withoutFairFigures is the status without the tenants' fair-share
// figures, which drift every round while tenants borrow and decay for ever
// after: they are published with the status when something else changes,
// never on their own, so that nothing is written as time passes.
func withoutFairFigures(s Status) Status {
	s.Tenants = slices.Clone(s.Tenants)
	for i := range s.Tenants {
		s.Tenants[i].UsageGPUHours, s.Tenants[i].FairShare, s.Tenants[i].UsedShare = 0, 0, 0
	}
	s.Departments = slices.Clone(s.Departments)
	for i := range s.Departments {
		s.Departments[i].UsageGPUHours, s.Departments[i].FairShare, s.Departments[i].UsedShare = 0, 0, 0
	}
	return s
}

// fitStatus encodes the status within limit bytes. When it is over, each
// list is cut to its share of the limit: the newest decisions (a quarter),
// the groups held longest (a quarter), the allocations idle longest (three
// sixteenths), the head of the queue (a quarter), the rest counted in
// HeldOmitted, IdleOmitted and QueueOmitted; then, if still over, older
// decisions go.
func fitStatus(s *Status, limit int) []byte {
	clipQuoted(s)
	full, _ := json.Marshal(s)
	if len(full) <= limit {
		return full
	}
	sort.SliceStable(s.Idle, func(i, k int) bool { return s.Idle[i].Minutes > s.Idle[k].Minutes })
	sort.SliceStable(s.Held, func(i, k int) bool { return s.Held[i].Since.Before(s.Held[k].Since) })
	slices.Reverse(s.Decisions) // newest first, to keep a prefix
	s.Decisions = s.Decisions[:fitting(s.Decisions, limit/4)]
	slices.Reverse(s.Decisions)
	if n := fitting(s.Held, limit/4); n < len(s.Held) {
		s.HeldOmitted, s.Held = len(s.Held)-n, s.Held[:n]
	}
	if n := fitting(s.Idle, limit*3/16); n < len(s.Idle) {
		s.IdleOmitted, s.Idle = len(s.Idle)-n, s.Idle[:n]
	}
	if n := fitting(s.Queue, limit/4); n < len(s.Queue) {
		s.QueueOmitted, s.Queue = len(s.Queue)-n, s.Queue[:n] // its head: the next to start
	}
	sort.SliceStable(s.Held, func(i, k int) bool {
		if s.Held[i].Job != s.Held[k].Job {
			return s.Held[i].Job < s.Held[k].Job
		}
		return s.Held[i].Group < s.Held[k].Group
	})
	full, _ = json.Marshal(s)
	for len(full) > limit && len(s.Decisions) > 0 {
		s.Decisions = s.Decisions[len(s.Decisions)/2+1:]
		full, _ = json.Marshal(s)
	}
	if len(full) > limit && len(s.Warnings) > 0 {
		// Warnings last: one per refused meta value, as many as tenants
		// make; each job's record says its own.
		n := fitting(s.Warnings, limit/8)
		s.Trimmed = trimmedMarker(limit, len(s.Warnings)-n)
		s.Warnings = s.Warnings[:n]
		full, _ = json.Marshal(s)
	}
	for len(full) > limit {
		// Nothing left to cut but what no list holds (tenants): say so
		// rather than publish nothing.
		s.Held, s.Idle, s.Queue, s.Decisions, s.Warnings = nil, nil, nil, nil, nil
		s.Trimmed = fmt.Sprintf("status over %d bytes even with its lists cut: only the tenants are shown", limit)
		full, _ = json.Marshal(s)
		if len(full) > limit {
			if len(s.Tenants) == 0 {
				break // the operator's own policy summary: theirs to shorten
			}
			s.Tenants = s.Tenants[:len(s.Tenants)/2]
		}
	}
	return full
}

// fitting is how many of a list's first entries encode within budget
// bytes.
func fitting[T any](list []T, budget int) int {
	used := 2 // []
	for i, v := range list {
		b, _ := json.Marshal(v)
		if used += len(b) + 1; used > budget {
			return i
		}
	}
	return len(list)
}

// ReadStatus reads the status the leader published.
func ReadStatus(ctx context.Context, n Nomad, namespace string) (*Status, error) {
	items, _, err := n.GetVar(ctx, namespace, StatusPath)
	if err != nil {
		return nil, err
	}
	if items == nil {
		return nil, fmt.Errorf("no status at %s@%s: is steward controller running (and leading)?", StatusPath, namespace)
	}
	var s Status
	if err := json.Unmarshal([]byte(items["status"]), &s); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	return &s, nil
}
