package controller

import (
	"context"
	"sync/atomic"
)

// elector holds this controller's leadership: it contends for the leader
// lock (a Nomad variable lock, leader.go; a lease in that variable,
// leader_lease.go; or a Consul lock, leader_consul.go), keeps the lease
// (c.lease) that fences every write, runs the control loop while it
// leads, and steps down when no round finishes in time (stepdown.go).
type elector struct {
	c *Controller
	// lastRoundAt is when the last round finished, in Unix nanoseconds
	// (stepdown.go).
	lastRoundAt atomic.Int64
	// phases times the phases of a lead term's first rounds
	// (phasetimes.go); the control loop's alone.
	phases phaseClock
}

// run leads with lead while this controller holds the leadership the
// configuration asks for, and contends again when it loses it, until ctx
// ends.
func (e *elector) run(ctx context.Context, lead func(context.Context) error) error {
	switch {
	case e.c.cfg.Consul != nil:
		return e.electConsul(ctx, lead)
	case e.c.cfg.Election == ElectionLease:
		return e.electLease(ctx, lead)
	}
	return e.elect(ctx, lead)
}
