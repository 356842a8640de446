package nodesim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/nomad/structs"

	"github.com/gpu-steward/steward/internal/backoff"
)

const (
	// startDelayMin and startDelayMax bound how long a new allocation stays
	// pending before its tasks "start".
	startDelayMin = 100 * time.Millisecond
	startDelayMax = 500 * time.Millisecond
	// watchRetry is the base wait after a failed allocation query.
	watchRetry = time.Second
	// defaultMinHealthy is a deployment's min_healthy_time when the job
	// has no update block.
	defaultMinHealthy = 10 * time.Second
)

// simAlloc is what a node keeps of an allocation placed on it.
type simAlloc struct {
	id          string
	modifyIndex uint64 // AllocModifyIndex last pulled
	tasks       []string
	gpus        []string
	// clientStatus is what the node reported: pending until the start
	// delay passes, then running, then complete or failed.
	clientStatus string
	taskStates   map[string]*structs.TaskState
	// deployment health: reported minHealthy after start when the
	// allocation is part of a deployment.
	deploymentID string
	minHealthy   time.Duration
	healthy      bool
	startTimer   *time.Timer
	healthTimer  *time.Timer
}

func (a *simAlloc) terminal() bool {
	return a.clientStatus == structs.AllocClientStatusComplete ||
		a.clientStatus == structs.AllocClientStatusFailed ||
		a.clientStatus == structs.AllocClientStatusLost
}

func (a *simAlloc) stopTimers() {
	if a.startTimer != nil {
		a.startTimer.Stop()
		a.startTimer = nil
	}
	if a.healthTimer != nil {
		a.healthTimer.Stop()
		a.healthTimer = nil
	}
}

// watchAllocs follows the node's allocations with blocking
// Node.GetClientAllocs queries, pulls the new and changed ones with
// Alloc.GetAllocs and applies them, like the real client's
// watchAllocations.
func (n *node) watchAllocs(ctx context.Context) {
	var index uint64
	failures := 0 // in a row
	for ctx.Err() == nil {
		listed, newIndex, err := n.listAllocs(index)
		if err == nil && newIndex > index {
			var pulled []*structs.Allocation
			if pull, pullIndex := n.toPull(listed); len(pull) > 0 {
				pulled, err = n.pullAllocs(pull, pullIndex)
			}
			if err == nil {
				n.apply(listed, pulled)
				index = newIndex
			}
		}
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if forgotten(err) || strings.Contains(err.Error(), "secret ID does not match") {
			n.f.logger.Info("server forgot the node; registering again", "node", n.name, "error", err)
			if rerr := n.register(); rerr != nil {
				n.f.logger.Warn("registering again", "node", n.name, "error", rerr)
			}
		} else {
			n.f.logger.Warn("watching allocations failed; retrying", "node", n.name, "error", err)
		}
		if !n.sleep(jitter(backoff.Exponential(watchRetry, 10*time.Second, failures))) {
			return
		}
		failures++
	}
}

// listAllocs is one blocking Node.GetClientAllocs query: the node's
// allocations and their AllocModifyIndex.
func (n *node) listAllocs(index uint64) (map[string]uint64, uint64, error) {
	req := structs.NodeSpecificRequest{
		NodeID:   n.id,
		SecretID: n.secret,
		QueryOptions: structs.QueryOptions{
			Region:        n.f.cfg.Region,
			MinQueryIndex: index,
			AllowStale:    index > 0,
			AuthToken:     n.authToken(),
		},
	}
	var resp structs.NodeClientAllocsResponse
	if err := n.link.call("Node.GetClientAllocs", &req, &resp); err != nil {
		return nil, 0, fmt.Errorf("list allocations of node %s: %w", n.name, err)
	}
	return resp.Allocs, resp.Index, nil
}

// toPull returns the allocations that are new or changed on the server,
// and the highest modify index among them.
func (n *node) toPull(listed map[string]uint64) ([]string, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var pull []string
	var maxIndex uint64
	for id, idx := range listed {
		if a, ok := n.allocs[id]; ok && idx <= a.modifyIndex {
			continue
		}
		pull = append(pull, id)
		maxIndex = max(maxIndex, idx)
	}
	return pull, maxIndex
}

