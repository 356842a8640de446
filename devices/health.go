package devices

import (
	"strings"
	"sync"
)

// healthSource is where a device's unhealthy reason came from. Each source
// is set and cleared on its own, so a device is healthy only when none
// has a reason.
type healthSource int

const (
	// srcQuery: a fingerprint query failed (cleared when it succeeds).
	srcQuery healthSource = iota
	// srcStats: a stats query failed (cleared when a round succeeds).
	srcStats
	// srcEvent: a critical hardware event (sticky until the plugin restarts).
	srcEvent
	numHealthSources
)

// health tracks why devices are unhealthy and wakes the fingerprint loop
// when that changes.
type health struct {
	mu      sync.Mutex
	reasons map[string]*[numHealthSources]string
	changed chan struct{} // closed and replaced on every change
}

func newHealth() *health {
	return &health{reasons: map[string]*[numHealthSources]string{}, changed: make(chan struct{})}
}

// reset forgets everything (a reconfigured plugin starts afresh).
func (h *health) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reasons = map[string]*[numHealthSources]string{}
}

// wait returns a channel closed at the next change.
func (h *health) wait() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// set records (or, with reason "", clears) a device's reason from src.
func (h *health) set(uuid string, src healthSource, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setLocked(uuid, src, reason)
}

func (h *health) setLocked(uuid string, src healthSource, reason string) {
	r, ok := h.reasons[uuid]
	if !ok {
		if reason == "" {
			return
		}
		r = new([numHealthSources]string)
		h.reasons[uuid] = r
	}
	if r[src] == reason {
		return
	}
	r[src] = reason
	close(h.changed)
	h.changed = make(chan struct{})
}

// updateStats records the outcome of one stats round. It allocates only
// when a device's state changes.
func (h *health) updateStats(samples []sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range samples {
		h.setLocked(samples[i].UUID, srcStats, samples[i].Err)
	}
}

// reason returns why a device is unhealthy, or "" when it is healthy.
func (h *health) reason(uuid string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.reasons[uuid]
	if !ok {
		return ""
	}
	var parts []string
	for _, s := range r {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "; ")
}
