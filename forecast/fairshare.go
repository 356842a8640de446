package forecast

import (
	"maps"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Fair share over time in the replay. With a half-life set, the engine
// orders waiting tenants and takes fair-share reclaims by each tenant's
// decayed use of borrowed GPUs (engine.Snapshot.Usage). Frozen at the
// forecast's start, over a replay of days it kept the same tenant first
// at every step, however much it borrowed meanwhile: the forecast's P50
// and P90 covered 30 % and 51 % of Philly's starts against 41 % and 63 %
// without fair share (docs/evaluation.md, forecast with fair share over
// time). The replay accounts it as the controller does (controller's
// fairShareStore): what each tenant borrowed after a plan, by the plan's
// own accounting (engine.TenantUsage.Borrowed, departments and pools as
// the engine counts them), accrues until the next plan, and all of it
// decays by the half-life (engine.DecayUsage).
type replayUsage struct {
	halfLife time.Duration
	usage    map[string]float64 // nil: fair share over time is off
	at       time.Time          // the time usage is as of
	borrowed map[string]float64 // after the last plan
}

// newReplayUsage starts from the snapshot's usage, as of the forecast's
// start; the snapshot is read only, the replay's own copy changes.
func newReplayUsage(in *Input) replayUsage {
	hl := in.Engine.Policy().Preemption.FairShareHalfLife
	if hl <= 0 {
		return replayUsage{}
	}
	u := maps.Clone(in.Snapshot.Usage)
	if u == nil {
		u = map[string]float64{}
	}
	return replayUsage{halfLife: hl, usage: u, at: in.Now}
}

// advance brings the usage to now, for the plan about to be made: a
// replay's step can be hours, over which usage accrues and decays much.
func (f *replayUsage) advance(now time.Time) map[string]float64 {
	if f.usage == nil || !now.After(f.at) {
		return f.usage
	}
	dt := now.Sub(f.at)
	for t, u := range f.usage {
		f.usage[t] = engine.DecayUsage(u, f.borrowed[t], dt, f.halfLife)
	}
	for t, b := range f.borrowed {
		if _, ok := f.usage[t]; !ok {
			f.usage[t] = engine.DecayUsage(0, b, dt, f.halfLife)
		}
	}
	f.at = now
	return f.usage
}

// hold notes what each tenant borrows after a plan: it accrues until the
// next.
func (f *replayUsage) hold(tenants []engine.TenantUsage) {
	if f.usage == nil {
		return
	}
	clear(f.borrowed)
	for _, t := range tenants {
		if b := t.Borrowed(); b > 0 {
			if f.borrowed == nil {
				f.borrowed = map[string]float64{}
			}
			f.borrowed[t.Tenant] = float64(b)
		}
	}
}
