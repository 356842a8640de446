package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// FairSharePath is the variable (in the state namespace) where the leader
// keeps each tenant's decayed use of borrowed GPUs (fair share over time,
// policy.Preemption.FairShareHalfLife), so that a restart or a new leader
// does not forget the week.
const FairSharePath = "steward/fair-share"

// fairShareSaveEvery is how often, at most, the decayed usage is saved.
// It changes every round while tenants borrow; saving each change would be
// a Raft write per round for a figure that a lost interval barely moves.
// A restart loses at most this much of it. Decay alone is never saved: the
// saved usage carries its time, and whoever loads it decays it from there.
const fairShareSaveEvery = 10 * time.Minute

// fairShareMaxTenants and fairShareMaxBytes bound what is saved: the
// tenants with the most usage, as many as fit both, well within a Nomad
// variable (64 KiB) whatever the namespaces' names (up to 128 bytes).
// Usage is per tenant (a namespace), not per job, so it does not grow with
// time, only with the namespaces that borrowed GPUs.
const (
	fairShareMaxTenants = 1000
	fairShareMaxBytes   = 48 << 10
)

// fairShareStore accounts each tenant's decayed borrowed GPU-seconds
// round by round (engine.DecayUsage), as of at. Owned by the control loop.
type fairShareStore struct {
	usage map[string]float64
	at    time.Time
	// borrowed is what each tenant held beyond its reserve after the last
	// plan: the rate that accrues until the next round.
	borrowed map[string]float64
	// loaded: the saved usage has been read in this lead term; index is
	// its modify index (check-and-set), savedAt when it was last written,
	// dirty whether usage accrued since.
	loaded  bool
	index   uint64
	savedAt time.Time
	dirty   bool
}

// fairShareDoc is the saved form: the usage as of At, in GPU-seconds.
type fairShareDoc struct {
	At    time.Time          `json:"at"`
	Usage map[string]float64 `json:"usage"`
}

// advance brings the usage to now: what tenants borrowed since the last
// round accrues, all of it decays by halfLife.
func (f *fairShareStore) advance(now time.Time, halfLife time.Duration) {
	if f.usage == nil {
		f.usage = map[string]float64{}
	}
	if f.at.IsZero() || !now.After(f.at) {
		f.at = later(f.at, now)
		return
	}
	dt := now.Sub(f.at)
	for t, u := range f.usage {
		f.usage[t] = engine.DecayUsage(u, f.borrowed[t], dt, halfLife)
	}
	for t, b := range f.borrowed {
		if _, ok := f.usage[t]; !ok && b > 0 {
			f.usage[t] = engine.DecayUsage(0, b, dt, halfLife)
		}
		if b > 0 {
			f.dirty = true
		}
	}
	f.at = now
}

// hold notes what each tenant borrows after a plan.
func (f *fairShareStore) hold(tenants []engine.TenantUsage) {
	f.borrowed = make(map[string]float64, len(tenants))
	for _, t := range tenants {
		if b := t.Borrowed(); b > 0 {
			f.borrowed[t.Tenant] = float64(b)
		}
	}
}

// snapshot is the usage for the engine: a copy, the store changes.
func (f *fairShareStore) snapshot() map[string]float64 { return maps.Clone(f.usage) }

// load reads the saved usage at the start of a lead term and decays it to
// now: what was borrowed between the last save and now is not known, and
// counts as nothing.
func (fs *fairSharer) loadFairShare(ctx context.Context, now time.Time, halfLife time.Duration) error {
	f := &fs.fair
	items, index, err := fs.nomad().GetVar(ctx, fs.cfg().StateNamespace, FairSharePath)
	if err != nil {
		return fmt.Errorf("read fair-share usage %s: %w", FairSharePath, err)
	}
	*f = fairShareStore{usage: map[string]float64{}, at: now, loaded: true, index: index, savedAt: now}
	if items == nil {
		return nil
	}
	var doc fairShareDoc
	if err := json.Unmarshal([]byte(items["usage"]), &doc); err != nil {
		// A bad variable is not worth a stalled controller: start afresh,
		// and overwrite it at the next save.
		fs.log().Warn("fair-share usage unreadable: starting from none", "path", FairSharePath, "error", err)
		return nil
	}
	for t, u := range doc.Usage {
		if u > 0 && !math.IsInf(u, 0) {
			f.usage[t] = engine.DecayUsage(u, 0, now.Sub(doc.At), halfLife)
		}
	}
	return nil
}

