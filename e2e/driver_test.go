package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// trainerCheckpointEvery is the trainer's checkpoint interval in this test, in
// steps: the most progress a preemption may cost.
const trainerCheckpointEvery = 10

// TestDriverPreemptionOnRealAgent runs jobs/trainer.nomad.hcl with the
// steward-exec driver on a simulated GPU and preempts it the way Steward's
// controller does: it writes the reason into the job's variable, sends the
// checkpoint signal through the allocation signal API, and holds the job
// (scale to 0) and resumes it (scale to 1). The new allocation must start
// with STEWARD_RESUMED=1, continue from the checkpoint losing at most one
// checkpoint interval, and the driver's events (checkpoint requested,
// checkpoint written, resuming, GPU idle/busy) must be visible through the
// API.
func TestDriverPreemptionOnRealAgent(t *testing.T) {
	t.Parallel()
	started := time.Now()
	trainer := testnomad.TrainerBin(t)
	simDir, ckptRoot := t.TempDir(), t.TempDir()
	a := testnomad.Start(t, testnomad.Options{
		Plugins: []testnomad.Plugin{
			{Name: "steward-gpu", Config: fmt.Sprintf(`    backend       = "sim"
    sim_count     = 2
    sim_state_dir = %q`, simDir)},
			{Name: "steward-exec", Config: fmt.Sprintf(`    checkpoint_root   = %q
    gpu_sample_period = "250ms"
    idle_after        = "2s"
    busy_after        = "1s"`, ckptRoot)},
		},
	})
	r := &trainerRun{t: t, a: a}
	testnomad.WaitFor(t, 60*time.Second, "steward-exec healthy and 2 simulated GPUs on the node", func() (bool, string) {
		node := a.Node(t)
		d := node.Drivers["steward-exec"]
		if d == nil || !d.Healthy {
			return false, fmt.Sprintf("steward-exec driver: %+v", d)
		}
		if node.NodeResources == nil || len(node.NodeResources.Devices) == 0 {
			return false, "no devices yet"
		}
		return true, ""
	})

	job := a.RegisterJobFile(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "trainer.nomad.hcl"), map[string]string{
		"trainer_bin":      trainer,
		"steps":            "100000",
		"step_time":        "100ms",
		"checkpoint_every": strconv.Itoa(trainerCheckpointEvery),
		// Stopped without a checkpoint of its own: what the checkpoint
		// signal and the periodic checkpoints saved is all it keeps.
		"save_on_stop": "false",
		"kill_timeout": "5s",
	})
	jobID := *job.ID
	t.Cleanup(func() { _, _, _ = a.Client.Jobs().Deregister(jobID, true, nil) })
	first := a.WaitForRunningAlloc(t, jobID, 60*time.Second)
	r.waitStdout(first, "trainer: step 25\n", 30*time.Second)
	out := r.stdout(first)
	if !strings.Contains(out, "STEWARD_RESUMED=0 STEWARD_RESUME_COUNT=0") || !strings.Contains(out, "no checkpoint: starting from step 0") {
		t.Fatalf("first run does not start fresh:\n%s", out)
	}

	// The controller: reason and grace into the job's variable, then the
	// checkpoint signal.
	reason := "tier training (priority 40) yields 1 GPU to ml/serve/main, tier inference (priority 90)"
	if _, _, err := a.Client.Variables().Create(&api.Variable{
		Path:  "nomad/jobs/" + jobID,
		Items: api.VariableItems{"steward_state": "checkpointing", "steward_reason": reason, "steward_grace": "2m", "steward_preemptions": "1"},
	}, nil); err != nil {
		t.Fatalf("writing the job's variable: %v", err)
	}
	// The job's template renders it for the driver.
	testnomad.WaitFor(t, 30*time.Second, "the preemption file rendered from the job's variable", func() (bool, string) {
		s, err := r.cat(first, "train/local/steward-preemption.env")
		return err == nil && strings.Contains(s, "grace=2m"), fmt.Sprintf("%q %v", s, err)
	})
	if err := a.Client.Allocations().Signal(first, nil, "train", "SIGUSR1"); err != nil {
		t.Fatalf("signalling the allocation: %v", err)
	}
	ckptStep := r.lastInt(r.waitStdout(first, "received)\n", 30*time.Second), `checkpoint at step (\d+) \(SIGUSR1 received\)`)
	// Some progress after the checkpoint, which the stop will lose.
	r.waitStdout(first, fmt.Sprintf("trainer: step %d\n", ckptStep+3), 30*time.Second)
	wantCheckpointEvent := "checkpoint requested (SIGUSR1): preemption in 2m: " + reason
	r.waitEvent(first.ID, "Driver", wantCheckpointEvent, 30*time.Second)
	// The trainer touches $STEWARD_CHECKPOINT_DONE once the checkpoint is
	// written; the driver reports it, and the controller stops it then.
	r.waitEvent(first.ID, "Driver", "Checkpoint written at ", 30*time.Second)

	// Hold the job (scale to 0): Nomad stops the task with its kill
	// signal, SIGKILL after kill_timeout.
	zero, one := 0, 1
	if _, _, err := a.Client.Jobs().Scale(jobID, "train", &zero, "steward: held for ml/serve/main", false, nil, nil); err != nil {
		t.Fatalf("scaling to 0: %v", err)
	}
	r.waitTerminal(first.ID, 60*time.Second)
	reached := r.lastInt(r.stdout(first), `stopping at step (\d+) \(terminated\) without a checkpoint`)
	t.Logf("first allocation %s: checkpoint at step %d on SIGUSR1, stopped at step %d", first.ID, ckptStep, reached)

	// Resume (scale to 1): a new allocation, told it resumes.
	if _, _, err := a.Client.Jobs().Scale(jobID, "train", &one, "steward: resumed", false, nil, nil); err != nil {
		t.Fatalf("scaling to 1: %v", err)
	}
	var second *api.Allocation
	testnomad.WaitFor(t, 60*time.Second, "a new running allocation", func() (bool, string) {
		alloc := a.WaitForRunningAlloc(t, jobID, 60*time.Second)
		if alloc.ID == first.ID {
			return false, "only the first allocation"
		}
		second = alloc
		return true, ""
	})
	out = r.waitStdout(second, "trainer: resuming from checkpoint", 30*time.Second)
	if !strings.Contains(out, "STEWARD_RESUMED=1 STEWARD_RESUME_COUNT=1") {
		t.Errorf("second run not told it resumes:\n%s", out)
	}
	if want := filepath.Join(ckptRoot, "default", jobID, "train", "train"); !strings.Contains(out, "checkpoint dir "+want) {
		t.Errorf("second run's checkpoint dir is not %s:\n%s", want, out)
	}
	resumeLine := regexp.MustCompile(`resuming from checkpoint at step (\d+) .*previous run reached step (\d+): lost (\d+) steps`).FindStringSubmatch(out)
	if resumeLine == nil {
		t.Fatalf("no resume line in:\n%s", out)
	}
	from, prev, lost := r.atoi(resumeLine[1]), r.atoi(resumeLine[2]), r.atoi(resumeLine[3])
	t.Logf("second allocation %s: resumed from step %d, previous run reached %d, lost %d steps (interval %d)", second.ID, from, prev, lost, trainerCheckpointEvery)
	if from < ckptStep || prev != reached || lost != reached-from || lost > trainerCheckpointEvery {
		t.Errorf("resumed from step %d after a checkpoint at %d and a stop at %d (reported %d, lost %d): want at most %d steps lost",
			from, ckptStep, reached, prev, lost, trainerCheckpointEvery)
	}
	r.waitStdout(second, fmt.Sprintf("trainer: step %d\n", from+1), 30*time.Second)
	r.waitEvent(second.ID, "Driver", "resuming after preemption 1: STEWARD_RESUMED=1", 30*time.Second)

	// TaskStats: the task's CPU and memory reach the allocation's stats.
	testnomad.WaitFor(t, 30*time.Second, "CPU and memory of the task in the allocation's stats", func() (bool, string) {
		usage, err := a.Client.Allocations().Stats(second, nil)
		if err != nil {
			return false, err.Error()
		}
		tu := usage.Tasks["train"]
		if tu == nil || tu.ResourceUsage == nil || tu.ResourceUsage.MemoryStats == nil || tu.ResourceUsage.CpuStats == nil {
			return false, "no task stats yet"
		}
		ru := tu.ResourceUsage
		return ru.MemoryStats.RSS > 0 && len(ru.CpuStats.Measured) > 0,
			fmt.Sprintf("RSS %d, CPU %.1f%% %v", ru.MemoryStats.RSS, ru.CpuStats.Percent, ru.CpuStats.Measured)
	})

	// GPU activity: the trainer reports 80%; idle, then busy again, are
	// one event each.
	gpu := second.AllocatedResources.Tasks["train"].Devices[0].DeviceIDs[0]
	activity := simActivityFile(t, simDir, gpu)
	if err := os.WriteFile(activity, []byte("1\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(second.ID, "Driver", "GPU idle: the task's processes use 1% of "+gpu, 30*time.Second)
	if err := os.WriteFile(activity, []byte("90\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(second.ID, "Driver", "GPU busy again: the task's processes use 90% of "+gpu, 30*time.Second)
	time.Sleep(2 * time.Second)
	if n := r.countEvents(second.ID, "GPU "); n != 2 {
		t.Errorf("%d GPU events, want 2 (one per transition)", n)
	}
	for _, id := range []string{first.ID, second.ID} {
		r.logEvents(id)
	}

	// A bad task config fails that task with a readable event; the
	// plugin, and the trainer, keep running.
	badAlloc := r.registerBadConfigJob(trainer)
	r.waitEvent(badAlloc, "Driver Failure", `invalid steward-exec task config: work_dir "tmp": must be an absolute path`, 30*time.Second)
	r.logEvents(badAlloc)
	r.waitStdout(second, fmt.Sprintf("trainer: step %d\n", from+30), 30*time.Second)
	if d := a.Node(t).Drivers["steward-exec"]; d == nil || !d.Healthy {
		t.Errorf("steward-exec after a bad task config: %+v", d)
	}
	t.Logf("preemption round trip on a real agent took %v", time.Since(started).Round(time.Second))
}

// simActivityFile is the activity file of a simulated GPU's current
// reservation: the newest utilization-* in its dir (the plugin makes a new
// one, with an unguessable name, on each Reserve; the test runs as root
// and may list the dir, tasks may not).
func simActivityFile(t *testing.T, stateDir, gpu string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(stateDir, gpu))
	if err != nil {
		t.Fatalf("reading the activity dir of %s: %v", gpu, err)
	}
	newest := ""
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "utilization-") && e.Name() > newest {
			newest = e.Name()
		}
	}
	if newest == "" {
		t.Fatalf("no activity file for %s in %s", gpu, stateDir)
	}
	return filepath.Join(stateDir, gpu, newest)
}

