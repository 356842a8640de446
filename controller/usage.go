package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// usageStore keeps recent GPU utilisation per allocation: the mean over
// the allocation's GPUs, one sample per stats poll.
//
// It reads per node (GET /v1/client/stats through the server), not per
// allocation: one request covers every GPU of a client however many
// allocations share it, so the cost grows with nodes, not allocations.
type usageStore struct {
	mu      sync.Mutex
	byAlloc map[string][]engine.Sample
	obs     *Observation
	// targets are the nodes the next sweep reads (sweep.go), nil before
	// the first round.
	targets []statsTarget
	// pending are saved idle timers (JobState.Idle) by short allocation
	// ID, waiting for the observation that names their allocation.
	pending map[string][]engine.Sample
	window  time.Duration
	// paused: the activity source fails, and plans get no samples
	// (activity.go), so that none is idle on missing data.
	paused bool
	// reads is, per allocation the last round saw, the highest idle
	// threshold its samples are read for (-1: none covers it): add keeps
	// its idleTail for that, not its whole history. An allocation not in
	// it (new since, or of a job whose snooze measures busy time) keeps
	// every sample.
	reads map[string]float64
}

const maxSamplesPerAlloc = 1024

func newUsageStore() *usageStore {
	return &usageStore{byAlloc: map[string][]engine.Sample{}, window: 2 * time.Hour}
}

func (u *usageStore) setObservation(obs *Observation, targets []statsTarget) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.obs, u.targets = obs, targets
	alive := map[string]bool{}
	for _, a := range obs.Allocs {
		alive[a.ID] = true
		if saved, ok := u.pending[shortID(a.ID)]; ok {
			u.byAlloc[a.ID] = append(saved, u.byAlloc[a.ID]...)
			delete(u.pending, shortID(a.ID))
		}
	}
	for id := range u.byAlloc {
		if !alive[id] {
			delete(u.byAlloc, id)
		}
	}
}

func (u *usageStore) observation() *Observation {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.obs
}

// targetsNow returns what the next sweep reads.
func (u *usageStore) targetsNow() []statsTarget {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.targets
}

// ages returns, for each target allocation sampled before, how old its
// newest sample is at now.
func (u *usageStore) ages(targets []statsTarget, now time.Time) []time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []time.Duration
	for _, t := range targets {
		for _, a := range t.allocs {
			if list := u.byAlloc[a.ID]; len(list) > 0 {
				out = append(out, now.Sub(list[len(list)-1].At))
			}
		}
	}
	return out
}

// add appends a sample for an allocation.
func (u *usageStore) add(allocID string, s engine.Sample) {
	u.mu.Lock()
	defer u.mu.Unlock()
	list := append(u.byAlloc[allocID], s)
	cut := 0
	for cut < len(list) && s.At.Sub(list[cut].At) > u.window {
		cut++
	}
	if len(list)-cut > maxSamplesPerAlloc {
		cut = len(list) - maxSamplesPerAlloc
	}
	if cut > 0 {
		// Folded in place (usage_history.go): the list's array stays
		// the size of what it keeps.
		folded := foldSamples(list[:cut])
		n := copy(list, folded)
		n += copy(list[n:], list[cut:])
		clear(list[n:])
		list = list[:n]
	}
	if top, ok := u.reads[allocID]; ok {
		if tail := idleTail(list, top); len(tail) < len(list) {
			n := copy(list, tail)
			clear(list[n:])
			list = list[:n]
		}
	}
	if cap(list) > 2*len(list)+16 {
		// What is kept is a fraction of the array that held it (a
		// busy GPU's history cut to its newest sample): the array goes.
		list = slices.Clone(list)
	}
	u.byAlloc[allocID] = list
}

// keepFor sets what add keeps of each allocation's samples (reads).
func (u *usageStore) keepFor(reads map[string]float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reads = reads
}

// forget drops an allocation's samples: its GPUs cannot be read, and
// samples left from before would go on saying it is idle (or busy).
func (u *usageStore) forget(allocID string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.byAlloc, allocID)
}

// pause withholds samples from plans while the activity source fails.
func (u *usageStore) pause(p bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.paused = p
}

