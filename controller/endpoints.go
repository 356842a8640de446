package controller

import (
	"context"
	"sync"

	"github.com/hashicorp/nomad/api"
)

// endpoints serve the controller's HTTP API (http.go): /metrics and
// /healthz, and the tenants' /v1/job/check and /v1/queue, which answer
// with the caller's Nomad rights (queue_http.go). They read the
// controller's health, metrics and last round; they own only whether the
// cluster enforces ACLs, read once. They are given the wiring, the client
// and metrics, and the few of the controller's doings they answer with
// (newEndpoints), not the controller.
type endpoints struct {
	wiring
	client  *api.Client
	metrics *metrics
	// health and check answer /healthz and /v1/job/check
	// (Controller.Health, Controller.Check); checkListening tells the
	// controller where it answers checks, unless it was told already.
	health         func() Health
	check          func(ctx context.Context, job *api.Job, token string) (*CheckResult, error)
	checkListening func(addr string)
	// aclsKnown and aclsEnabled: whether the cluster enforces ACLs, once
	// read (callerToken), under mu.
	mu                     sync.Mutex
	aclsKnown, aclsEnabled bool
}

func newEndpoints(c *Controller) *endpoints {
	return &endpoints{
		wiring: wiringOf(c), client: c.client, metrics: c.metrics,
		health: c.Health, check: c.Check,
		checkListening: func(addr string) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.checkAddr == "" {
				c.checkAddr = addr
			}
		},
	}
}