// pullAllocs fetches allocations with Alloc.GetAllocs, at an index no
// older than minIndex.
func (n *node) pullAllocs(ids []string, minIndex uint64) ([]*structs.Allocation, error) {
	req := structs.AllocsGetRequest{
		AllocIDs: ids,
		QueryOptions: structs.QueryOptions{
			Region:        n.f.cfg.Region,
			AllowStale:    true,
			MinQueryIndex: minIndex - 1,
			AuthToken:     n.authToken(),
		},
	}
	var resp structs.AllocsGetResponse
	if err := n.link.call("Alloc.GetAllocs", &req, &resp); err != nil {
		return nil, fmt.Errorf("get allocations for node %s: %w", n.name, err)
	}
	if len(resp.Allocs) < len(ids) {
		return nil, fmt.Errorf("get allocations for node %s: got %d of %d", n.name, len(resp.Allocs), len(ids))
	}
	return resp.Allocs, nil
}

// apply brings the node's allocations in line with the server's: new ones
// start after a short delay, ones the server stops complete, ones no
// longer listed (garbage collected) are forgotten.
func (n *node) apply(listed map[string]uint64, pulled []*structs.Allocation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, a := range n.allocs {
		if _, ok := listed[id]; !ok {
			a.stopTimers()
			n.release(a)
			delete(n.allocs, id)
			n.f.setOwner(id, nil)
		}
	}
	for _, alloc := range pulled {
		a, known := n.allocs[alloc.ID]
		if !known {
			a = newSimAlloc(alloc)
			n.allocs[alloc.ID] = a
			n.f.setOwner(alloc.ID, n)
		}
		a.modifyIndex = alloc.AllocModifyIndex
		switch {
		case a.terminal():
		case alloc.ClientTerminalStatus():
			// Already finished as far as the server knows.
			a.stopTimers()
			n.release(a)
			a.clientStatus = alloc.ClientStatus
		case alloc.ServerTerminalStatus():
			n.stop(a)
		case !known && alloc.ClientStatus == structs.AllocClientStatusRunning:
			// Running before this node saw it (not for a new fleet).
			n.markRunning(a, time.Now(), false)
		case !known:
			id := alloc.ID
			delay := startDelayMin + time.Duration(rand.Int64N(int64(startDelayMax-startDelayMin)))
			a.startTimer = time.AfterFunc(delay, func() { n.start(id) })
		}
	}
}

func newSimAlloc(alloc *structs.Allocation) *simAlloc {
	a := &simAlloc{
		id:           alloc.ID,
		clientStatus: structs.AllocClientStatusPending,
		deploymentID: alloc.DeploymentID,
		minHealthy:   defaultMinHealthy,
		taskStates:   map[string]*structs.TaskState{},
	}
	if alloc.Job != nil {
		if tg := alloc.Job.LookupTaskGroup(alloc.TaskGroup); tg != nil {
			for _, t := range tg.Tasks {
				a.tasks = append(a.tasks, t.Name)
			}
			if tg.Update != nil {
				a.minHealthy = tg.Update.MinHealthyTime
			}
		}
	}
	if alloc.AllocatedResources != nil {
		for name, tr := range alloc.AllocatedResources.Tasks {
			if a.tasks == nil || alloc.Job == nil {
				a.tasks = append(a.tasks, name)
			}
			for _, d := range tr.Devices {
				if d.Type == GPUType {
					a.gpus = append(a.gpus, d.DeviceIDs...)
				}
			}
		}
	}
	sort.Strings(a.tasks)
	for _, t := range a.tasks {
		a.taskStates[t] = &structs.TaskState{
			State:  structs.TaskStatePending,
			Events: []*structs.TaskEvent{event(structs.TaskReceived, time.Now())},
		}
	}
	return a
}

// start runs a pending allocation's tasks, when its start delay passed.
func (n *node) start(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.allocs[id]
	if a == nil || a.clientStatus != structs.AllocClientStatusPending || n.f.ctx.Err() != nil {
		return
	}
	a.startTimer = nil
	n.markRunning(a, time.Now(), true)
}

