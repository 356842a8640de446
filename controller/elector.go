package controller

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
)

// elector holds this controller's leadership: it contends for the leader
// lock (a Nomad variable lock, leader.go; a lease in that variable,
// leader_lease.go; or a Consul lock, leader_consul.go), keeps the lease
// (c.lease) that fences every write, runs the control loop while it
// leads, and steps down when no round finishes in time (stepdown.go).
// It is given the wiring, the client and lease, and the two reads a new
// lease term warms up with (newElector), not the controller.
type elector struct {
	wiring
	client *api.Client
	lease  *lease
	// refresh reads the cluster in full (observer.refresh),
	// prefetchStates the jobs' states (stateStore.prefetchStates).
	refresh        func(ctx context.Context, at time.Time) (refreshCost, error)
	prefetchStates func(ctx context.Context) error
	// renewSeconds times each renewal call (steward_lease_renew_seconds).
	renewSeconds prometheus.Observer
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
	case e.cfg().Consul != nil:
		return e.electConsul(ctx, lead)
	case e.cfg().Election == ElectionLease:
		return e.electLease(ctx, lead)
	}
	return e.elect(ctx, lead)
}

// newElector gives the elector what it needs of c: c's observer is made
// before it (New, testController).
func newElector(c *Controller) *elector {
	return &elector{
		wiring: c.wiring, client: c.client, lease: c.lease,
		refresh:        c.obs.refresh,
		prefetchStates: c.prefetchStates,
		renewSeconds:   c.metrics.leaseRenew,
	}
}
