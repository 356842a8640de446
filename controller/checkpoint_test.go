package controller

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// saved is the event the steward-exec driver emits for a checkpoint.
func saved(at, eventAt time.Time) *api.TaskEvent {
	return &api.TaskEvent{Type: api.TaskDriverMessage, Time: eventAt.UnixNano(),
		DriverMessage: "Checkpoint saved at " + at.UTC().Format(time.RFC3339),
		Details:       map[string]string{"steward.event": "checkpoint-saved", "steward.checkpoint_at": at.UTC().Format(time.RFC3339)}}
}

func TestLastCheckpoint(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	task := func(evs ...*api.TaskEvent) *api.TaskState { return &api.TaskState{State: "running", Events: evs} }
	tests := []struct {
		name   string
		states map[string]*api.TaskState
		want   time.Time
	}{
		{"no tasks", nil, time.Time{}},
		{"no checkpoint events", map[string]*api.TaskState{"train": task(
			&api.TaskEvent{Type: "Started", Time: at(0).UnixNano()},
			&api.TaskEvent{Type: api.TaskDriverMessage, Time: at(1).UnixNano(), Details: map[string]string{"steward.event": "gpu-idle"}},
		)}, time.Time{}},
		{"the latest of a task's checkpoints", map[string]*api.TaskState{"train": task(
			saved(at(5), at(5)), saved(at(20), at(20)), saved(at(10), at(10)),
		)}, at(20)},
		{"an unreadable time is skipped", map[string]*api.TaskState{"train": task(
			saved(at(5), at(5)),
			&api.TaskEvent{Type: api.TaskDriverMessage, Time: at(30).UnixNano(),
				Details: map[string]string{"steward.event": "checkpoint-saved", "steward.checkpoint_at": "soon"}},
		)}, at(5)},
		{"not a driver event: ignored", map[string]*api.TaskState{"train": task(
			&api.TaskEvent{Type: "Restart Signaled", Time: at(30).UnixNano(),
				Details: map[string]string{"steward.event": "checkpoint-saved", "steward.checkpoint_at": at(30).Format(time.RFC3339)}},
		)}, time.Time{}},
		{"a time after its event counts as the event's", map[string]*api.TaskState{"train": task(
			saved(at(90), at(12)),
		)}, at(12)},
		{"of two checkpointing tasks the older decides; a silent sidecar does not", map[string]*api.TaskState{
			"trainer":   task(saved(at(20), at(20))),
			"evaluator": task(saved(at(8), at(8))),
			"sidecar":   task(&api.TaskEvent{Type: "Started", Time: at(0).UnixNano()}),
			"gone":      nil,
		}, at(8)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lastCheckpoint(tt.states); !got.Equal(tt.want) {
				t.Errorf("lastCheckpoint = %v, want %v", got, tt.want)
			}
		})
	}
}

// The allocation list's stubs carry the events: the checkpoint reaches the
// engine's Alloc.
func TestCheckpointReachesSnapshot(t *testing.T) {
	stub := &api.AllocationListStub{ID: "a1", Namespace: "ml", JobID: "train", TaskGroup: "work", NodeID: "n1",
		ClientStatus: "running", DesiredStatus: "run", CreateTime: t0.Add(-time.Hour).UnixNano(),
		TaskStates: map[string]*api.TaskState{"train": {State: "running", StartedAt: t0.Add(-time.Hour),
			Events: []*api.TaskEvent{saved(t0.Add(-3*time.Minute), t0.Add(-3*time.Minute))}}},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"train": {Devices: []*api.AllocatedDeviceResource{{Type: "gpu", DeviceIDs: []string{"g0"}}}}}},
	}
	oa := toObservedAlloc(stub)
	if !oa.CheckpointAt.Equal(t0.Add(-3 * time.Minute)) {
		t.Fatalf("observed checkpoint %v", oa.CheckpointAt)
	}
	obs := &Observation{At: t0, Nodes: []ObservedNode{{ID: "n1", GPUs: 8}},
		Jobs:   map[jobKey]*ObservedJob{{"ml", "train"}: job("ml", "train", "training", 40, 1, 1)},
		Allocs: []ObservedAlloc{oa}}
	s := buildSnapshot(testPolicy(t), obs, nil, nil)
	if len(s.Allocs) != 1 || !s.Allocs[0].CheckpointAt.Equal(oa.CheckpointAt) {
		t.Fatalf("snapshot allocs %+v", s.Allocs)
	}
}

