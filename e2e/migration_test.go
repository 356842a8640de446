package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

const migrationPolicy = twoTiers + `
preemption {
  min_runtime = "0s"
  grace       = "2s"
}
`

// TestMigrationToFreeNode: on two client nodes, a 2-GPU interactive job
// needs the first node whole, where a 1-GPU training job runs, while the
// second node has a GPU free. The training job is checkpointed, stopped
// and resumed on the second node (a migration, not a hold), and the time
// from its stop to its running there is measured over several rounds:
// the figure docs/evaluation.md reports (p50, and p99 as the slowest round).
func TestMigrationToFreeNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "ml")
	second := c.addClient("steward-second", 1)
	ctl := c.startController("ctl", writePolicy(t, migrationPolicy))

	const rounds = 10
	var took []time.Duration
	for i := range rounds {
		filler, train, big := fmt.Sprintf("filler-%d", i), fmt.Sprintf("train-%d", i), fmt.Sprintf("big-%d", i)
		// The filler holds the second node's GPU while the training job
		// is placed, so that it lands on the first node.
		c.workOn(second.NodeID, filler, "ml", "training", 1)
		c.waitRunning(60*time.Second, map[string]int{"ml/" + filler: 1})
		c.work(train, "ml", "training", 1, 1, "priority", "40")
		c.waitRunning(60*time.Second, map[string]int{"ml/" + train: 1})
		first := c.allocIDs("ml", train)
		if a := c.alloc(first[0]); a.NodeID != c.NodeID {
			t.Fatalf("round %d: %s placed on node %s, want the first node %s", i, train, a.NodeID, c.NodeID)
		}
		c.deregister("ml", filler)
		c.waitRunning(60*time.Second, map[string]int{"ml/" + filler: 0})

		c.work(big, "ml", "interactive", 2, 1, "priority", "60")
		c.waitRunning(90*time.Second, map[string]int{"ml/" + big: 1, "ml/" + train: 1})
		// The preemption said where the job goes (the record moves on to
		// "running" within seconds; the controller's log keeps it).
		if want := "preempt: job=ml/" + train + " "; !ctl.Contains(want) || !ctl.Contains("it moves to node "+second.NodeID+", where 1 GPU is free") {
			t.Errorf("round %d: no %q naming the move to %s in the controller's log", i, want, second.NodeID)
		}
		var moved *api.Allocation
		for _, id := range c.allocIDs("ml", train) {
			if a := c.alloc(id); !slices.Contains(first, id) && a.ClientStatus == "running" {
				moved = a
			}
		}
		if moved == nil || moved.NodeID != second.NodeID {
			t.Fatalf("round %d: %s not running on the second node: %+v", i, train, moved)
		}
		stopped := c.alloc(first[0]).TaskStates["work"].FinishedAt
		started := moved.TaskStates["work"].StartedAt
		took = append(took, started.Sub(stopped))
		c.deregister("ml", big)
		c.deregister("ml", train)
		c.waitRunning(60*time.Second, map[string]int{"ml/" + big: 0, "ml/" + train: 0})
	}
	slices.Sort(took)
	t.Logf("migration: stop → running on the other node over %d rounds: p50 %s, p99 (slowest) %s, all %v (grace 2s before the stop)",
		rounds, took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), took)
	if dir := os.Getenv("STEWARD_E2E_LOGDIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "migration.txt"), []byte(fmt.Sprintln(took)), 0o644)
	}
}

