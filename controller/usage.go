package controller

import (
	"context"
	"sync"
	"time"

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
	window  time.Duration
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
	u.byAlloc[allocID] = list[cut:]
}

// restore puts back samples saved by a previous controller (compacted to
// one per minute), ahead of any new ones.
func (u *usageStore) restore(allocID string, saved []engine.Sample) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.byAlloc[allocID] = append(append([]engine.Sample(nil), saved...), u.byAlloc[allocID]...)
}

// samples returns a copy of every allocation's samples for one plan.
func (u *usageStore) samples() map[string][]engine.Sample {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string][]engine.Sample, len(u.byAlloc))
	for id, s := range u.byAlloc {
		out[id] = append([]engine.Sample(nil), s...)
	}
	return out
}

// compacted returns the job's allocations' samples, one per minute, for
// its saved state.
func (u *usageStore) compacted(obs *Observation, k jobKey) map[string][]engine.Sample {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out map[string][]engine.Sample
	for _, a := range obs.Allocs {
		if a.Namespace != k.Namespace || a.JobID != k.ID || len(u.byAlloc[a.ID]) == 0 {
			continue
		}
		if out == nil {
			out = map[string][]engine.Sample{}
		}
		out[a.ID] = compactUsage(u.byAlloc[a.ID])
	}
	return out
}

// nodeGPUUtil returns each GPU's utilisation (percent) on a node, from
// the device plugin's stats (the summary value of each instance).
func (c *Controller) nodeGPUUtil(ctx context.Context, nodeID string) (map[string]float64, error) {
	stats, err := c.nomad.NodeStats(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, g := range stats.DeviceStats {
		if g == nil || g.Type != "gpu" {
			continue
		}
		for id, s := range g.InstanceStats {
			if s == nil || s.Summary == nil {
				continue
			}
			switch {
			case s.Summary.FloatNumeratorVal != nil:
				out[id] = *s.Summary.FloatNumeratorVal
			case s.Summary.IntNumeratorVal != nil:
				out[id] = float64(*s.Summary.IntNumeratorVal)
			}
		}
	}
	return out, nil
}
