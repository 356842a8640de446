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

// watch follows Nomad's event stream and pokes the control loop on every
// event. It resumes from the last index it saw; the stream replays only
// the last 100 events, so events are only a prompt: each round reads the
// cluster in full, and a periodic resync covers any gap.
func (c *Controller) watch(ctx context.Context) {
	var index uint64
	for attempt := 0; ctx.Err() == nil; {
		events, err := c.nomad.Events(ctx, index)
		if err != nil {
			c.log.Warn("event stream", "error", err)
			sleepCtx(ctx, backoff(attempt, c.cfg.MaxBackoff))
			attempt++
			continue
		}
		attempt = 0
		for es := range events {
			if es.Err != nil {
				c.log.Warn("event stream interrupted; resubscribing", "index", index, "error", es.Err)
				break
			}
			if es.IsHeartbeat() {
				continue
			}
			if es.Index > index {
				index = es.Index
			}
			var pressureAt time.Time
			for _, e := range es.Events {
				if e.Topic != api.TopicEvaluation {
					continue
				}
				if ev, err := e.Evaluation(); err == nil && ev != nil && ev.Status == "blocked" {
					// Latency counts from when Nomad blocked the
					// evaluation, so the event's delivery is included.
					at := time.Unix(0, ev.ModifyTime)
					if ev.ModifyTime == 0 || at.After(time.Now()) {
						at = time.Now()
					}
					if pressureAt.IsZero() || at.Before(pressureAt) {
						pressureAt = at
					}
				}
			}
			if !pressureAt.IsZero() {
				c.pressure(pressureAt)
			} else {
				c.poke()
			}
		}
		// The stream ended (server restart, leader change): poke for a full
		// read, then resubscribe from the last index.
		c.poke()
		sleepCtx(ctx, backoff(attempt, c.cfg.MaxBackoff))
		attempt++
	}
}
