package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// Capture is what one round saw, to be planned again offline (`steward
// plan -snapshot` writes one, `steward plan -replay` plans it): the
// resolved policy, the engine's snapshot and the time. The engine is pure,
// so a replay makes the same plan, byte for byte, and a decision can be
// studied away from the cluster (issue 32, item 3).
//
// What it holds is what the engine sees: job, group, node and tenant
// names, GPU counts and IDs, utilisation and preemption history. Job meta
// beyond Steward's keys, task config, environment and tokens never reach
// the engine, so they are not in it; the policy's notify blocks (whose
// headers may carry credentials) are left out, as the engine does not
// read them.
type Capture struct {
	// Version is the format's: a reader refuses one newer than it knows.
	Version  int              `json:"version"`
	At       time.Time        `json:"at"`
	Policy   *policy.Policy   `json:"policy"`
	Snapshot *engine.Snapshot `json:"snapshot"`
}

// CaptureVersion is the Capture format this build writes and reads.
const CaptureVersion = 1

// CaptureOnce is PlanOnce with what the plan was made from.
func (c *Controller) CaptureOnce(ctx context.Context) (*Capture, *engine.Plan, error) {
	if err := c.loadStates(ctx); err != nil {
		return nil, nil, err
	}
	pol, eng := c.engineNow()
	obs, err := c.obs.observe(ctx, c.now(), false)
	if err != nil {
		return nil, nil, err
	}
	// One fresh stats reading on top of the saved per-minute history.
	c.sampler.sweepStats(ctx, statsTargets(pol, obs))
	snap := buildSnapshot(pol, obs, c.states(), c.usage.samples(pol))
	// The saved decayed usage, as of its last save (fair share over time).
	c.fairShareUsage(ctx, pol, snap, obs.At)
	plan := eng.Plan(snap, obs.At)
	redacted := *pol
	redacted.Notify = nil
	return &Capture{Version: CaptureVersion, At: obs.At, Policy: &redacted, Snapshot: snap}, plan, nil
}

// Write writes the capture as JSON.
func (cp *Capture) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	if err := enc.Encode(cp); err != nil {
		return fmt.Errorf("write capture: %w", err)
	}
	return nil
}

// ReadCapture reads a capture Write wrote, refusing a newer format and a
// policy that does not validate (a hand-edited file).
func ReadCapture(r io.Reader) (*Capture, error) {
	var cp Capture
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cp); err != nil {
		return nil, fmt.Errorf("read capture: %w", err)
	}
	switch {
	case cp.Version > CaptureVersion:
		return nil, fmt.Errorf("read capture: format version %d is newer than this build's (%d): replay it with the build that wrote it or a newer one", cp.Version, CaptureVersion)
	case cp.Version < 1 || cp.Policy == nil || cp.Snapshot == nil:
		return nil, fmt.Errorf("read capture: not a capture (version %d, policy %t, snapshot %t)", cp.Version, cp.Policy != nil, cp.Snapshot != nil)
	}
	if err := cp.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("read capture: its policy: %w", err)
	}
	return &cp, nil
}

// Replay plans the capture again, as the round did.
func (cp *Capture) Replay() *engine.Plan {
	return engine.New(cp.Policy).Plan(cp.Snapshot, cp.At)
}
