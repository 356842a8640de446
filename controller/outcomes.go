package controller

import "sync"

// recentDecisions keeps the latest decisions for `steward status`: the
// actor and the round's phases add to it, the publisher quotes it. All
// of them run in the control loop.
type recentDecisions struct {
	kept []Decision
}

const maxDecisions = 40

// add keeps d, and the newest maxDecisions only.
func (d *recentDecisions) add(dec Decision) {
	d.kept = append(d.kept, dec)
	if n := len(d.kept); n > maxDecisions {
		d.kept = d.kept[n-maxDecisions:]
	}
}

func (d *recentDecisions) list() []Decision { return d.kept }

// checkAddress is where this controller answers `steward job check`,
// published in the status: the configured address, or else the one the
// endpoints listen on. The endpoints set it from their goroutine and the
// publisher reads it in the control loop, hence the mutex.
type checkAddress struct {
	mu   sync.Mutex
	addr string
}

func (a *checkAddress) get() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// setUnlessSet takes addr unless an address was configured or set before.
func (a *checkAddress) setUnlessSet(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.addr == "" {
		a.addr = addr
	}
}
