package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Builders of the fake cluster's API objects: a GPU node, a job with one
// GPU group "work", its allocations and a blocked evaluation.

func apiNode(id string, gpus int) *api.NodeListStub {
	var inst []*api.NodeDevice
	for i := range gpus {
		inst = append(inst, &api.NodeDevice{ID: fmt.Sprintf("%s-gpu%d", id, i), Healthy: true})
	}
	return &api.NodeListStub{ID: id, Name: id, NodePool: "default", Status: api.NodeStatusReady,
		SchedulingEligibility: api.NodeSchedulingEligible,
		Drivers:               map[string]*api.DriverInfo{"raw_exec": {Detected: true, Healthy: true}},
		NodeResources:         &api.NodeResources{Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "sim", Instances: inst}}}}
}

func apiJob(ns, id, tier string, priority, count, gpus int) *api.Job {
	g := uint64(gpus)
	task := &api.Task{Name: "work", Driver: "raw_exec", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "gpu", Count: &g}}}}
	j := &api.Job{ID: &id, Namespace: &ns, Type: ptr("service"), Priority: &priority, Meta: map[string]string{"steward.tier": tier},
		JobModifyIndex: ptr(uint64(10)), TaskGroups: []*api.TaskGroup{{Name: ptr("work"), Count: &count, Tasks: []*api.Task{task}}}}
	return j
}

func apiAlloc(id string, j *api.Job, node string, gpuIDs []string, started time.Time) *api.AllocationListStub {
	return &api.AllocationListStub{ID: id, Name: *j.ID + ".work[0]", Namespace: *j.Namespace, JobID: *j.ID, TaskGroup: "work", NodeID: node,
		ClientStatus: "running", DesiredStatus: "run", CreateTime: started.UnixNano(),
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"work": {Devices: []*api.AllocatedDeviceResource{{Type: "gpu", DeviceIDs: gpuIDs}}}}},
		TaskStates: map[string]*api.TaskState{"work": {State: "running", StartedAt: started}}}
}

func blockedEval(j *api.Job, queued int, at time.Time) (*api.Evaluation, *api.JobSummary) {
	ev := &api.Evaluation{ID: "eval-" + *j.ID, Namespace: *j.Namespace, JobID: *j.ID, Status: "blocked",
		CreateTime: at.UnixNano(), ModifyTime: at.UnixNano(),
		FailedTGAllocs: map[string]*api.AllocationMetric{"work": {DimensionExhausted: map[string]int{"devices: no GPUs free": 1}}}}
	sum := &api.JobSummary{JobID: *j.ID, Namespace: *j.Namespace, Summary: map[string]api.TaskGroupSummary{"work": {Queued: queued}}}
	return ev, sum
}

// roundClock lets a test move the controller's time.
type roundClock struct{ now time.Time }

func (c *roundClock) get() time.Time { return c.now }

// TestWholeRound runs whole control rounds (observe through the fake's
// reads, plan, act, record) on a node whose 4 GPUs a training job holds
// while an interactive job waits for 2: the round preempts the training
// job with a grace and holds the interactive job; a round after the signal
// delay signals; the round at the deadline holds the victim and resumes
// the beneficiary ahead of the queue.
func TestWholeRound(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	clock := &roundClock{now: t0}
	c.now = clock.get
	c.obs = newObserver(f, c.cfg.StateNamespace)
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
	train := apiJob("ml", "train", "training", 40, 1, 4)
	nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
	cl.jobs["ml/train"], cl.jobs["ml/nb"] = train, nb
	cl.allocs = []*api.AllocationListStub{apiAlloc("a-train", train, "n1", []string{"n1-gpu0", "n1-gpu1", "n1-gpu2", "n1-gpu3"}, t0.Add(-2*time.Hour))}
	ev, sum := blockedEval(nb, 1, t0.Add(-time.Second))
	cl.evals, cl.summary["ml/nb"] = []*api.Evaluation{ev}, sum

	round := func(at time.Time) []string {
		t.Helper()
		clock.now = at
		f.calls = nil
		if _, err := c.reconcile(context.Background()); err != nil {
			t.Fatalf("round at %s: %v", at.Sub(t0), err)
		}
		var writes []string
		for _, call := range f.calls {
			if !strings.HasPrefix(call, "put ") && !strings.HasPrefix(call, "delete ") {
				writes = append(writes, call)
			}
		}
		return writes
	}
	t.Logf("round 1: %q", round(t0))
	t.Logf("round 2: %q", round(t0.Add(signalDelay)))
	t.Logf("round 3: %q", round(t0.Add(signalDelay+2*time.Minute)))
}