// saveFairShare writes the usage when it accrued since the last save, at
// most every fairShareSaveEvery, bounded to fairShareMaxTenants tenants.
func (fs *fairSharer) saveFairShare(ctx context.Context, now time.Time) {
	f := &fs.fair
	if !f.loaded || !f.dirty || now.Sub(f.savedAt) < fairShareSaveEvery {
		return
	}
	doc := fairShareDoc{At: f.at, Usage: boundedUsage(f.usage, fairShareMaxTenants, fairShareMaxBytes)}
	b, err := json.Marshal(doc)
	if err != nil {
		fs.log().Error("encode fair-share usage", "error", err)
		return
	}
	index, err := fs.nomad().PutVar(ctx, fs.cfg().StateNamespace, FairSharePath, map[string]string{"usage": string(b)}, true, f.index)
	if err != nil {
		// A conflict: another leader wrote it. Read it again next term;
		// this one keeps its own.
		fs.log().Error("save fair-share usage", "path", FairSharePath, "error", err)
		if idx, gerr := fs.fairShareIndex(ctx); gerr == nil {
			f.index = idx
		}
		return
	}
	f.index, f.savedAt, f.dirty = index, now, false
}

func (fs *fairSharer) fairShareIndex(ctx context.Context) (uint64, error) {
	_, index, err := fs.nomad().GetVar(ctx, fs.cfg().StateNamespace, FairSharePath)
	return index, err
}

// boundedUsage keeps the tenants with the most usage, at most n of them
// and at most about maxBytes of JSON, and none under a GPU-second (decayed
// away).
func boundedUsage(usage map[string]float64, n, maxBytes int) map[string]float64 {
	names := make([]string, 0, len(usage))
	for t, u := range usage {
		if u >= 1 {
			names = append(names, t)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if usage[a] != usage[b] {
			if usage[a] > usage[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	out := make(map[string]float64, min(len(names), n))
	size := 64 // {"at":"...","usage":{}}
	for _, t := range names {
		// A quoted name (escapes at most double it), a colon, a number of
		// at most 24 bytes and a comma.
		size += 2*len(t) + 2 + 1 + 24 + 1
		if len(out) >= n || size > maxBytes {
			break
		}
		out[t] = usage[t]
	}
	return out
}

// fairShareUsage brings the decayed usage to now and puts it in the
// snapshot, when the policy asks for fair share over time. The saved usage
// is read once per lead term; a failed read is retried next round, and the
// round plans on what this controller has meanwhile.
func (fs *fairSharer) fairShareUsage(ctx context.Context, pol *policy.Policy, snap *engine.Snapshot, now time.Time) {
	halfLife := pol.Preemption.FairShareHalfLife
	if halfLife <= 0 {
		return
	}
	if !fs.fair.loaded {
		if err := fs.loadFairShare(ctx, now, halfLife); err != nil {
			fs.log().Error("load fair-share usage", "error", err)
		}
	}
	fs.fair.advance(now, halfLife)
	snap.Usage = fs.fair.snapshot()
}

// fairSharer owns the tenants' fair-share usage and keeps it in Nomad: it
// reads it once per lead term, brings it to each round's now, notes what
// each plan lends (holdBorrowed), and saves it.
type fairSharer struct {
	wiring
	fair fairShareStore
}

// holdBorrowed notes what each tenant borrows after a plan: it accrues
// until the next round.
func (fs *fairSharer) holdBorrowed(tenants []engine.TenantUsage) { fs.fair.hold(tenants) }

// newTerm reads the saved usage again before the next round: another
// leader may have saved it meanwhile.
func (fs *fairSharer) newTerm() { fs.fair.loaded = false }
