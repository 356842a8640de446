package nodesim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashicorp/nomad/nomad/structs"
)

const (
	// defaultTTL is assumed until the server has handed out a TTL.
	defaultTTL = 10 * time.Second
	// heartbeatRetry is the base wait after a failed heartbeat.
	heartbeatRetry = time.Second
)

// heartbeatLoop keeps the node alive: Node.UpdateStatus (status ready)
// at a random point in the first half to three quarters of the TTL the
// server handed out, so that heartbeats spread out and arrive in time on
// a busy machine. A node the server forgot registers again.
func (n *node) heartbeatLoop(ctx context.Context) {
	// Spread the first heartbeats over the first half TTL.
	wait := time.Duration(rand.Int64N(int64(defaultTTL / 2)))
	for {
		if !n.sleep(wait) {
			return
		}
		if ctx.Err() != nil {
			return
		}
		ttl, err := n.heartbeat()
		switch {
		case err == nil:
			wait = ttl/2 + time.Duration(rand.Int64N(int64(ttl/4)+1))
		case forgotten(err):
			n.f.logger.Info("server forgot the node; registering again", "node", n.name, "error", err)
			if err := n.register(); err != nil {
				n.f.logger.Warn("registering again", "node", n.name, "error", err)
				wait = jitter(2 * heartbeatRetry)
				continue
			}
			// Register keeps the stored status; heartbeat at once so a
			// node marked down becomes ready.
			wait = 0
		default:
			if ctx.Err() != nil {
				return
			}
			n.f.logger.Warn("heartbeat failed; retrying", "node", n.name, "error", err)
			wait = jitter(heartbeatRetry)
		}
	}
}

// heartbeat sends one Node.UpdateStatus and returns the TTL.
func (n *node) heartbeat() (time.Duration, error) {
	req := structs.NodeUpdateStatusRequest{
		NodeID:       n.id,
		Status:       structs.NodeStatusReady,
		WriteRequest: n.writeRequest(),
	}
	var resp structs.NodeUpdateResponse
	if err := n.link.call("Node.UpdateStatus", &req, &resp); err != nil {
		return 0, fmt.Errorf("heartbeat node %s: %w", n.name, err)
	}
	n.setIdentity(resp.SignedIdentity)
	n.f.stats.heartbeats.Add(1)
	ttl := resp.HeartbeatTTL
	if ttl <= 0 {
		ttl = defaultTTL
	}
	return ttl, nil
}

// forgotten reports errors meaning the server no longer knows the node
// (purged or garbage collected, or its state lost).
func forgotten(err error) bool {
	s := err.Error()
	return strings.Contains(s, "node not found") || strings.Contains(s, structs.ErrUnknownNodePrefix)
}
