package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testdocker"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// contractGrace is the grace of TestDockerTrainerCheckpointContract's
// policy: long, so that a stop at its end (no early stop) cannot pass for
// an early one.
const contractGrace = 30 * time.Second

// earlyStopBound is how long after a task says its checkpoint is written
// it may still run (issue 30: stop time minus checkpoint time ≤ 2 s).
const earlyStopBound = 2 * time.Second

// TestDockerTrainerCheckpointContract: Steward's checkpoint contract for a
// driver that is not Steward's. On the production-shaped cluster with two
// GPU clients running Nomad's docker driver, the example
// jobs/train-docker.nomad.hcl (jobs/trainer in steward/trainer, no
// network) is preempted for a higher tier: it gets the checkpoint signal,
// checkpoints to the tenant's host volume (one host dir on both clients,
// standing in for shared storage), says so in its task dir, and is stopped
// as soon as it does (measured: its stop minus the file's time, at most
// earlyStopBound, not the 30 s grace), then resumes on the other client
// from its checkpoint with STEWARD_RESUMED=1, which its template rendered
// from the job's record. (The simulated GPUs mount nothing into tasks:
// Nomad would drop the host volume; see sim_task_mounts in docs/reference/devices.md.)
func TestDockerTrainerCheckpointContract(t *testing.T) {
	t.Parallel()
	shared := filepath.Join(t.TempDir(), "checkpoints-ml")
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2, noTaskMounts: true}, {count: 1, noTaskMounts: true}}, extra: dockerExtra(t, testnomad.Options{}),
		volumes: map[string]string{"checkpoints-ml": shared}}, "ml")
	first, second := c.gpuNode(0), c.gpuNode(1)
	for _, n := range []string{first.NodeID, second.NodeID} {
		c.waitDriver(n, "docker")
	}
	ctl := c.startController("ctl", writePolicy(t, twoTiers+fmt.Sprintf(`
preemption {
  min_runtime = "0s"
  grace       = %q
}
`, contractGrace)))

	// The second client busy while the trainer is placed: it lands on the
	// first.
	c.workOn(second.NodeID, "filler", "ml", "training", 1)
	c.waitRunning(60*time.Second, map[string]int{"ml/filler": 1})
	job := c.RegisterJobFile(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "train-docker.nomad.hcl"), map[string]string{
		"namespace": "ml", "image": testdocker.Image("trainer"), "checkpoint_volume": "checkpoints-ml",
		"steps": "100000", "step_time": "100ms", "checkpoint_every": "10", "kill_timeout": "5s",
	})
	r := &trainerRun{t: t, a: c.Agent}
	victim := c.waitJobAlloc("ml", *job.ID, "", 90*time.Second)
	if victim.NodeID != first.NodeID {
		t.Fatalf("trainer placed on %s, want the first client %s", victim.NodeID, first.NodeID)
	}
	out := r.waitStdout(victim, "trainer: step 15\n", 60*time.Second)
	if !strings.Contains(out, "STEWARD_RESUMED=0 STEWARD_RESUME_COUNT=0") {
		t.Errorf("first run not told it starts afresh (the template's default):\n%s", head(out, 5))
	}
	c.deregister("ml", "filler")
	c.waitRunning(60*time.Second, map[string]int{"ml/filler": 0})

	c.work("big", "ml", "interactive", 2, 1, "priority", "60")
	c.waitRunning(90*time.Second, map[string]int{"ml/big": 1})

	// The signal reached the container, which checkpointed and said so.
	out = r.waitStdout(victim, "trainer: checkpoint written at ", 30*time.Second)
	if !strings.Contains(out, "(SIGUSR1 received)") {
		t.Errorf("no signalled checkpoint in the victim's output:\n%s", tail(out, 10))
	}
	var stopped *api.Allocation
	testnomad.WaitFor(t, contractGrace+30*time.Second, "the victim stopped", func() (bool, string) {
		stopped = c.alloc(victim.ID)
		ts := stopped.TaskStates["train"]
		return ts != nil && ts.State == "dead", stopped.ClientStatus
	})
	info, _, err := c.Client.AllocFS().Stat(stopped, "train/local/steward-checkpoint-written", nil)
	if err != nil {
		t.Fatalf("the victim's checkpoint-written file: %v", err)
	}
	if m := regexp.MustCompile(`trainer: checkpoint written at (\S+)`).FindStringSubmatch(out); m != nil {
		if at, err := time.Parse(time.RFC3339Nano, m[1]); err != nil || at.Sub(info.ModTime).Abs() > time.Millisecond {
			t.Errorf("the trainer says it wrote at %s, the file says %s", m[1], info.ModTime)
		}
	}
	late := stopped.TaskStates["train"].FinishedAt.Sub(info.ModTime)
	t.Logf("early stop: the victim stopped %s after its checkpoint-written file (grace %s, bound %s)",
		late.Round(time.Millisecond), contractGrace, earlyStopBound)
	if dir := os.Getenv("STEWARD_E2E_LOGDIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "docker-early-stop.txt"), []byte(late.String()+"\n"), 0o644)
	}
	if late > earlyStopBound || late < 0 {
		t.Errorf("stop minus checkpoint written = %s, want at most %s (the grace is %s)", late, earlyStopBound, contractGrace)
	}
	if !ctl.Contains("checkpoint written (the task's file says so)") {
		t.Errorf("the controller did not read the file")
	}
	// The checkpoint is on the tenant's volume (the host dir both clients
	// mount), not in the container.
	if _, err := os.Stat(filepath.Join(shared, *job.ID, "train", "train", "checkpoint.json")); err != nil {
		var files []string
		_ = filepath.Walk(shared, func(p string, _ os.FileInfo, _ error) error { files = append(files, p); return nil })
		t.Errorf("no checkpoint on the tenant's volume: %v; it holds %q; the victim said:\n%s", err, files, head(out, 4))
	}

	// Resumed on the other client, from its checkpoint, and told so.
	moved := c.waitJobAlloc("ml", *job.ID, victim.ID, 90*time.Second)
	if moved.NodeID != second.NodeID {
		t.Errorf("trainer resumed on %s, want the second client %s", moved.NodeID, second.NodeID)
	}
	out = r.waitStdout(moved, "trainer: step ", 60*time.Second)
	if !strings.Contains(out, "trainer: resuming from checkpoint at step") {
		t.Errorf("resumed trainer did not find its checkpoint:\n%s", head(out, 5))
	}
	if !strings.Contains(out, "STEWARD_RESUMED=1 STEWARD_RESUME_COUNT=1") {
		t.Errorf("resumed trainer not told it resumes:\n%s", head(out, 5))
	}
	t.Logf("resumed: %s", firstLine(out, "trainer: resuming from checkpoint"))
}

// waitJobAlloc waits for a running allocation of the job other than skip
// whose tasks all run, and returns it.
func (c *cluster) waitJobAlloc(ns, job, skip string, timeout time.Duration) *api.Allocation {
	c.t.Helper()
	var found *api.Allocation
	testnomad.WaitFor(c.t, timeout, fmt.Sprintf("a running allocation of %s/%s", ns, job), func() (bool, string) {
		for _, id := range c.allocIDs(ns, job) {
			if id == skip {
				continue
			}
			a := c.alloc(id)
			running := len(a.TaskStates) > 0
			for _, ts := range a.TaskStates {
				running = running && ts.State == "running"
			}
			if running {
				found = a
				return true, ""
			}
			return false, a.ClientStatus + taskEventsOf(a)
		}
		return false, "none"
	})
	return found
}

// head is the first n lines of s.
func head(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// firstLine is the first line of s that contains want.
func firstLine(s, want string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, want) {
			return l
		}
	}
	return ""
}
