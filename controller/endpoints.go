package controller

import "sync"

// endpoints serve the controller's HTTP API (http.go): /metrics and
// /healthz, and the tenants' /v1/job/check and /v1/queue, which answer
// with the caller's Nomad rights (queue_http.go). They read the
// controller's health, metrics and last round; they own only whether the
// cluster enforces ACLs, read once.
type endpoints struct {
	c *Controller
	// aclsKnown and aclsEnabled: whether the cluster enforces ACLs, once
	// read (callerToken), under mu.
	mu                     sync.Mutex
	aclsKnown, aclsEnabled bool
}
