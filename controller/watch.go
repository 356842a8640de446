package controller

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
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
		sctx, cancel := context.WithCancel(ctx)
		events, err := c.nomad().Events(sctx, index)
		if err != nil {
			cancel()
			c.log().Warn("event stream", "error", err)
			sleepCtx(ctx, backoff(attempt, c.cfg().MaxBackoff))
			attempt++
			continue
		}
		// Nomad replays only its last events (event_buffer_size): from an
		// index it no longer holds the stream starts where its buffer
		// does, and says nothing of the gap; after a snapshot restore its
		// indexes went back, and the cache holds what no longer exists.
		// So the cache follows the stream only after a full read from the
		// leader, taken now that the stream is open: what happened before
		// is in the read, what happens after in the stream.
		if err := c.obs.rebuild(sctx, c.now(), c.log()); err != nil {
			cancel()
			c.log().Warn("read the cluster after subscribing to events; resubscribing", "error", err)
			sleepCtx(ctx, backoff(attempt, c.cfg().MaxBackoff))
			attempt++
			continue
		}
		attempt = 0
		cache.setFollowing(true)
		c.trigger.poke()
		for es := range events {
			if es.Err != nil {
				c.log().Warn("event stream interrupted; resubscribing", "index", cache.at(), "error", es.Err)
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
				c.trigger.poke()
			}
		}
		cancel()
		// The stream ended (server restart, leader change, snapshot
		// restore): rounds read in full until it follows again;
		// resubscribe from the last index.
		cache.setFollowing(false)
		c.trigger.poke()
		sleepCtx(ctx, backoff(attempt, c.cfg().MaxBackoff))
		attempt++
	}
}

// rebuild reads the cluster in full from the leader and makes the cache
// that read, entity by entity, instead of merging it (replace): nothing
// the cache held before is kept for being newer. Taken after the stream
// is (re)subscribed and before any of its events is applied, the read
// holds everything the cache had and everything it missed. An entity the
// read shows older than the cache had it means Nomad's state went back
// (a snapshot restore): it is logged, and counted as drift as every
// correction is.
func (o *observer) rebuild(ctx context.Context, now time.Time, log hclog.Logger) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	rd, err := o.readAll(ctx, true)
	if err != nil {
		return err
	}
	o.stats.jobReads += rd.jobReads
	drift, regressed := o.cache.rebuild(rd)
	o.stats.drift += drift
	o.stats.fullReads++
	o.lastFull = now
	if regressed > 0 {
		log.Warn("Nomad's state went back (a snapshot restore?): the cache was rebuilt from a full read",
			"entities_older_than_cached", regressed, "index", rd.index)
	}
	return nil
}
