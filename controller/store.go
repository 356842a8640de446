package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// The store: every job's state, read at the start of a term, kept in
// memory, and written (check-and-set) before the action it describes.

// stateStore owns the jobs' states as written: what was saved and at
// which index (check-and-set), whether they must be read again, the
// backoff of refused writes, and the states waiting for their job's long
// ID (statebounds.go), and the map of states itself: every duty reads it
// through states(), and the store alone replaces it, at each reset.
type stateStore struct {
	wiring
	byJob map[jobKey]*JobState // the jobs' states (states)

	saved map[jobKey]string // JSON last written, to skip unchanged writes
	index map[jobKey]uint64 // modify index of each state variable, for check-and-set
	// reload: a check-and-set write failed, so what this controller holds
	// in memory may be stale; the next round reads every state afresh.
	reload bool
	// writes backs off writes Nomad refused with a 4xx (backoff.go).
	writes *writeBackoff
	// stateErr is why a job's state was too large to save (bounds.go);
	// unresolved are states saved under a hashed job ID, by path.
	stateErr   map[jobKey]string
	unresolved map[string]unresolvedState

	// inFlight: the states being written now, each closed once written
	// (writing).
	inFlight map[jobKey]chan struct{}

	// prefetch: the states a follower read ahead (store_prefetch.go).
	prefetch statePrefetch

	usage   *usageStore
	metrics *metrics
	// forgotten runs at each reset: the publisher forgets what it wrote
	// to the jobs' records, as a new term writes them afresh (given by
	// giveDuties once the publisher, which reads the store, is made).
	forgotten func()
}

func newStateStore(c *Controller) *stateStore {
	return &stateStore{wiring: c.wiring, usage: c.usage, metrics: c.metrics}
}

// states are the jobs' states, by job: the map the store holds now (a
// reset replaces it, so keep the call, not the map, across one).
func (s *stateStore) states() map[jobKey]*JobState { return s.byJob }

// resetState forgets every state: a term reads them afresh.
func (s *stateStore) resetState() {
	s.byJob = map[jobKey]*JobState{}
	s.saved = map[jobKey]string{}
	s.index = map[jobKey]uint64{}
	s.forgotten()
	s.writes = newWriteBackoff(s.log())
	s.stateErr = map[jobKey]string{}
	s.unresolved = map[string]unresolvedState{}
}

// loadStates reads every job state the controller (or a previous leader)
// wrote, from the state namespace only.
func (s *stateStore) loadStates(ctx context.Context) (err error) {
	s.resetState()
	s.reload = false
	defer func() {
		if err != nil {
			// Half loaded is not loaded: the next round reads them all
			// again rather than act on what it has.
			s.resetState()
			s.reload = true
		}
	}()
	refs, err := s.nomad().ListVars(ctx, s.cfg().StateNamespace, statePrefix)
	if err != nil {
		return err
	}
	var newer []string
	refs = slices.DeleteFunc(refs, func(ref VarRef) bool { return ref.Namespace != s.cfg().StateNamespace })
	read, reused, err := s.readListed(ctx, refs, s.takePrefetched())
	if err != nil {
		return err
	}
	for i, ref := range refs {
		items, index := read[i].items, read[i].index
		if items == nil {
			continue
		}
		st, err := decodeState(items)
		if errors.Is(err, errNewerState) {
			s.log().Error("job state written by a newer controller: this one will not lead", "path", ref.Path, "error", err)
			newer = append(newer, ref.Path)
			continue
		}
		if err != nil {
			s.log().Error("ignoring unreadable job state", "namespace", ref.Namespace, "path", ref.Path, "error", err)
			continue
		}
		if st.IDHash != "" && st.ID == "" && ref.Path == statePrefix+"~~"+st.IDHash[:min(40, len(st.IDHash))] {
			// An ID too long to save: the job it names is known when
			// Nomad shows it (resolveStates).
			s.unresolved[ref.Path] = unresolvedState{st: st, index: index}
			continue
		}
		k, err := stateKey(ref.Path, st)
		if err != nil {
			s.log().Error("ignoring job state", "namespace", ref.Namespace, "error", err)
			continue
		}
		st.Namespace, st.ID = k.Namespace, k.ID
		s.states()[k] = st
		s.index[k] = index
		if b, err := st.stableJSON(s.now()); err == nil {
			s.saved[k] = b
		}
		for short, idle := range st.Idle {
			s.usage.restore(short, idle)
		}
		for id, samples := range st.Usage {
			s.usage.restoreHistory(id, samples)
		}
		st.Usage = nil // saved as Idle from now on
		st.pacePendingStops(s.now())
	}
	if len(newer) > 0 {
		s.metrics.schemaRefusals.WithLabelValues("state").Add(float64(len(newer)))
		return fmt.Errorf("%w: %d job states (%s, ...) are of a schema newer than %d: refusing to lead; "+
			"upgrade this controller (docs/operations.md, \"Upgrades\")", errNewerState, len(newer), clip(newer[0], quoteMax), stateSchema)
	}
	s.log().Info("loaded controller state", "jobs", len(s.states()), "schema", stateSchema, "read_ahead", reused)
	return nil
}

