package controller

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"
)

// A new leader has shown no waiting job its place (publisher.fc.shown is
// this process's alone), so its first rounds wrote every waiting job's
// record again: with its own steward_position_at, and behind the first
// queueRecordsPerRound places, or before its first forecast, without
// places or forecasts, which the next rounds wrote back (issue 33: most of
// the record writes between a takeover and its first completed round, at
// 250 nodes). The dead leader's record says as of when its figures are:
// where they have not moved materially since (shownQueue.due, the rule the
// dead leader would have gone on applying), the new leader keeps them, and
// shows them from then on as its own.

// queueItemKeys are the record's items that say the job's place in the
// queue (addQueueItems).
var queueItemKeys = []string{"steward_position", "steward_position_at", "steward_waiting_since", "steward_unblock",
	"steward_forecast", "steward_forecast_p50", "steward_forecast_p90"}

// queueSeen is what a round knows of a waiting job whose record this term
// has not written yet: what stabiliseQueue settled to show (shown; nil
// when the round's cap left it out), what the queue says now (latest),
// and the round's time.
type queueSeen struct {
	shown, latest *shownQueue
	now           time.Time
}

// queueSeen is the job's queueSeen, or nil when the job does not wait, or
// this term wrote its record already (its places are its own then).
func (p *publisher) queueSeen(k jobKey, now time.Time) *queueSeen {
	fc := p.queue.fc
	if fc == nil || p.records[k] != "" || fc.latest[k] == nil {
		return nil
	}
	return &queueSeen{shown: fc.shown[k], latest: fc.latest[k], now: now}
}

// adoptedQueue is a record due with the places its variable shows kept:
// the items to merge, as JSON, and what they show.
type adoptedQueue struct {
	shown *shownQueue
	items map[string]string
	json  string
}

// adoptQueue keeps the places that the job's record (old) shows, when it
// shows this wait's (the same waiting-since) and they have not moved
// materially since (or the round's cap would show none yet: the rule
// writes them when their turn comes); nil when the record is written as
// the round has it.
func adoptQueue(old map[string]string, w recordWrite) *adoptedQueue {
	q := w.queue
	if q == nil {
		return nil
	}
	was := shownInRecord(old)
	if was == nil || !was.since.Equal(q.latest.since) || (q.shown != nil && was.due(q.latest, q.now)) {
		return nil
	}
	items := maps.Clone(w.items)
	for _, key := range queueItemKeys {
		delete(items, key)
	}
	queueItems(was, items)
	b, _ := json.Marshal(items)
	return &adoptedQueue{shown: was, items: items, json: string(b)}
}

// shownInRecord is what a record's queue items show (addQueueItems), or
// nil when it shows no place, or one this controller cannot read.
func shownInRecord(rec map[string]string) *shownQueue {
	at, err1 := time.Parse(time.RFC3339, rec["steward_position_at"])
	since, err2 := time.Parse(time.RFC3339, rec["steward_waiting_since"])
	if err1 != nil || err2 != nil {
		return nil
	}
	sh := &shownQueue{position: rec["steward_position"], unblock: rec["steward_unblock"], at: at, since: since}
	if n, _ := fmt.Sscanf(sh.position, "%d of %d in the cluster, %d of %d in tenant", &sh.pos, &sh.of, &sh.tenantPos, &sh.tenantOf); n != 4 {
		return nil
	}
	if _, ok := rec["steward_forecast"]; ok {
		sh.known = true
	}
	for key, t := range map[string]*time.Time{"steward_forecast_p50": &sh.p50, "steward_forecast_p90": &sh.p90} {
		if s, ok := rec[key]; ok {
			v, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return nil
			}
			*t = v
		}
	}
	return sh
}
