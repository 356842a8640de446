package controller

import (
	"context"
	"time"

	"github.com/hashicorp/nomad/api"
)

// watchTopics are the event topics that can change a decision.
var watchTopics = map[api.Topic][]string{
	api.TopicJob:        {"*"},
	api.TopicAllocation: {"*"},
	api.TopicEvaluation: {"*"},
	api.TopicNode:       {"*"},
}

// watch follows Nomad's event stream into the cluster cache (cache.go),
// from the index of the first full read, and pokes the control loop on
// every event that can change a plan. The stream replays only the last
// events (event_buffer_size), so after an interruption some may be lost:
// the periodic resync reads the cluster in full and counts what the
// cache missed.
func (c *Controller) watch(ctx context.Context) {
	cache := c.obs.cache
	for !cache.isReady() {
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return
		}
	}
	for attempt := 0; ctx.Err() == nil; {
		index := cache.at()
		events, err := c.nomad.Events(ctx, index)
		if err != nil {
			c.log.Warn("event stream", "error", err)
			sleepCtx(ctx, backoff(attempt, c.cfg.MaxBackoff))
			attempt++
			continue
		}
		attempt = 0
		cache.setFollowing(true)
		for es := range events {
			if es.Err != nil {
				c.log.Warn("event stream interrupted; resubscribing", "index", cache.at(), "error", es.Err)
				break
			}
			if es.IsHeartbeat() {
				continue
			}
			relevant, pressureAt := cache.apply(es)
			if !pressureAt.IsZero() {
				// Latency counts from when Nomad blocked the evaluation,
				// so the event's delivery is included.
				if pressureAt.UnixNano() <= 0 || pressureAt.After(time.Now()) {
					pressureAt = time.Now()
				}
			}
			if !pressureAt.IsZero() {
				c.pressure(pressureAt)
			} else if relevant {
				c.poke()
			}
		}
		// The stream ended (server restart, leader change): rounds read in
		// full until it follows again; resubscribe from the last index.
		cache.setFollowing(false)
		c.poke()
		sleepCtx(ctx, backoff(attempt, c.cfg.MaxBackoff))
		attempt++
	}
}