// stateReads is how many job states a new leader reads at once: one at a
// time, a thousand states took seconds of a failover at 250 nodes.
const stateReads = 16

type readState struct {
	items map[string]string
	index uint64
}

// readStates reads the variables refs name, stateReads at a time, in
// refs' order.
func (s *stateStore) readStates(ctx context.Context, refs []VarRef) ([]readState, error) {
	out := make([]readState, len(refs))
	errs := make([]error, len(refs))
	inParallel(len(refs), stateReads, func(i int) {
		out[i].items, out[i].index, errs[i] = s.nomad().GetVar(ctx, refs[i].Namespace, refs[i].Path)
	})
	for _, err := range errs {
		if err != nil {
			return nil, err // the first: an outage fails every read alike
		}
	}
	return out, nil
}

// state returns the job's state, creating an empty one.
func (s *stateStore) state(k jobKey) *JobState {
	st := s.states()[k]
	if st == nil {
		st = &JobState{Namespace: k.Namespace, ID: k.ID}
		s.states()[k] = st
	}
	return st
}

func (s *stateStore) sortedStates() []*JobState {
	out := make([]*JobState, 0, len(s.states()))
	for _, st := range s.states() {
		out = append(out, st)
	}
	sort.Slice(out, func(i, k int) bool {
		a, b := out[i].key(), out[k].key()
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.ID < b.ID
	})
	return out
}

// save writes a job's state now (before the action it describes).
func (s *stateStore) save(ctx context.Context, st *JobState) error {
	k := st.key()
	if s.cfg().DryRun {
		return nil
	}
	// One write of a state at a time: a check-and-set on the index the
	// other has not returned yet would fail (actions run at once: actlock.go).
	defer s.writing(ctx, k)()
	now := s.now()
	if st.empty(now) && st.Status == "" {
		if _, ok := s.saved[k]; ok {
			return s.forget(ctx, k)
		}
		if !st.waits() {
			delete(s.states(), k) // nothing to remember, in memory either
		}
		return nil
	}
	b, err := st.stableJSON(now)
	if err != nil {
		return err
	}
	if s.unchanged(k, b, now) {
		return nil
	}
	items, err := st.encode()
	if err != nil {
		s.stateTooBig(k, err)
		return err
	}
	index, err := s.nomad().PutVar(ctx, s.cfg().StateNamespace, statePath(k), items, true, s.index[k])
	if err != nil {
		s.casFailed(k, err)
		return err
	}
	delete(s.stateErr, k)
	s.saved[k], s.index[k] = b, index
	return nil
}

// States are written when something is decided, not as the cluster goes
// on: what changes without a decision is kept in memory and saved with
// the next write that has a reason of its own. At most one state write per
// job and round follows from it: the write-ahead record of a decision is
// the write, and what the action's outcome adds to it is of the kinds
// below, which a restarted controller rebuilds from that record and from
// what Nomad shows.
//   - A group that only waits in Nomad's queue (Waiting, nothing held) is
//     not saved: Nomad's blocked evaluation says since when it waits, and
//     keeping each queued job's place across a restart cost two writes per
//     queued job (one as it queued, one as it ran). The same goes for the
//     place in line (Waiting, Interrupted) of a group no longer held.
//   - A hold's Index following Steward's own writes (syncHolds) changes
//     nothing a restarted controller needs: its count agrees with Nomad's.
//   - A hold released in full (Count 0) is dropped once Nomad shows its
//     count (syncHolds does so again after a restart), and a finished
//     preemption once its victims are gone (finishDrains).
//   - A checkpoint signal and its grace (Drain.Signaled, Deadline, Sent):
//     the decision's write said the preemption is decided and unsignalled,
//     which is what a restarted controller needs: it signals the victims
//     anew, with a whole grace from its own signal (a victim may checkpoint
//     twice; none has less than its grace). Saved with the job's next
//     write (the finish), the time is the signal's; a restarted controller
//     that finds it unsent sends it once more within the same grace.
//   - An eviction counted once Nomad took its scale (Held.Evicts moved to
//     Preemptions): the hold's Evicts says the same to a restarted one.
//   - Marks and preemption times that expired (pruneMarks,
//     trimPreemptions): a restarted controller drops them too.

