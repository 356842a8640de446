package controller

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// The steward-exec driver reports each new checkpoint of a task as a
// "Driver" task event whose details carry its time (driver/
// checkpoint_watch.go); Nomad keeps the last 10 events per task in the
// allocation's TaskStates, which the allocation list already returns.
const (
	checkpointEvent   = "checkpoint-saved"      // Details["steward.event"]
	checkpointAtField = "steward.checkpoint_at" // RFC 3339
	// A task that touched its STEWARD_CHECKPOINT_DONE file after the
	// checkpoint signal: the checkpoint it asked for is written.
	checkpointDoneEvent   = "checkpoint-done"
	checkpointDoneAtField = "steward.checkpoint_done_at" // RFC 3339, nanoseconds
)

// checkpointsDone returns, per task, when it last said that the
// checkpoint a checkpoint signal asked for is written (its driver's
// checkpoint-done events); tasks that never said are absent. A time later
// than its event is taken as the event's.
func checkpointsDone(states map[string]*api.TaskState) map[string]time.Time {
	var out map[string]time.Time
	for name, ts := range states {
		if ts == nil {
			continue
		}
		if at := latestEvent(ts.Events, checkpointDoneEvent, checkpointDoneAtField); !at.IsZero() {
			if out == nil {
				out = map[string]time.Time{}
			}
			out[name] = at
		}
	}
	return out
}

// lastCheckpoint returns when an allocation last saved a checkpoint, as
// its tasks' events say; zero when none says. Of several tasks that
// report checkpoints, the one whose latest is oldest decides: the
// allocation's work is safe only up to there. A task that reports none (a
// sidecar, a driver other than steward-exec) does not count.
func lastCheckpoint(states map[string]*api.TaskState) time.Time {
	var oldest time.Time
	for _, ts := range states {
		if ts == nil {
			continue
		}
		latest := latestCheckpoint(ts.Events)
		if !latest.IsZero() && (oldest.IsZero() || latest.Before(oldest)) {
			oldest = latest
		}
	}
	return oldest
}

// latestCheckpoint is the newest checkpoint time in a task's events.
func latestCheckpoint(events []*api.TaskEvent) time.Time {
	return latestEvent(events, checkpointEvent, checkpointAtField)
}

// latestEvent is the newest time that a task's driver events of a kind
// (Details["steward.event"]) carry in a field (RFC 3339). An unreadable
// time is skipped, and one later than its event (the driver caps it at the
// time it saw the file) is taken as the event's.
func latestEvent(events []*api.TaskEvent, kind, field string) time.Time {
	var latest time.Time
	for _, ev := range events {
		if ev == nil || ev.Type != api.TaskDriverMessage || ev.Details["steward.event"] != kind {
			continue
		}
		at, err := time.Parse(time.RFC3339, ev.Details[field])
		if err != nil {
			continue
		}
		if seen := time.Unix(0, ev.Time); ev.Time != 0 && at.After(seen) {
			at = seen
		}
		if at.After(latest) {
			latest = at
		}
	}
	return latest
}
