package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestPlaceholderGrowsInOnePlan checks what the controller counts on when
// it registers a placeholder again with more GPUs (controller
// syncPlaceholders: GPUs promised while still draining, held once they
// free): Nomad replaces its allocation in one plan, on the GPUs it held
// and those now free, and where fewer are free than asked it keeps the
// allocation that runs (the GPUs it held stay held) rather than stopping
// it. Nomad's behaviour alone, no controller: a job shaped as a
// placeholder (pinned to the node, the GPUs, a sleep).
func TestPlaceholderGrowsInOnePlan(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	c.waitDriver(c.NodeID, "raw_exec")
	hold := func(gpus int) *api.Job {
		return &api.Job{
			ID: ptr("hold"), Name: ptr("hold"), Namespace: ptr("ml"), Type: ptr(api.JobTypeBatch),
			Datacenters: []string{"*"},
			Constraints: []*api.Constraint{{LTarget: "${node.unique.id}", Operand: "=", RTarget: c.NodeID}},
			TaskGroups: []*api.TaskGroup{{
				Name: ptr("hold"), Count: ptr(1),
				RestartPolicy:    &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
				ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)},
				Tasks: []*api.Task{{Name: "hold", Driver: "raw_exec", KillTimeout: ptr(time.Second),
					Config:    map[string]any{"command": "/bin/sleep", "args": []string{"300"}},
					Resources: &api.Resources{CPU: ptr(1), MemoryMB: ptr(10), Devices: []*api.RequestedDevice{{Name: "gpu", Count: ptr(uint64(gpus))}}}}},
			}},
		}
	}
	register := func(j *api.Job) {
		t.Helper()
		if _, _, err := c.Client.Jobs().Register(j, nil); err != nil {
			t.Fatal(err)
		}
	}
	// heldGPUs is the GPUs of the hold job's allocations meant to run.
	heldGPUs := func() (allocs, gpus int) {
		stubs, _, err := c.Client.Jobs().Allocations("hold", false, &api.QueryOptions{Namespace: "ml"})
		if err != nil {
			return -1, -1
		}
		for _, s := range stubs {
			if s.DesiredStatus != "run" || s.ClientStatus != "running" {
				continue
			}
			a, _, err := c.Client.Allocations().Info(s.ID, &api.QueryOptions{Namespace: "ml"})
			if err != nil {
				return -1, -1
			}
			allocs++
			for _, d := range a.AllocatedResources.Tasks["hold"].Devices {
				gpus += len(d.DeviceIDs)
			}
		}
		return allocs, gpus
	}
	waitHeld := func(want int) {
		t.Helper()
		testnomad.WaitFor(t, 30*time.Second, fmt.Sprintf("the hold job running with %d GPUs", want), func() (bool, string) {
			n, g := heldGPUs()
			return n == 1 && g == want, fmt.Sprintf("%d allocations, %d GPUs", n, g)
		})
	}

	register(hold(1))
	waitHeld(1)
	c.work("train", "ml", "training", 2, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	// The victim stops: 3 GPUs free. The hold grows to 3.
	if _, _, err := c.Client.Jobs().Deregister("train", true, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(30*time.Second, map[string]int{"ml/train": 0})
	register(hold(3))
	waitHeld(3)
	// In one plan: the plan that stopped the allocation holding 1 GPU
	// placed the one holding 3 (no moment with the GPUs free).
	stubs, _, err := c.Client.Jobs().Allocations("hold", true, &api.QueryOptions{Namespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	var stopped, placed []uint64
	for _, s := range stubs {
		a, _, err := c.Client.Allocations().Info(s.ID, &api.QueryOptions{Namespace: "ml"})
		if err != nil {
			t.Fatal(err)
		}
		if a.DesiredStatus == "run" {
			placed = append(placed, a.CreateIndex)
		} else {
			stopped = append(stopped, a.AllocModifyIndex)
		}
	}
	if len(stopped) != 1 || len(placed) != 1 || stopped[0] != placed[0] {
		t.Errorf("the old allocation stopped at index %v, the new one placed at %v: want one plan", stopped, placed)
	}
	// One GPU is left; other work takes it. Asked for 4, the hold keeps
	// its 3 while the fourth is taken.
	c.work("other", "ml", "training", 1, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/other": 1})
	register(hold(4))
	time.Sleep(5 * time.Second)
	if n, g := heldGPUs(); n != 1 || g != 3 {
		t.Fatalf("asked for more GPUs than are free: %d allocations with %d GPUs, want its one with 3", n, g)
	}
}