// stable is the state as compared for a write at now: without what the
// list above leaves to the next write.
func (s *JobState) stable(now time.Time) *JobState {
	cp := *s
	cp.Held = nil
	var evicts []time.Time
	for g, h := range s.Held {
		if !h.Evicts.IsZero() {
			evicts = append(evicts, h.Evicts)
		}
		if h.Count == 0 {
			continue
		}
		hc := *h
		hc.Index, hc.Evicts = 0, time.Time{}
		if cp.Held == nil {
			cp.Held = make(map[string]*Held, len(s.Held))
		}
		cp.Held[g] = &hc
	}
	// Evictions pending in holds count as finishDrain counts them: one per
	// drain (its groups share the time).
	slices.SortFunc(evicts, func(a, b time.Time) int { return a.Compare(b) })
	evicts = slices.Compact(evicts)
	cp.Preemptions = nil
	for _, t := range s.Preemptions {
		if now.Sub(t) <= preemptionMemory {
			cp.Preemptions = append(cp.Preemptions, t)
		}
	}
	if len(evicts) > 0 {
		cp.PreemptedTotal = max(s.PreemptedTotal, len(s.Preemptions)) + len(evicts)
		cp.Preemptions = append(cp.Preemptions, evicts...)
		slices.SortFunc(cp.Preemptions, func(a, b time.Time) int { return a.Compare(b) })
	}
	cp.Draining = nil
	for _, d := range s.Draining {
		if d.Finished {
			continue
		}
		dc := *d
		dc.Signaled, dc.Deadline, dc.Sent = time.Time{}, time.Time{}, false
		cp.Draining = append(cp.Draining, &dc)
	}
	cp.Waiting = filterGroups(s.Waiting, cp.Held)
	cp.Interrupted = filterGroups(s.Interrupted, cp.Held)
	cp.Marks = slices.DeleteFunc(slices.Clone(s.Marks), func(m Mark) bool { return !now.Before(m.Until) })
	return &cp
}

// filterGroups keeps the entries of groups that are held.
func filterGroups[V any](m map[string]V, held map[string]*Held) map[string]V {
	var out map[string]V
	for g, v := range m {
		if held[g] == nil {
			continue
		}
		if out == nil {
			out = map[string]V{}
		}
		out[g] = v
	}
	return out
}

// stableJSON is the state as compared for a write at now, encoded.
func (s *JobState) stableJSON(now time.Time) (string, error) {
	b, err := json.Marshal(s.stable(now))
	if err != nil {
		return "", fmt.Errorf("encode state of %s: %w", s.key(), err)
	}
	return string(b), nil
}

// unchanged reports whether the state saved last (as stableJSON encoded
// it then) still says what st says at now: what expired since (marks,
// preemption times) is no change.
func (s *stateStore) unchanged(k jobKey, st string, now time.Time) bool {
	saved, ok := s.saved[k]
	if !ok {
		return false
	}
	if saved == st {
		return true
	}
	var was JobState
	if err := json.Unmarshal([]byte(saved), &was); err != nil {
		return false
	}
	b, err := json.Marshal(was.stable(now))
	if err != nil || string(b) != st {
		return false
	}
	s.saved[k] = st // the same at now: compared at once next time
	return true
}

// forget deletes a job's state (check-and-set).
func (s *stateStore) forget(ctx context.Context, k jobKey) error {
	if err := s.nomad().DeleteVar(ctx, s.cfg().StateNamespace, statePath(k), s.index[k]); err != nil {
		s.casFailed(k, err)
		return err
	}
	delete(s.saved, k)
	delete(s.states(), k)
	delete(s.index, k)
	return nil
}

// casFailed notes a refused check-and-set: someone else wrote the state
// (another controller that believed it led), so every state is read again
// before the next decision.
func (s *stateStore) casFailed(k jobKey, err error) {
	if isConflict(err) {
		s.log().Error("job state changed under this controller: reading every state again", "job", k, "error", err)
		s.reload = true
	}
}

// flush writes states changed outside actions (idle timers, index
// updates).
func (c *Controller) flush(ctx context.Context, r *round) {
	pol, _ := c.engineNow()
	idle := c.idleTimers(pol, r)
	for k := range idle {
		c.state(k) // a job that only idles gets a state, to keep its timer
	}
	for _, st := range c.sortedStates() {
		k := st.key()
		if r.obs.Jobs[k] != nil {
			st.Idle = mergeIdle(st.Idle, idle[k])
		}
		if err := c.save(ctx, st); err != nil && !errors.Is(err, errStateTooBig) {
			c.log().Error("save job state", "job", k, "error", err)
			r.failed++
		}
	}
}

// writing waits until no other action writes k's state, and marks it
// written until the func it returns is called. Only actions that run at
// once (actplan.go) ever wait here.
func (s *stateStore) writing(ctx context.Context, k jobKey) func() {
	for ch := s.inFlight[k]; ch != nil; ch = s.inFlight[k] {
		unlockedFor(ctx, func() { <-ch })
	}
	if s.inFlight == nil {
		s.inFlight = map[jobKey]chan struct{}{}
	}
	ch := make(chan struct{})
	s.inFlight[k] = ch
	return func() {
		delete(s.inFlight, k)
		close(ch)
	}
}