// markRunning marks the tasks running, holds the GPUs and, when report is
// set, reports it. n.mu is held.
func (n *node) markRunning(a *simAlloc, now time.Time, report bool) {
	a.clientStatus = structs.AllocClientStatusRunning
	for _, ts := range a.taskStates {
		ts.State = structs.TaskStateRunning
		ts.StartedAt = now
		ts.Events = append(ts.Events,
			event(structs.TaskSetup, now).SetMessage(structs.TaskBuildingTaskDir),
			event(structs.TaskStarted, now))
	}
	for _, g := range a.gpus {
		n.held[g] = a.id
	}
	if report {
		n.report(a)
	}
	if a.deploymentID != "" && !a.healthy {
		id := a.id
		a.healthTimer = time.AfterFunc(a.minHealthy, func() { n.markHealthy(id) })
	}
}

// markHealthy reports a running deployment allocation healthy.
func (n *node) markHealthy(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.allocs[id]
	if a == nil || a.clientStatus != structs.AllocClientStatusRunning || n.f.ctx.Err() != nil {
		return
	}
	a.healthTimer = nil
	a.healthy = true
	n.report(a)
}

// stop ends an allocation the server stopped: tasks killed, the
// allocation complete. n.mu is held.
func (n *node) stop(a *simAlloc) {
	if a.terminal() {
		return
	}
	now := time.Now()
	a.stopTimers()
	for _, ts := range a.taskStates {
		if ts.State == structs.TaskStateRunning {
			ts.Events = append(ts.Events, event(structs.TaskKilling, now).SetKillTimeout(5*time.Second, 5*time.Second))
		}
		ts.Events = append(ts.Events, event(structs.TaskKilled, now))
		ts.State = structs.TaskStateDead
		ts.FinishedAt = now
	}
	a.clientStatus = structs.AllocClientStatusComplete
	n.release(a)
	n.report(a)
}

// finish ends a running allocation as if its tasks exited.
func (n *node) finish(id string, failed bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.allocs[id]
	if a == nil {
		return fmt.Errorf("nodesim: finish allocation %s: not on node %s", id, n.name)
	}
	if a.clientStatus != structs.AllocClientStatusRunning {
		return fmt.Errorf("nodesim: finish allocation %s: it is %s, not running", id, a.clientStatus)
	}
	now := time.Now()
	code := 0
	a.clientStatus = structs.AllocClientStatusComplete
	if failed {
		code = 1
		a.clientStatus = structs.AllocClientStatusFailed
	}
	a.stopTimers()
	for _, ts := range a.taskStates {
		ts.Events = append(ts.Events, event(structs.TaskTerminated, now).SetExitCode(code))
		ts.State = structs.TaskStateDead
		ts.FinishedAt = now
		ts.Failed = failed
	}
	n.release(a)
	n.report(a)
	return nil
}

// release frees the GPUs an allocation holds. n.mu is held.
func (n *node) release(a *simAlloc) {
	for _, g := range a.gpus {
		if n.held[g] == a.id {
			delete(n.held, g)
		}
	}
}

// report queues the allocation's state for Node.UpdateAlloc. n.mu is
// held; the update is a copy.
func (n *node) report(a *simAlloc) {
	u := &structs.Allocation{
		ID:           a.id,
		NodeID:       n.id,
		ClientStatus: a.clientStatus,
		TaskStates:   make(map[string]*structs.TaskState, len(a.taskStates)),
	}
	switch a.clientStatus {
	case structs.AllocClientStatusRunning:
		u.ClientDescription = "Tasks are running"
	case structs.AllocClientStatusComplete:
		u.ClientDescription = "All tasks have completed"
	case structs.AllocClientStatusFailed:
		u.ClientDescription = "Failed tasks"
	}
	for t, ts := range a.taskStates {
		for _, e := range ts.Events {
			if e.DisplayMessage == "" {
				e.PopulateEventDisplayMessage()
			}
		}
		u.TaskStates[t] = ts.Copy()
	}
	if a.healthy {
		healthy := true
		u.DeploymentStatus = &structs.AllocDeploymentStatus{Healthy: &healthy, Timestamp: time.Now()}
	}
	n.f.updates.add(n, u)
}

func event(typ string, t time.Time) *structs.TaskEvent {
	e := structs.NewTaskEvent(typ)
	e.Time = t.UnixNano()
	return e
}