// samples returns a copy of every allocation's samples for one plan, as
// far back as any idle rule of pol reads them (idleTail); none while
// paused.
func (u *usageStore) samples(pol *policy.Policy) map[string][]engine.Sample {
	top := maxIdleThreshold(pol)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.paused {
		return map[string][]engine.Sample{}
	}
	out := make(map[string][]engine.Sample, len(u.byAlloc))
	for id, s := range u.byAlloc {
		out[id] = append([]engine.Sample(nil), idleTail(s, top)...)
	}
	return out
}

// history returns a copy of one allocation's samples, all of them (a
// snooze's busy time reads its busy stretches, which idleTail leaves out).
func (u *usageStore) history(allocID string) []engine.Sample {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.paused {
		return nil
	}
	return append([]engine.Sample(nil), u.byAlloc[allocID]...)
}

// restore puts back the idle timer a previous controller saved for an
// allocation (JobState.Idle, by short ID): one sample at the start of the
// idle stretch, at its mean, ahead of any new ones. It joins the
// allocation's samples when an observation names it.
func (u *usageStore) restore(short string, idle IdleSince) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pending == nil {
		u.pending = map[string][]engine.Sample{}
	}
	u.pending[short] = []engine.Sample{{At: idle.Since, Util: idle.Util}}
}

// restoreHistory puts back a per-minute history an earlier version saved
// (JobState.Usage, by full allocation ID).
func (u *usageStore) restoreHistory(allocID string, saved []engine.Sample) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.byAlloc[allocID] = append(append([]engine.Sample(nil), saved...), u.byAlloc[allocID]...)
}

// idleSince is since when an allocation's GPUs have been under threshold,
// and their mean since, from its samples.
func (u *usageStore) idleSince(allocID string, threshold float64) (IdleSince, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	samples := u.byAlloc[allocID]
	since, ok := engine.IdleSince(samples, threshold)
	if !ok {
		return IdleSince{}, false
	}
	var sum float64
	n := 0
	for _, s := range samples {
		if !s.At.Before(since) {
			sum, n = sum+s.Util, n+1
		}
	}
	return IdleSince{Since: since, Util: sum / float64(n)}, true
}

// nodeGPUReadings reads each GPU's utilisation on a node, or why it has
// none, from the device plugin's stats (gpuutil.go).
func (sp *sampler) nodeGPUReadings(ctx context.Context, nodeID string) (map[string]gpuReading, error) {
	stats, err := sp.nomad().NodeStats(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("read stats of node %s: %w", nodeID, err)
	}
	return gpuReadings(stats), nil
}

// idleTimers returns, per job, the idle timers to keep: the allocations an
// idle rule covers that have been under its threshold for idleSaveAfter
// or more, by short ID.
func (c *Controller) idleTimers(pol *policy.Policy, r *round) map[jobKey]map[string]IdleSince {
	out := map[jobKey]map[string]IdleSince{}
	rules := map[jobKey]*policy.IdleRule{}
	for _, a := range r.obs.Allocs {
		k := jobKey{a.Namespace, a.JobID}
		rule, seen := rules[k]
		if !seen {
			if job := r.obs.Jobs[k]; job != nil {
				rule = pol.ResolveJob(job.Namespace, job.Meta).IdleRule
			}
			rules[k] = rule
		}
		if rule == nil {
			continue
		}
		if st := c.states()[k]; st != nil && st.draining(a.ID) != nil {
			continue // being stopped: its timer has done its work
		}
		idle, ok := c.usage.idleSince(a.ID, rule.Threshold)
		if !ok || r.now.Sub(idle.Since) < idleSaveAfter {
			continue
		}
		if out[k] == nil {
			out[k] = map[string]IdleSince{}
		}
		idle.Since = idle.Since.Truncate(time.Second) // as saved
		out[k][shortID(a.ID)] = idle
	}
	return out
}

// mergeIdle is the idle timers to save: now's, keeping a saved entry
// whose stretch began at the same time as it is (its mean is a hint for
// reasons: rewriting it as it drifts would cost a write per round).
func mergeIdle(saved, now map[string]IdleSince) map[string]IdleSince {
	if len(now) == 0 {
		return nil
	}
	out := make(map[string]IdleSince, len(now))
	for id, idle := range now {
		if old, ok := saved[id]; ok && old.Since.Equal(idle.Since) {
			idle = old
		}
		out[id] = idle
	}
	return out
}
