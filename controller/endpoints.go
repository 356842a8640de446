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
	// (Controller.Health, Controller.Check); checkAddr is where checks
	// are answered, which the endpoints set once listening unless it was
	// configured.
	health    func() Health
	check     func(ctx context.Context, job *api.Job, token string) (*CheckResult, error)
	checkAddr *checkAddress
	// aclsKnown and aclsEnabled: whether the cluster enforces ACLs, once
	// read (callerToken), under mu.
	mu                     sync.Mutex
	aclsKnown, aclsEnabled bool
}

func newEndpoints(c *Controller) *endpoints {
	return &endpoints{
		wiring: c.wiring, client: c.client, metrics: c.metrics,
		health: c.Health, check: c.Check, checkAddr: c.checkAddr,
	}
}
