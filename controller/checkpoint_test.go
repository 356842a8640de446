package controller

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
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
