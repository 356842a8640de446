package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testdocker"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestPlaceholderOnDockerOnlyNode is TestPlaceholderKeepsFreeGPUs on a GPU
// node that runs containers alone (issue 30 item 3): no raw_exec, no
// steward-exec, Nomad's docker driver only, on the production-shaped
// cluster. Tenants' work is containers there. A 4-GPU interactive job
// waits while a 2-GPU training job checkpoints for it; Steward holds the 2
// free GPUs beside it with a placeholder under docker (the image given
// with -placeholder-image, in the run's daemon, never pulled), so a 1-GPU
// job submitted during the grace waits, and the interactive job runs once
// the victim stops, the placeholder gone. Before, a node without
// steward-exec or raw_exec got no placeholder, and Nomad placed the 1-GPU
// job on the GPUs promised to the interactive one.
func TestPlaceholderOnDockerOnlyNode(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{extra: dockerOnly(t, testnomad.Options{})}, "ml")
	c.waitDriver(c.NodeID, "docker")
	n, _, err := c.Client.Nodes().Info(c.NodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"raw_exec", "steward-exec", "exec"} {
		if n.Drivers[d] != nil && n.Drivers[d].Healthy {
			t.Fatalf("the GPU node has %s: it must run containers alone", d)
		}
	}
	ctl := c.startController("ctl", writePolicy(t, placeholderPolicy), "-placeholder-image", testdocker.Image("shell"))

	c.dockerWork("train", "training", 2, 40)
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.dockerWork("big", "interactive", 4, 60)
	c.waitRecord(30*time.Second, "ml", "big", "steward_reason", "GPUs are being freed for it: 2 GPUs of ml/train checkpoint")

	var ph *api.JobListStub
	testnomad.WaitFor(t, 30*time.Second, "a running placeholder in namespace steward", func() (bool, string) {
		jobs, _, err := c.Client.Jobs().List(&api.QueryOptions{Namespace: "steward", Prefix: "steward-hold-"})
		if err != nil || len(jobs) != 1 {
			return false, fmt.Sprintf("%d placeholders, %v", len(jobs), err)
		}
		ph = jobs[0]
		var events string
		if ids := c.allocIDsAll("steward", ph.ID); len(ids) > 0 {
			events = taskEventsOf(c.alloc(ids[0]))
		}
		return c.running("steward", ph.ID) == 1, "placeholder " + ph.ID + " not running yet" + events
	})
	job, _, err := c.Client.Jobs().Info(ph.ID, &api.QueryOptions{Namespace: "steward"})
	if err != nil {
		t.Fatal(err)
	}
	task := job.TaskGroups[0].Tasks[0]
	if task.Driver != "docker" || task.Config["image"] != testdocker.Image("shell") || task.Config["force_pull"] != false ||
		task.Config["network_mode"] != "none" {
		t.Errorf("placeholder runs under %s with %v, want docker, image %s, force_pull false, network_mode none",
			task.Driver, task.Config, testdocker.Image("shell"))
	}
	if got := job.Meta["steward.placeholder_for"]; got != "ml/big" {
		t.Errorf("placeholder for %q, want ml/big", got)
	}
	if reason := job.Meta["steward.reason"]; !strings.Contains(reason, "holds 2 free GPUs on node") {
		t.Errorf("placeholder reason %q", reason)
	}
	// The image was on the node: no pull.
	if out, err := testdocker.Shared(t).Docker("events", "--since", "10m", "--until", "0s", "--filter", "type=image", "--filter", "event=pull"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("the test daemon pulled an image (%v): %s", err, out)
	}

	// Nomad would place this at once on the free GPUs: the placeholder
	// holds them, so it waits (and Steward holds it).
	c.dockerWork("sneak", "training", 1, 40)
	deadline := time.Now().Add(40 * time.Second)
	for c.running("ml", "big") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("ml/big not running 40 s after the preemption; controller log:\n%s", tail(ctl.Log(), 40))
		}
		if n := c.running("ml", "sneak"); n != 0 {
			t.Fatalf("ml/sneak runs (%d) while ml/big waits for the victim's GPUs", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.waitRunning(30*time.Second, map[string]int{"ml/big": 1, "ml/train": 0, "ml/sneak": 0})
	testnomad.WaitFor(t, 20*time.Second, "the placeholder purged", func() (bool, string) {
		_, _, err := c.Client.Jobs().Info(ph.ID, &api.QueryOptions{Namespace: "steward"})
		return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprint(err)
	})
	if !ctl.Contains("placeholder registered") || !ctl.Contains("placeholder purged") {
		t.Errorf("the controller's log does not show the placeholder registered and purged:\n%s", tail(ctl.Log(), 40))
	}
	// The victim was asked to checkpoint, in its container.
	if out := c.taskStdout("ml", "train"); !strings.Contains(out, "checkpoint requested") {
		t.Errorf("ml/train's output has no checkpoint request:\n%s", out)
	}
}

// dockerWork registers a tenant's GPU job in namespace ml that runs in a
// container of Steward's shell image (network_mode none), as
// jobs/gpu-work.nomad.hcl does under raw_exec: it prints "checkpoint
// requested" on SIGUSR1 (the policy's checkpoint signal) and stops on
// SIGTERM.
func (c *cluster) dockerWork(name, tier string, gpus, prio int) {
	c.t.Helper()
	c.dockerWorkIn("ml", name, tier, gpus, prio)
}

// dockerWorkIn is dockerWork in namespace ns.
func (c *cluster) dockerWorkIn(ns, name, tier string, gpus, prio int) {
	c.t.Helper()
	script := `trap 'echo "$(date -u +%FT%TZ) checkpoint requested"' USR1
trap 'echo stopping; exit 0' TERM INT
echo "running on $NVIDIA_VISIBLE_DEVICES"
while true; do sleep 1 & wait $! || true; done`
	job := &api.Job{ID: ptr(name), Name: ptr(name), Namespace: ptr(ns), Type: ptr("service"), Priority: ptr(prio),
		Datacenters: []string{"*"}, Meta: map[string]string{"steward.tier": tier},
		TaskGroups: []*api.TaskGroup{{Name: ptr("work"), Count: ptr(1),
			RestartPolicy:    &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)},
			Tasks: []*api.Task{{Name: "work", Driver: "docker", KillTimeout: ptr(5 * time.Second),
				Config: map[string]any{"image": testdocker.Image("shell"), "network_mode": "none", "force_pull": false,
					"args": []string{"-c", script}},
				Resources: &api.Resources{CPU: ptr(20), MemoryMB: ptr(16),
					Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(gpus))}}}}}}}}
	if _, _, err := c.Client.Jobs().Register(job, nil); err != nil {
		c.t.Fatalf("register %s: %v", name, err)
	}
}

// allocIDsAll lists a job's allocations, whatever their status.
func (c *cluster) allocIDsAll(ns, job string) []string {
	allocs, _, err := c.Client.Jobs().Allocations(job, true, &api.QueryOptions{Namespace: ns})
	if err != nil {
		return nil
	}
	var ids []string
	for _, a := range allocs {
		ids = append(ids, a.ID)
	}
	return ids
}

// taskStdout is the work task's stdout in each of a job's allocations.
func (c *cluster) taskStdout(ns, job string) string {
	var b strings.Builder
	for _, id := range c.allocIDsAll(ns, job) {
		r, err := c.Client.AllocFS().Cat(c.alloc(id), "alloc/logs/work.stdout.0", nil)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", id[:8], err)
			continue
		}
		b.WriteString(readAll(r))
	}
	return b.String()
}