// registerBadConfigJob registers a job whose steward-exec task has a
// relative work_dir, and returns its allocation's ID.
func (r *trainerRun) registerBadConfigJob(command string) string {
	t, a := r.t, r.a
	t.Helper()
	zero, fail := 0, "fail"
	job := api.NewBatchJob("bad-config", "bad-config", "global", 50)
	job.AddDatacenter("*")
	tg := api.NewTaskGroup("train", 1)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: &zero, Mode: &fail}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: &zero, Unlimited: new(bool)}
	task := api.NewTask("train", "steward-exec")
	task.Config = map[string]any{"command": command, "work_dir": "tmp"}
	task.Resources = &api.Resources{CPU: new(int), MemoryMB: new(int)}
	*task.Resources.CPU, *task.Resources.MemoryMB = 50, 32
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	if _, _, err := a.Client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering the bad-config job: %v", err)
	}
	t.Cleanup(func() { _, _, _ = a.Client.Jobs().Deregister("bad-config", true, nil) })
	var id string
	testnomad.WaitFor(t, 60*time.Second, "an allocation of the bad-config job", func() (bool, string) {
		stubs, _, err := a.Client.Jobs().Allocations("bad-config", true, nil)
		if err != nil || len(stubs) == 0 {
			return false, fmt.Sprintf("%d allocations (%v)", len(stubs), err)
		}
		id = stubs[0].ID
		return true, ""
	})
	return id
}

