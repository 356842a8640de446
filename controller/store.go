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

// loadStates reads every job state the controller (or a previous leader)
// wrote, from the state namespace only.
func (c *Controller) loadStates(ctx context.Context) (err error) {
	c.resetState()
	c.reload = false
	defer func() {
		if err != nil {
			// Half loaded is not loaded: the next round reads them all
			// again rather than act on what it has.
			c.resetState()
			c.reload = true
		}
	}()
	refs, err := c.nomad.ListVars(ctx, c.cfg.StateNamespace, statePrefix)
	if err != nil {
		return err
	}
	var newer []string
	refs = slices.DeleteFunc(refs, func(ref VarRef) bool { return ref.Namespace != c.cfg.StateNamespace })
	read, err := c.readStates(ctx, refs)
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
			c.log.Error("job state written by a newer controller: this one will not lead", "path", ref.Path, "error", err)
			newer = append(newer, ref.Path)
			continue
		}
		if err != nil {
			c.log.Error("ignoring unreadable job state", "namespace", ref.Namespace, "path", ref.Path, "error", err)
			continue
		}
		if st.IDHash != "" && st.ID == "" && ref.Path == statePrefix+"~~"+st.IDHash[:min(40, len(st.IDHash))] {
			// An ID too long to save: the job it names is known when
			// Nomad shows it (resolveStates).
			c.unresolved[ref.Path] = unresolvedState{st: st, index: index}
			continue
		}
		k, err := stateKey(ref.Path, st)
		if err != nil {
			c.log.Error("ignoring job state", "namespace", ref.Namespace, "error", err)
			continue
		}
		st.Namespace, st.ID = k.Namespace, k.ID
		c.states[k] = st
		c.index[k] = index
		if b, err := st.stableJSON(c.now()); err == nil {
			c.saved[k] = b
		}
		for short, idle := range st.Idle {
			c.usage.restore(short, idle)
		}
		for id, samples := range st.Usage {
			c.usage.restoreHistory(id, samples)
		}
		st.Usage = nil // saved as Idle from now on
		st.pacePendingStops(c.now())
	}
	if len(newer) > 0 {
		c.metrics.schemaRefusals.WithLabelValues("state").Add(float64(len(newer)))
		return fmt.Errorf("%w: %d job states (%s, ...) are of a schema newer than %d: refusing to lead; "+
			"upgrade this controller (docs/operations.md, \"Upgrades\")", errNewerState, len(newer), clip(newer[0], quoteMax), stateSchema)
	}
	c.log.Info("loaded controller state", "jobs", len(c.states), "schema", stateSchema)
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
func (c *Controller) readStates(ctx context.Context, refs []VarRef) ([]readState, error) {
	out := make([]readState, len(refs))
	errs := make([]error, len(refs))
	inParallel(len(refs), stateReads, func(i int) {
		out[i].items, out[i].index, errs[i] = c.nomad.GetVar(ctx, refs[i].Namespace, refs[i].Path)
	})
	for _, err := range errs {
		if err != nil {
			return nil, err // the first: an outage fails every read alike
		}
	}
	return out, nil
}

// state returns the job's state, creating an empty one.
func (c *Controller) state(k jobKey) *JobState {
	st := c.states[k]
	if st == nil {
		st = &JobState{Namespace: k.Namespace, ID: k.ID}
		c.states[k] = st
	}
	return st
}

func (c *Controller) sortedStates() []*JobState {
	out := make([]*JobState, 0, len(c.states))
	for _, st := range c.states {
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
func (c *Controller) save(ctx context.Context, st *JobState) error {
	k := st.key()
	if c.cfg.DryRun {
		return nil
	}
	now := c.now()
	if st.empty(now) && st.Status == "" {
		if _, ok := c.saved[k]; ok {
			return c.forget(ctx, k)
		}
		if !st.waits() {
			delete(c.states, k) // nothing to remember, in memory either
		}
		return nil
	}
	b, err := st.stableJSON(now)
	if err != nil {
		return err
	}
	if c.unchanged(k, b, now) {
		return nil
	}
	items, err := st.encode()
	if err != nil {
		c.stateTooBig(k, err)
		return err
	}
	index, err := c.nomad.PutVar(ctx, c.cfg.StateNamespace, statePath(k), items, true, c.index[k])
	if err != nil {
		c.casFailed(k, err)
		return err
	}
	delete(c.stateErr, k)
	c.saved[k], c.index[k] = b, index
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
//   - A checkpoint signal sent (Drain.Sent): the write before it recorded
//     when it went out, and a restarted controller that finds it unsent
//     sends it once more within the same grace.
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
		dc.Sent = false
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
func (c *Controller) unchanged(k jobKey, st string, now time.Time) bool {
	saved, ok := c.saved[k]
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
	c.saved[k] = st // the same at now: compared at once next time
	return true
}

// forget deletes a job's state (check-and-set).
func (c *Controller) forget(ctx context.Context, k jobKey) error {
	if err := c.nomad.DeleteVar(ctx, c.cfg.StateNamespace, statePath(k), c.index[k]); err != nil {
		c.casFailed(k, err)
		return err
	}
	delete(c.saved, k)
	delete(c.states, k)
	delete(c.index, k)
	return nil
}

// casFailed notes a refused check-and-set: someone else wrote the state
// (another controller that believed it led), so every state is read again
// before the next decision.
func (c *Controller) casFailed(k jobKey, err error) {
	if isConflict(err) {
		c.log.Error("job state changed under this controller: reading every state again", "job", k, "error", err)
		c.reload = true
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
			c.log.Error("save job state", "job", k, "error", err)
			r.failed++
		}
	}
}