// TestDrainEndsWhenCheckpointWritten: a preemption finishes as soon as
// every victim's signalled task has said its checkpoint is written, not at
// the end of the grace; an answer older than the signal, a task that says
// nothing, or a drain whose signal has not gone out yet keeps the grace.
func TestDrainEndsWhenCheckpointWritten(t *testing.T) {
	signaled := t0
	now := t0.Add(40 * time.Second)
	tests := []struct {
		name     string
		done     map[string]time.Time
		sent     bool
		wantStop bool
	}{
		{"written after the signal: stopped now", map[string]time.Time{"work": signaled.Add(30 * time.Second)}, true, true},
		{"a client clock a second behind", map[string]time.Time{"work": signaled.Add(-time.Second)}, true, true},
		{"an answer from before the signal", map[string]time.Time{"work": signaled.Add(-time.Minute)}, true, false},
		{"the task says nothing", nil, true, false},
		{"the signal not sent yet", map[string]time.Time{"work": signaled.Add(30 * time.Second)}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f, withClock(func() time.Time { return now }))
			train := job("ml", "train", "training", 40, 1, 1)
			a := alloc("a1", "train")
			a.CheckpointDone = tt.done
			c.state(jobKey{"ml", "train"}).Draining = []*Drain{{Group: "work", Allocs: []string{"a1"}, Signal: "SIGUSR1",
				Grace: 2 * time.Minute, Decided: signaled.Add(-signalDelay), Signaled: signaled, Deadline: signaled.Add(2 * time.Minute),
				Sent: tt.sent, Requeue: true, Kind: string(engine.Preempt), For: "ml/nb", Rule: "priority", Reason: "for ml/nb"}}
			r := roundWith([]*ObservedJob{train}, []ObservedAlloc{a})
			r.now, r.obs.At = now, now
			c.drains.finishDrains(context.Background(), r)
			stopped := len(f.callsMatching("scale ml/train work 0")) > 0
			if stopped != tt.wantStop {
				t.Fatalf("stopped %v, want %v (calls %q)", stopped, tt.wantStop, f.calls)
			}
		})
	}
}

// checkpointsDone reads the driver's checkpoint-done events per task: the
// latest, capped at the event's own time; other events and unreadable
// times are ignored.
func TestCheckpointsDone(t *testing.T) {
	done := func(at, eventAt time.Time) *api.TaskEvent {
		return &api.TaskEvent{Type: api.TaskDriverMessage, Time: eventAt.UnixNano(),
			Details: map[string]string{"steward.event": "checkpoint-done", "steward.checkpoint_done_at": at.UTC().Format(time.RFC3339Nano)}}
	}
	bad := done(t0, t0)
	bad.Details["steward.checkpoint_done_at"] = "soon"
	states := map[string]*api.TaskState{
		"work":    {Events: []*api.TaskEvent{done(t0, t0.Add(time.Second)), done(t0.Add(time.Minute), t0.Add(time.Minute)), saved(t0.Add(2*time.Minute), t0.Add(2*time.Minute))}},
		"future":  {Events: []*api.TaskEvent{done(t0.Add(time.Hour), t0.Add(time.Second))}},
		"garbled": {Events: []*api.TaskEvent{bad}},
		"sidecar": {},
	}
	got := checkpointsDone(states)
	want := map[string]time.Time{"work": t0.Add(time.Minute), "future": t0.Add(time.Second)}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for task, at := range want {
		if !got[task].Equal(at) {
			t.Errorf("%s: %v, want %v", task, got[task], at)
		}
	}
}
