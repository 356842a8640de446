package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
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
	for _, ref := range refs {
		if ref.Namespace != c.cfg.StateNamespace {
			continue
		}
		items, index, err := c.nomad.GetVar(ctx, ref.Namespace, ref.Path)
		if err != nil {
			return err
		}
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
		if b, err := json.Marshal(st.stable()); err == nil {
			c.saved[k] = string(b)
		}
		for short, idle := range st.Idle {
			c.usage.restore(short, idle)
		}
		for id, samples := range st.Usage {
			c.usage.restoreHistory(id, samples)
		}
		st.Usage = nil // saved as Idle from now on
	}
	if len(newer) > 0 {
		c.metrics.schemaRefusals.WithLabelValues("state").Add(float64(len(newer)))
		return fmt.Errorf("%w: %d job states (%s, ...) are of a schema newer than %d: refusing to lead; "+
			"upgrade this controller (docs/operations.md, \"Upgrades\")", errNewerState, len(newer), clip(newer[0], quoteMax), stateSchema)
	}
	c.log.Info("loaded controller state", "jobs", len(c.states), "schema", stateSchema)
	return nil
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
	b, err := json.Marshal(st.stable())
	if err != nil {
		return fmt.Errorf("encode state of %s: %w", k, err)
	}
	if c.saved[k] == string(b) {
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
	c.saved[k], c.index[k] = string(b), index
	return nil
}

// States are written when something is decided, not as the cluster goes
// on: what changes without a decision is kept in memory and saved with
// the next write that has a reason of its own.
//   - A group that only waits in Nomad's queue (Waiting, nothing held) is
//     not saved: Nomad's blocked evaluation says since when it waits, and
//     keeping each queued job's place across a restart cost two writes per
//     queued job (one as it queued, one as it ran).
//   - A hold's Index following Steward's own writes (syncHolds) changes
//     nothing a restarted controller needs: its count agrees with Nomad's.

// stable is the state as compared for a write: without the hold indexes
// that follow Steward's own writes.
func (s *JobState) stable() *JobState {
	if len(s.Held) == 0 {
		return s
	}
	cp := *s
	cp.Held = make(map[string]*Held, len(s.Held))
	for g, h := range s.Held {
		hc := *h
		hc.Index = 0
		cp.Held[g] = &hc
	}
	return &cp
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
