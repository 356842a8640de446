package controller

import (
	"errors"
	"fmt"
	"github.com/hashicorp/nomad/api"
	"sort"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// round is one pass of the control loop: one observation, one plan.
type round struct {
	now  time.Time
	obs  *Observation
	plan *engine.Plan
	// queue is the waiting jobs in the plan's order, with the latest
	// forecast (forecast.go).
	queue []QueueEntry

	// alive holds the observed allocations' IDs, and short their IDs
	// by the short form states keep (shortID).
	alive map[string]bool
	short map[string][]string
	byID  map[string]*ObservedAlloc
	live  map[jobKey]map[string]int // running allocations per job and group
	// written: per allocation ID and task, when it said through its
	// checkpoint-written file that its checkpoint is written (the poll's
	// answers, written_poll.go), taken by finishDrains.
	writtenFiles map[string]map[string]time.Time
	// forDraining marks jobs that victims are being checkpointed for
	// (until their grace is over).
	forDraining map[string]bool
	// marked: beneficiaries whose plan earmarks a victim's state holds.
	marked map[engine.JobRef]bool
	// unmarked: placeholders (by ID) on GPUs the plan gave to urgent
	// work (Plan.Unmarked): purged this round.
	unmarked map[string]bool

	// inflight: per job and group, allocations resumed but not yet placed
	// (counted in the engine's held demand for the group).
	inflight map[jobKey]map[string]int
	resumed  map[jobKey]map[string]bool // groups the plan resumed
	// taken: batch groups whose completed allocations a write of this
	// round already took out of their held original count (takeDone).
	taken map[jobKey]map[string]bool

	// indexes are jobs' modify indexes after Steward's own writes in this
	// round: the next write to the same job is conditional on them.
	indexes map[jobKey]uint64
	// counts are groups' counts as Steward's own writes in this round left
	// them (count).
	counts map[jobKey]map[string]int
	// priorities are jobs' priorities as Steward's own writes in this
	// round set them: the record says the priority the job now has, not
	// the one it had, and is not written again when Nomad shows it.
	priorities map[jobKey]int
	// written is the newest Nomad index Steward's writes to jobs in this
	// round returned (a scale, a re-registration, an allocation stop): the
	// next plan waits until the cache holds it (clusterCache.settle).
	written uint64

	// pending is the message about the action being carried out on a
	// job, put into its state with the save that records it
	// (attachNotice); attached is what went there. By job: different
	// jobs' actions run at once (actplan.go).
	pending, attached map[jobKey]*Notice

	wakeAt time.Time // earliest time something is due
	failed int       // Nomad calls that failed
	acted  int       // actions carried out
	// pressureSince is when the event that started this round's pressure
	// arrived (zero when the round was not triggered by one).
	pressureSince time.Time
	pressureTaken bool // a decision's latency was measured from it
	// pressed: new work blocked while the round ran (after its plan),
	// and waits for the round's end to be planned (publishdefer.go).
	pressed bool
}

func newRound(now time.Time, obs *Observation, states map[jobKey]*JobState) *round {
	r := &round{now: now, obs: obs, alive: map[string]bool{}, short: map[string][]string{}, byID: map[string]*ObservedAlloc{}, live: map[jobKey]map[string]int{}, forDraining: map[string]bool{}, pending: map[jobKey]*Notice{}, attached: map[jobKey]*Notice{},
		inflight: inflightResumes(obs, states), resumed: map[jobKey]map[string]bool{}}
	for i, a := range obs.Allocs {
		r.alive[a.ID] = true
		r.byID[a.ID] = &obs.Allocs[i]
		r.short[shortID(a.ID)] = append(r.short[shortID(a.ID)], a.ID)
		k := jobKey{a.Namespace, a.JobID}
		if r.live[k] == nil {
			r.live[k] = map[string]int{}
		}
		r.live[k][a.Group]++
	}
	for _, st := range states {
		for _, d := range st.Draining {
			// A finished drain's victims are being stopped: the
			// beneficiary is resumed now, so that its evaluation is
			// Nomad's to retry when their GPUs free up, rather than
			// queued only after other work took them.
			if d.For != "" && !d.Finished {
				r.forDraining[d.For] = true
			}
		}
	}
	return r
}

// jobIndex is the modify index a write to the job is conditional on.
func (r *round) jobIndex(k jobKey) uint64 {
	if i, ok := r.indexes[k]; ok {
		return i
	}
	if j := r.obs.Jobs[k]; j != nil {
		return j.ModifyIndex
	}
	return 0
}

// settleTimeout bounds the wait for Nomad to carry out a round's writes
// (clusterCache.settle) before the cluster is read in full instead.
const settleTimeout = 2 * time.Second

func (r *round) setJobIndex(k jobKey, i uint64) {
	if r.indexes == nil {
		r.indexes = map[jobKey]uint64{}
	}
	r.indexes[k] = i
	r.wrote(i)
}

// count is a group's count less its completed batch allocations (which no
// count Steward writes includes: takeDone), as Steward's own writes in
// this round left it, or else as observed. Every count written derives
// from it. Derived from the count observed instead, the second of two
// writes to one group in one round undid the first: a plan that holds
// part of a group for GPUs its victims are freeing and the rest for GPUs
// that are not free wrote count-1 twice, so one allocation was neither
// held nor placed, and Steward, seeing a count it had not written, gave
// the group to its owner at that count (found by the soak, seed 41).
func (r *round) count(k jobKey, g string) int {
	if c, ok := r.counts[k][g]; ok {
		return c
	}
	if j := r.obs.Jobs[k]; j != nil {
		return j.Groups[g].Count - r.done(k, g)
	}
	return 0
}

// setCount notes the count a write of this round set a group to (count).
func (r *round) setCount(k jobKey, g string, count int) {
	if r.counts == nil {
		r.counts = map[jobKey]map[string]int{}
	}
	if r.counts[k] == nil {
		r.counts[k] = map[string]int{}
	}
	r.counts[k][g] = count
}

// wrote notes a write at a Nomad index (0: none returned).
func (r *round) wrote(index uint64) { r.written = max(r.written, index) }

func (r *round) allocAlive(id string) bool { return r.alive[id] }

// alloc is the observed allocation with the ID, nil when none is.
func (r *round) alloc(id string) *ObservedAlloc { return r.byID[id] }

// aliveOf returns the full IDs of job k's observed allocations that a
// state names (short or full IDs, as states saved by earlier versions
// hold). Only k's own allocations match: a short ID is 8 hex digits, and
// another tenant's allocation sharing the prefix must never be signalled
// or stopped for this job's preemption.
func (r *round) aliveOf(k jobKey, stored []string) []string {
	var out []string
	for _, s := range stored {
		for _, id := range r.short[shortID(s)] {
			if a := r.byID[id]; a != nil && ownedBy(a, k) && sameID(s, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// ownedBy reports whether the allocation belongs to job k.
func ownedBy(a *ObservedAlloc, k jobKey) bool      { return a.Namespace == k.Namespace && a.JobID == k.ID }
func (r *round) liveAllocs(k jobKey, g string) int { return r.live[k][g] }

// overCount reports whether a job's group (every group: "") runs more
// allocations than its count: Nomad has not yet stopped what a lowered
// count leaves over (buildSnapshot: leaving), so a preemption that lowered
// it is kept until it has.
func (r *round) overCount(k jobKey, group string) bool {
	j := r.obs.Jobs[k]
	if j == nil || j.Stopped {
		return false
	}
	for g, spec := range j.Groups {
		if (group == "" || g == group) && r.live[k][g] > spec.Count-r.obs.Done[k][g] {
			return true
		}
	}
	return false
}
func (r *round) beneficiaryDraining(j engine.JobRef) bool {
	return r.forDraining[j.String()]
}

// wake asks for another round no later than t.
func (r *round) wake(t time.Time) {
	if r.wakeAt.IsZero() || t.Before(r.wakeAt) {
		r.wakeAt = t
	}
}

// takeDone is how many completed allocations of a batch group a count
// Steward is about to write must leave out (Observation.Done): Nomad
// counts them in the group's count as observed, and ignores them once the
// write makes a new job version, placing the count anew; written with
// them, the completed work would run again. They leave the group's held
// original count too, once per round (every count written in a round
// derives from the count observed, which has them), and the hold notes
// how many it took (Held.Taken) for syncHolds to finish the write.
//
// Call it once the write is certain, before the hold it adds to is
// recorded (a new hold's original is the count less them) and the state
// saved; a new hold then notes them (Held.Taken) as its caller sets it.
func (r *round) takeDone(st *JobState, g string) int {
	k := st.key()
	d := r.obs.Done[k][g]
	if h := st.Held[g]; h != nil && !r.taken[k][g] {
		h.Taken = d
	}
	if d == 0 || r.taken[k][g] {
		return d
	}
	r.tookDone(k, g)
	if h := st.Held[g]; h != nil {
		h.Original = max(h.Original-d, 0)
		h.Count = min(h.Count, h.Original)
	}
	return d
}

// tookDone notes that a batch group's completed allocations are out of its
// held original count for this round (takeDone).
func (r *round) tookDone(k jobKey, g string) {
	if r.taken == nil {
		r.taken = map[jobKey]map[string]bool{}
	}
	if r.taken[k] == nil {
		r.taken[k] = map[string]bool{}
	}
	r.taken[k][g] = true
}

// anew reports whether a count Steward writes for a batch group by
// re-registering the job (a resume ahead of Nomad's queue, a count with
// its scaling policy) needs a new job version made first
// (Controller.leaveDoneOut). Every count written leaves the group's
// completed allocations out (takeDone) because a new version makes Nomad
// ignore them. A scale always makes one (Nomad's state store bumps the
// version of every job it writes), but a registration whose job is
// unchanged writes nothing (Job.Register, SpecChanged, nomad v1.11.3), so
// Nomad would go on counting the completed allocations and place nothing.
// That happens to a resume of as many allocations as have completed
// since the last version (held 2, resumed 1, which completed: the other's
// resume writes count 1 again). Found by the soak (docs/soak.md).
func (r *round) anew(k jobKey, group string, count int) bool {
	job := r.obs.Jobs[k]
	if job == nil || r.done(k, group) == 0 {
		return false
	}
	spec, ok := job.Groups[group]
	return ok && spec.Count == count
}

// endedVictims is how many of a drain's victims finished by themselves
// (Observation.Ended), whatever version of their job they ran.
func (r *round) endedVictims(k jobKey, d *Drain) int {
	n := 0
	for _, short := range d.Allocs {
		if endedIn(r.obs.Ended, k, short) {
			n++
		}
	}
	return n
}

// endedIn reports whether the allocation short names (shortID) is among
// ended (Observation.Ended) as job k's.
func endedIn(ended map[string]jobKey, k jobKey, short string) bool {
	for id, owner := range ended {
		if owner == k && sameID(short, id) {
			return true
		}
	}
	return false
}

// done is how many completed allocations of a batch group Nomad counts in
// its count as observed (Observation.Done).
func (r *round) done(k jobKey, g string) int { return r.obs.Done[k][g] }

// rerun refuses a write that would make Nomad run a batch job's completed
// work again: any write to a job makes a new version, and Nomad then
// ignores the completed allocations of every group (Observation.Done).
// Only the group whose count the write sets (groups: one) can leave its
// own out (takeDone); completed allocations of another group would be
// placed again. Such a write (a multi-group batch job, part of it
// completed; a re-registration for a priority or a node pool, which keeps
// the counts) is not made: the job stays as it is, its completed work
// done.
func (r *round) rerun(k jobKey, groups ...string) error {
	names := make([]string, 0, len(r.obs.Done[k]))
	// A sysbatch job's completed allocations run again at any new
	// version, those of the group scaled too (systemjobs.go).
	sysbatch := r.obs.Jobs[k] != nil && r.obs.Jobs[k].Type == api.JobTypeSysbatch
	for g, d := range r.obs.Done[k] {
		if d > 0 && (sysbatch || len(groups) != 1 || groups[0] != g) {
			names = append(names, g)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	what := "re-registering the job makes a new version of it"
	switch {
	case len(groups) == 1:
		what = "scaling group " + groups[0] + " makes a new version of the job"
	case len(groups) > 1:
		what = "scaling groups " + strings.Join(groups, ", ") + " one at a time makes new versions of the job"
	}
	var parts []string
	for _, g := range names {
		parts = append(parts, fmt.Sprintf("%s of group %s", plural(r.obs.Done[k][g], "completed allocation"), g))
	}
	return fmt.Errorf("%w: %s, and Nomad would run the %s again: Steward leaves the job as it is", errRerun, what, strings.Join(parts, " and "))
}

// errRerun: a write refused because it would run completed batch work
// again (round.rerun).
var errRerun = errors.New("refused")

// drainGroups are the groups a drain of group ("": the whole job, every
// GPU group) scales, one write each (finishDrain).
func drainGroups(job *ObservedJob, group string) []string {
	if group != "" {
		return []string{group}
	}
	var out []string
	for g, spec := range job.Groups {
		if spec.GPUsPerAlloc > 0 && spec.Count > 0 {
			out = append(out, g)
		}
	}
	sort.Strings(out)
	return out
}
