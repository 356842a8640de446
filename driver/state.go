package driver

import (
	"sync"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"
)

// taskHandleVersion is the version of taskState in a TaskHandle.
const taskHandleVersion = 1

// taskState is what Nomad keeps for the driver in the task's handle, and
// gives back in RecoverTask after the client (and so the plugin)
// restarted.
type taskState struct {
	TaskConfig   *drivers.TaskConfig
	DriverConfig TaskConfig
	Pid          int
	// StartTicks tells the task's process from a later one with the same
	// pid.
	StartTicks    uint64
	StartedAt     time.Time
	CheckpointDir string
	// Checkpoint is how to reach CheckpointDir without following
	// symlinks (empty in the state of an older plugin version).
	Checkpoint           ckptLoc
	CheckpointPersistent bool
	CheckpointSignal     string
	// JobUID is the job's own uid the task runs as (0: none), marked used
	// when the task ends.
	JobUID uint32
}

// taskStore holds the handles of the tasks this plugin process runs.
type taskStore struct {
	mu    sync.RWMutex
	tasks map[string]*taskHandle
}

func newTaskStore() *taskStore { return &taskStore{tasks: map[string]*taskHandle{}} }

func (s *taskStore) set(id string, h *taskHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[id] = h
}

func (s *taskStore) get(id string) (*taskHandle, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, ok := s.tasks[id]
	return h, ok
}

func (s *taskStore) delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tasks, id)
}
