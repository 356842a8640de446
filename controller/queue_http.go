package controller

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// GET /v1/queue (issue 34, item 9): the queue `steward queue` prints, for
// dashboards and scripts that speak HTTP rather than run the CLI. It is
// read with the caller's Nomad token (X-Nomad-Token), never the
// controller's: ?namespace=NS reads the view the leader publishes in NS,
// which a team's token may read; without it, the whole cluster's status
// in Steward's own namespace, which only an operator's token may read.
// So it tells no one more than Nomad already lets them read, and any
// controller (leader or follower) answers from what the leader published.
// It is served beside /v1/job/check, over TLS where that is.

// serveQueue answers GET /v1/queue.
func (ep *endpoints) serveQueue(w http.ResponseWriter, r *http.Request) {
	if ep.client == nil {
		writeJSONError(w, http.StatusServiceUnavailable, fmt.Errorf("no Nomad client"))
		return
	}
	ns := r.URL.Query().Get("namespace")
	if len(ns) > 128 { // Nomad's own bound on a namespace name
		writeJSONError(w, http.StatusBadRequest, fmt.Errorf("namespace: longer than Nomad's 128 characters"))
		return
	}
	where := ns
	if where == "" || where == "*" {
		where = ep.cfg().StateNamespace
	}
	token, ok := ep.callerToken(w, r)
	if !ok {
		return
	}
	q := (&api.QueryOptions{Namespace: where, AuthToken: token}).WithContext(r.Context())
	v, _, err := ep.client.Variables().Peek(StatusPath, q)
	switch {
	case isForbidden(err):
		writeJSONError(w, http.StatusForbidden, fmt.Errorf("read the queue in namespace %s with the caller's token: %w", where, err))
		return
	case err != nil:
		writeJSONError(w, http.StatusBadGateway, fmt.Errorf("read the queue in namespace %s: %w", where, err))
		return
	case v == nil:
		writeJSONError(w, http.StatusNotFound, fmt.Errorf("no status at %s@%s: the leading controller publishes one within seconds of its next round", StatusPath, where))
		return
	}
	var s Status
	if err := json.Unmarshal([]byte(v.Items["status"]), &s); err != nil {
		writeJSONError(w, http.StatusBadGateway, fmt.Errorf("decode the status at %s@%s: %w", StatusPath, where, err))
		return
	}
	queue := s.Queue
	if queue == nil {
		queue = []QueueEntry{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(queue)
}

// callerToken is the caller's Nomad token (X-Nomad-Token). Without one,
// on a cluster with ACLs, it answers 401: Nomad's api client sends its own
// token when a request's is empty, so a call without a token would have
// been read, or planned, with the controller's rights rather than an
// anonymous caller's. Without ACLs there are no rights to borrow.
func (ep *endpoints) callerToken(w http.ResponseWriter, r *http.Request) (string, bool) {
	token := r.Header.Get("X-Nomad-Token")
	if token != "" {
		return token, true
	}
	on, err := ep.aclsOn()
	switch {
	case err != nil:
		writeJSONError(w, http.StatusBadGateway, err)
		return "", false
	case on:
		writeJSONError(w, http.StatusUnauthorized, fmt.Errorf("a Nomad token is required in X-Nomad-Token: the controller answers with the caller's rights, never its own"))
		return "", false
	}
	return "", true
}

// aclsOn reports whether the cluster enforces ACLs, read once.
func (ep *endpoints) aclsOn() (bool, error) {
	ep.mu.Lock()
	known, on := ep.aclsKnown, ep.aclsEnabled
	ep.mu.Unlock()
	if known {
		return on, nil
	}
	_, _, err := ep.client.ACLTokens().Self(nil)
	switch {
	case err != nil && strings.Contains(err.Error(), "ACL support disabled"):
		on = false
	case err != nil:
		return false, fmt.Errorf("find whether the cluster enforces ACLs: %w", err)
	default:
		on = true
	}
	ep.mu.Lock()
	ep.aclsKnown, ep.aclsEnabled = true, on
	ep.mu.Unlock()
	return on, nil
}