// trainerRun holds the helpers of the driver's e2e test (methods, so their
// names stay out of the package the other e2e tests share).
type trainerRun struct {
	t *testing.T
	a *testnomad.Agent
}

func (r *trainerRun) atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func (r *trainerRun) lastInt(s, pattern string) int {
	t := r.t
	t.Helper()
	m := regexp.MustCompile(pattern).FindAllStringSubmatch(s, -1)
	if m == nil {
		t.Fatalf("no %q in:\n%s", pattern, s)
	}
	return r.atoi(m[len(m)-1][1])
}

func (r *trainerRun) cat(alloc *api.Allocation, path string) (string, error) {
	a := r.a
	rc, err := a.Client.AllocFS().Cat(alloc, path, nil)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String(), nil
}

func (r *trainerRun) stdout(alloc *api.Allocation) string {
	t, a := r.t, r.a
	t.Helper()
	s, err := readTaskStdout(a, alloc, "train")
	if err != nil {
		t.Fatalf("reading the stdout of allocation %s: %v", alloc.ID, err)
	}
	return s
}

// waitStdout waits until the task's stdout contains want and returns it.
func (r *trainerRun) waitStdout(alloc *api.Allocation, want string, timeout time.Duration) string {
	t, a := r.t, r.a
	t.Helper()
	var out string
	testnomad.WaitFor(t, timeout, fmt.Sprintf("%q in the stdout of allocation %s", want, alloc.ID), func() (bool, string) {
		s, err := readTaskStdout(a, alloc, "train")
		if err != nil {
			return false, err.Error()
		}
		out = s
		lines := strings.Split(strings.TrimSpace(s), "\n")
		return strings.Contains(s, want), "last line: " + lines[len(lines)-1]
	})
	return out
}