// TestMigrationResumesFromCheckpoint: a trainer under steward-exec, with
// the checkpoint root shared by both nodes (as on NFS), is moved to the
// other node and resumes there from the checkpoint it wrote on the signal:
// STEWARD_RESUMED=1.
func TestMigrationResumesFromCheckpoint(t *testing.T) {
	t.Parallel()
	exec := testnomad.Plugin{Name: "steward-exec", Config: fmt.Sprintf(`    checkpoint_root   = %q
    gpu_sample_period = "250ms"`, t.TempDir())}
	c := startClusterWith(t, 2, testnomad.Options{Plugins: []testnomad.Plugin{exec}})
	second := c.addClient("steward-second", 1, exec)
	for _, node := range []string{c.NodeID, second.NodeID} {
		c.waitDriver(node, "steward-exec")
	}
	c.startController("ctl", writePolicy(t, migrationPolicy))

	c.workOn(second.NodeID, "filler", "default", "training", 1)
	c.waitRunning(60*time.Second, map[string]int{"default/filler": 1})
	job := c.RegisterJobFile(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "trainer.nomad.hcl"), map[string]string{
		"trainer_bin": testnomad.TrainerBin(t), "steps": "100000", "step_time": "100ms", "checkpoint_every": "10",
		"save_on_stop": "false", "kill_timeout": "5s",
	})
	r := &trainerRun{t: t, a: c.Agent}
	first := c.WaitForRunningAlloc(t, *job.ID, 60*time.Second)
	if first.NodeID != c.NodeID {
		t.Fatalf("trainer placed on %s, want the first node %s", first.NodeID, c.NodeID)
	}
	r.waitStdout(first, "trainer: step 15\n", 30*time.Second)
	c.deregister("default", "filler")
	c.waitRunning(60*time.Second, map[string]int{"default/filler": 0})

	c.work("big", "default", "interactive", 2, 1, "priority", "60")
	c.waitRunning(90*time.Second, map[string]int{"default/big": 1, "default/" + *job.ID: 1})
	moved := c.alloc(c.allocIDs("default", *job.ID)[0])
	if moved.ID == first.ID || moved.NodeID != second.NodeID {
		t.Fatalf("trainer not moved to the second node: alloc %s on %s", moved.ID, moved.NodeID)
	}
	out := r.waitStdout(moved, "STEWARD_RESUMED=1", 30*time.Second)
	if !strings.Contains(out, "STEWARD_RESUMED=1 STEWARD_RESUME_COUNT=1") {
		t.Errorf("moved trainer does not resume from its checkpoint:\n%s", out)
	}
}

// addClient starts a second client node with gpus simulated GPUs that
// joins the cluster.
func (c *cluster) addClient(name string, gpus int, plugins ...testnomad.Plugin) *testnomad.Agent {
	c.t.Helper()
	return c.addClientSim(name, simGPUs{count: gpus}, plugins...)
}

// addClientSim starts a second client node with the GPUs g.
func (c *cluster) addClientSim(name string, g simGPUs, plugins ...testnomad.Plugin) *testnomad.Agent {
	c.t.Helper()
	opts := g.options(testnomad.Options{LogLevel: "INFO", Plugins: plugins}, c.t.TempDir())
	a := testnomad.StartClient(c.t, c.Agent, name, opts)
	c.waitGPUs(a.NodeID, g.devices())
	return a
}

// workOn registers gpu-work pinned to one node.
func (c *cluster) workOn(nodeID, name, ns, tier string, gpus int) {
	c.t.Helper()
	src, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(c.t), "jobs", "gpu-work.nomad.hcl"))
	if err != nil {
		c.t.Fatal(err)
	}
	job, err := c.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Canonicalize: true,
		Variables: fmt.Sprintf("name = %q\nnamespace = %q\ntier = %q\ngpus = %d\n", name, ns, tier, gpus)})
	if err != nil {
		c.t.Fatal(err)
	}
	job.Constrain(api.NewConstraint("${node.unique.id}", "=", nodeID))
	if _, _, err := c.Client.Jobs().Register(job, nil); err != nil {
		c.t.Fatalf("register %s: %v", name, err)
	}
}

func (c *cluster) alloc(id string) *api.Allocation {
	c.t.Helper()
	a, _, err := c.Client.Allocations().Info(id, nil)
	if err != nil {
		c.t.Fatalf("alloc %s: %v", id, err)
	}
	return a
}

func (c *cluster) deregister(ns, job string) {
	c.t.Helper()
	if _, _, err := c.Client.Jobs().Deregister(job, false, &api.WriteOptions{Namespace: ns}); err != nil {
		c.t.Fatalf("deregister %s/%s: %v", ns, job, err)
	}
}