func (r *trainerRun) events(allocID string) []*api.TaskEvent {
	t, a := r.t, r.a
	t.Helper()
	alloc, _, err := a.Client.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatalf("reading allocation %s: %v", allocID, err)
	}
	if st := alloc.TaskStates["train"]; st != nil {
		return st.Events
	}
	return nil
}

// waitTaskEvent waits for a task event of the type whose display message
// contains want, as the UI and `nomad alloc status` show it.
func (r *trainerRun) waitEvent(allocID, typ, want string, timeout time.Duration) {
	t := r.t
	t.Helper()
	testnomad.WaitFor(t, timeout, fmt.Sprintf("a %s event %q on allocation %s", typ, want, allocID), func() (bool, string) {
		var seen []string
		for _, e := range r.events(allocID) {
			if e.Type == typ && strings.Contains(e.DisplayMessage, want) {
				return true, ""
			}
			seen = append(seen, e.Type+": "+e.DisplayMessage)
		}
		return false, strings.Join(seen, " | ")
	})
}

func (r *trainerRun) countEvents(allocID, prefix string) int {
	r.t.Helper()
	n := 0
	for _, e := range r.events(allocID) {
		if e.Type == "Driver" && strings.HasPrefix(e.DisplayMessage, prefix) {
			n++
		}
	}
	return n
}

func (r *trainerRun) logEvents(allocID string) {
	t := r.t
	t.Helper()
	var b strings.Builder
	for _, e := range r.events(allocID) {
		fmt.Fprintf(&b, "\n  %-16s %s", e.Type, e.DisplayMessage)
	}
	t.Logf("task events of allocation %s:%s", allocID, b.String())
}

func (r *trainerRun) waitTerminal(allocID string, timeout time.Duration) {
	t, a := r.t, r.a
	t.Helper()
	testnomad.WaitFor(t, timeout, "allocation "+allocID+" to stop", func() (bool, string) {
		alloc, _, err := a.Client.Allocations().Info(allocID, nil)
		if err != nil {
			return false, err.Error()
		}
		return alloc.ClientTerminalStatus(), alloc.ClientStatus
	})
}
