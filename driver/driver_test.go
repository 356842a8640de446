package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/helper/uuid"
	"github.com/hashicorp/nomad/plugins/drivers"
	dtestutil "github.com/hashicorp/nomad/plugins/drivers/testutils"

	"github.com/gpu-steward/steward/internal/safefs"
)

// testDriver is a driver under Nomad's driver test harness, which talks to
// it over the plugin gRPC protocol, as the agent does.
type testDriver struct {
	t *testing.T
	d *Driver
	h *dtestutil.DriverHarness
}

func newTestDriver(t *testing.T, mutate func(*Config)) *testDriver {
	t.Helper()
	d := newDriver(hclog.NewNullLogger(), func() nvmlLib {
		return &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	})
	cfg := DefaultConfig()
	cfg.GPUSamplePeriod = 50 * time.Millisecond
	// Most tests run their tasks as the test's user (root here), in temp
	// dirs other users cannot reach; the user tests restore the defaults.
	cfg.DefaultUser, cfg.DeniedHostUIDs, cfg.DeniedHostGIDs = "", "", ""
	if mutate != nil {
		mutate(&cfg)
	}
	d.cfg, d.ids = cfg, mustIDPolicy(cfg)
	t.Cleanup(d.Shutdown)
	return &testDriver{t: t, d: d, h: dtestutil.NewDriverHarness(t, d)}
}

// task makes a task config with an alloc dir and log FIFOs for it.
func (td *testDriver) task(name string, tc TaskConfig) *drivers.TaskConfig {
	td.t.Helper()
	return td.taskLogs(name, tc, true)
}

// taskLogs makes a task config, with log FIFOs or without (a task that
// never starts leaves Nomad's log collector waiting 4s for a writer).
func (td *testDriver) taskLogs(name string, tc TaskConfig, logs bool) *drivers.TaskConfig {
	td.t.Helper()
	cfg := &drivers.TaskConfig{
		ID:            uuid.Generate(),
		AllocID:       uuid.Generate(),
		Name:          name,
		JobID:         "train-job",
		TaskGroupName: "train",
		Namespace:     "default",
	}
	if err := cfg.EncodeConcreteDriverConfig(&tc); err != nil {
		td.t.Fatalf("encoding task config: %v", err)
	}
	td.t.Cleanup(td.h.MkAllocDir(cfg, logs))
	return cfg
}

// start starts a task and waits until it runs.
func (td *testDriver) start(cfg *drivers.TaskConfig) *drivers.TaskHandle {
	td.t.Helper()
	handle, _, err := td.h.StartTask(cfg)
	if err != nil {
		td.t.Fatalf("StartTask: %v", err)
	}
	if err := td.h.WaitUntilStarted(cfg.ID, 5*time.Second); err != nil {
		td.t.Fatalf("task not running: %v", err)
	}
	td.t.Cleanup(func() { _ = td.h.DestroyTask(cfg.ID, true) })
	return handle
}

// wait waits for the task's exit result.
func (td *testDriver) wait(id string, timeout time.Duration) *drivers.ExitResult {
	td.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ch, err := td.h.WaitTask(ctx, id)
	if err != nil {
		td.t.Fatalf("WaitTask: %v", err)
	}
	select {
	case res := <-ch:
		if res == nil {
			td.t.Fatalf("task %s did not exit within %v", id, timeout)
		}
		return res
	case <-ctx.Done():
		td.t.Fatalf("task %s did not exit within %v", id, timeout)
	}
	return nil
}

// events subscribes to the driver's task events.
func (td *testDriver) events() <-chan *drivers.TaskEvent {
	td.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	td.t.Cleanup(cancel)
	ch, err := td.h.TaskEvents(ctx)
	if err != nil {
		td.t.Fatalf("TaskEvents: %v", err)
	}
	return ch
}

// expectEvent waits for an event of the task whose message contains want.
func expectEvent(t *testing.T, ch <-chan *drivers.TaskEvent, taskID, want string, timeout time.Duration) *drivers.TaskEvent {
	t.Helper()
	deadline := time.After(timeout)
	var seen []string
	for {
		select {
		case ev := <-ch:
			if ev == nil {
				t.Fatalf("event stream closed waiting for %q (seen %q)", want, seen)
			}
			if ev.TaskID == taskID && strings.Contains(ev.Message, want) {
				return ev
			}
			seen = append(seen, ev.Message)
		case <-deadline:
			t.Fatalf("no event containing %q within %v (seen %q)", want, timeout, seen)
		}
	}
}

// noEvent fails if an event of the task arrives within d.
func noEvent(t *testing.T, ch <-chan *drivers.TaskEvent, taskID string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev := <-ch:
			if ev != nil && ev.TaskID == taskID {
				t.Fatalf("unexpected event: %q", ev.Message)
			}
		case <-deadline:
			return
		}
	}
}

func sh(script string) TaskConfig {
	return TaskConfig{Command: "/bin/sh", Args: []string{"-c", script}}
}

func waitFile(t *testing.T, path string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		raw, err := os.ReadFile(path)
		if err == nil && len(raw) > 0 {
			return string(raw)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written within %v", path, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartAndExitCodes(t *testing.T) {
	td := newTestDriver(t, nil)
	for _, tc := range []struct {
		name   string
		script string
		code   int
		signal int
	}{
		{"success", "exit 0", 0, 0},
		{"failure", "exit 3", 3, 0},
		{"killed by a signal", "kill -KILL $$", 128 + 9, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := td.task("t", sh(tc.script))
			if _, _, err := td.h.StartTask(cfg); err != nil {
				t.Fatalf("StartTask: %v", err)
			}
			res := td.wait(cfg.ID, 10*time.Second)
			if res.ExitCode != tc.code || res.Signal != tc.signal {
				t.Errorf("exit code %d signal %d, want %d and %d", res.ExitCode, res.Signal, tc.code, tc.signal)
			}
			st, err := td.h.InspectTask(cfg.ID)
			if err != nil || st.State != drivers.TaskStateExited {
				t.Errorf("InspectTask: %v %v, want exited", st, err)
			}
			if err := td.h.DestroyTask(cfg.ID, false); err != nil {
				t.Errorf("DestroyTask: %v", err)
			}
		})
	}
}

// A bad task config fails StartTask with an error that names the option
// (Nomad shows it as the task's "Driver Failure" event); the plugin keeps
// running tasks.
func TestBadConfig(t *testing.T) {
	td := newTestDriver(t, nil)
	notExec := filepath.Join(t.TempDir(), "train.py")
	if err := os.WriteFile(notExec, []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tc   TaskConfig
		want string
	}{
		{"empty command", TaskConfig{}, "command: must not be empty"},
		{"missing command", TaskConfig{Command: "/no/such/trainer"}, `command "/no/such/trainer"`},
		{"command not on PATH", TaskConfig{Command: "no-such-trainer-xyz"}, "not found in the task's PATH"},
		{"not executable", TaskConfig{Command: notExec}, "not an executable file"},
		{"relative work_dir", TaskConfig{Command: "/bin/true", WorkDir: "tmp"}, "work_dir \"tmp\": must be an absolute path"},
		{"bad checkpoint signal", TaskConfig{Command: "/bin/true", CheckpointSignal: "SIGBOGUS"}, `checkpoint_signal: "SIGBOGUS" is not a signal name`},
		{"preemption file outside the task dir", TaskConfig{Command: "/bin/true", PreemptionFile: "../x"}, "preemption_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := td.taskLogs("bad", tc.tc, false)
			_, _, err := td.h.StartTask(cfg)
			if err == nil {
				t.Fatalf("StartTask succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
	t.Run("bad job meta checkpoint signal", func(t *testing.T) {
		cfg := td.taskLogs("bad", TaskConfig{Command: "/bin/true"}, false)
		cfg.Env[metaCheckpointSignal] = "sometimes"
		_, _, err := td.h.StartTask(cfg)
		if err == nil || !strings.Contains(err.Error(), "job meta steward.checkpoint_signal") {
			t.Fatalf("StartTask: %v, want an error naming the job meta", err)
		}
	})
	// The plugin still works.
	cfg := td.task("good", sh("exit 0"))
	if _, _, err := td.h.StartTask(cfg); err != nil {
		t.Fatalf("StartTask after bad configs: %v", err)
	}
	if res := td.wait(cfg.ID, 10*time.Second); !res.Successful() {
		t.Fatalf("exit %+v", res)
	}
}

func TestEnvironment(t *testing.T) {
	root := t.TempDir()
	td := newTestDriver(t, func(c *Config) { c.CheckpointRoot = root })
	cfg := td.task("train", sh("env > env.txt"))
	cfg.DeviceEnv = map[string]string{envVisibleDevices: "GPU-aaa,GPU-bbb"}
	cfg.Env[envVisibleDevices] = "GPU-aaa,GPU-bbb"
	cfg.Env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3" // the task may not widen its GPUs
	cfg.Env[metaCheckpointSignal] = "SIGUSR2"
	if _, _, err := td.h.StartTask(cfg); err != nil {
		t.Fatalf("StartTask: %v", err)
	}
	td.wait(cfg.ID, 10*time.Second)
	env := waitFile(t, filepath.Join(cfg.TaskDir().Dir, "env.txt"), 5*time.Second)
	wantDir := filepath.Join(root, "default", "train-job", "train", "train")
	for _, want := range []string{
		"CUDA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb\n",
		"NVIDIA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb\n",
		EnvCheckpointDir + "=" + wantDir + "\n",
		EnvCheckpointDirPersistent + "=1\n",
		EnvCheckpointSignal + "=SIGUSR2\n",
		EnvCheckpointDone + "=" + filepath.Join(wantDir, doneFile) + "\n",
		EnvResumed + "=0\n",
		EnvResumeCount + "=0\n",
	} {
		if !strings.Contains(env, want) {
			t.Errorf("task environment lacks %q:\n%s", strings.TrimSpace(want), env)
		}
	}
	if info, err := os.Stat(wantDir); err != nil || !info.IsDir() {
		t.Errorf("checkpoint dir %s not created: %v", wantDir, err)
	}

	// Without checkpoint_root the dir is in the alloc dir, and a task
	// without GPUs sees none.
	td2 := newTestDriver(t, nil)
	cfg2 := td2.task("train", sh("env > env.txt"))
	if _, _, err := td2.h.StartTask(cfg2); err != nil {
		t.Fatalf("StartTask: %v", err)
	}
	td2.wait(cfg2.ID, 10*time.Second)
	env = waitFile(t, filepath.Join(cfg2.TaskDir().Dir, "env.txt"), 5*time.Second)
	for _, want := range []string{
		EnvCheckpointDir + "=" + filepath.Join(cfg2.AllocDir, "alloc", "data", "steward-checkpoint", "train") + "\n",
		EnvCheckpointDirPersistent + "=0\n",
		EnvCheckpointSignal + "=SIGUSR1\n",
		"CUDA_VISIBLE_DEVICES=\n",
	} {
		if !strings.Contains(env, want) {
			t.Errorf("task environment lacks %q:\n%s", strings.TrimSpace(want), env)
		}
	}
}

// The checkpoint signal reaches the task, becomes a task event (with the
// reason and grace from the preemption file), and marks the next start as
// a resume.
func TestCheckpointSignal(t *testing.T) {
	root := t.TempDir()
	td := newTestDriver(t, func(c *Config) { c.CheckpointRoot = root })
	events := td.events()
	cfg := td.task("train", sh(`trap 'echo checkpoint >> got' USR1; trap 'exit 0' INT; echo > ready; while :; do sleep 0.05; done`))
	td.start(cfg)
	waitFile(t, filepath.Join(cfg.TaskDir().Dir, "ready"), 5*time.Second)
	local := filepath.Join(cfg.TaskDir().Dir, "local")
	if err := os.WriteFile(filepath.Join(local, "steward-preemption.env"),
		[]byte("reason=tier training yields 1 GPU to ml/serve/main\ngrace=2m\npreemptions=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Another signal is forwarded without an event.
	if err := td.h.SignalTask(cfg.ID, "SIGWINCH"); err != nil {
		t.Fatalf("SignalTask(SIGWINCH): %v", err)
	}
	noEvent(t, events, cfg.ID, 200*time.Millisecond)

	if err := td.h.SignalTask(cfg.ID, "SIGUSR1"); err != nil {
		t.Fatalf("SignalTask: %v", err)
	}
	ev := expectEvent(t, events, cfg.ID, "checkpoint requested (SIGUSR1): preemption in 2m: tier training yields 1 GPU to ml/serve/main", 5*time.Second)
	if ev.Annotations["steward.event"] != "checkpoint" || ev.Annotations["preemptions"] != "1" {
		t.Errorf("annotations %v", ev.Annotations)
	}
	waitFile(t, filepath.Join(cfg.TaskDir().Dir, "got"), 5*time.Second)

	// A second signal to the same allocation is the same preemption.
	if err := td.h.SignalTask(cfg.ID, "usr1"); err != nil {
		t.Fatalf("SignalTask: %v", err)
	}
	ev = expectEvent(t, events, cfg.ID, "checkpoint requested", 5*time.Second)
	if ev.Annotations["preemptions"] != "1" {
		t.Errorf("repeated signal counted as preemption %s", ev.Annotations["preemptions"])
	}

	if err := td.h.SignalTask(cfg.ID, "SIGNOPE"); err == nil {
		t.Errorf("SignalTask(SIGNOPE) succeeded")
	}
	if err := td.h.StopTask(cfg.ID, 5*time.Second, "SIGINT"); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	td.wait(cfg.ID, 5*time.Second)

	// The job runs again, in a new allocation: it is told it resumes.
	cfg2 := td.task("train", sh("env > env.txt"))
	td.h.StartTask(cfg2)
	expectEvent(t, events, cfg2.ID, "resuming after preemption 1: STEWARD_RESUMED=1, checkpoints in "+filepath.Join(root, "default/train-job/train/train"), 5*time.Second)
	td.wait(cfg2.ID, 10*time.Second)
	env := waitFile(t, filepath.Join(cfg2.TaskDir().Dir, "env.txt"), 5*time.Second)
	if !strings.Contains(env, EnvResumed+"=1\n") || !strings.Contains(env, EnvResumeCount+"=1\n") {
		t.Errorf("resumed task's environment lacks %s=1 and %s=1:\n%s", EnvResumed, EnvResumeCount, env)
	}

	// The resume is consumed: the run after it is not a resume.
	cfg3 := td.task("train", sh("env > env.txt"))
	td.h.StartTask(cfg3)
	td.wait(cfg3.ID, 10*time.Second)
	env = waitFile(t, filepath.Join(cfg3.TaskDir().Dir, "env.txt"), 5*time.Second)
	if !strings.Contains(env, EnvResumed+"=0\n") || !strings.Contains(env, EnvResumeCount+"=1\n") {
		t.Errorf("third run: want %s=0 and %s=1:\n%s", EnvResumed, EnvResumeCount, env)
	}
}

// A task that was asked to checkpoint and then finished by itself was not
// preempted: its next run is not a resume.
func TestCheckpointThenCompleted(t *testing.T) {
	root := t.TempDir()
	td := newTestDriver(t, func(c *Config) { c.CheckpointRoot = root })
	cfg := td.task("train", sh(`trap 'exit 0' USR1; echo > ready; while :; do sleep 0.05; done`))
	td.start(cfg)
	waitFile(t, filepath.Join(cfg.TaskDir().Dir, "ready"), 5*time.Second)
	if err := td.h.SignalTask(cfg.ID, "SIGUSR1"); err != nil {
		t.Fatalf("SignalTask: %v", err)
	}
	if res := td.wait(cfg.ID, 5*time.Second); !res.Successful() {
		t.Fatalf("exit %+v", res)
	}
	dir, err := safefs.OpenDir(filepath.Join(root, "default/train-job/train/train"))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	m, err := readMarker(dir)
	if err != nil || m.Pending || m.Preemptions != 0 {
		t.Errorf("marker %+v (%v), want no pending preemption", m, err)
	}
}

// StopTask sends the kill signal, and SIGKILLs the whole process group
// after the timeout when the task ignores it.
func TestStopTask(t *testing.T) {
	td := newTestDriver(t, nil)
	for _, tc := range []struct {
		name       string
		script     string
		signal     string
		timeout    time.Duration
		minTime    time.Duration
		wantSignal int
	}{
		{"exits on the kill signal", `trap 'exit 0' TERM; echo > ready; while :; do sleep 0.05; done`, "SIGTERM", 10 * time.Second, 0, 0},
		{"default kill signal is SIGINT", `trap 'exit 0' INT; echo > ready; while :; do sleep 0.05; done`, "", 10 * time.Second, 0, 0},
		{"ignores it: killed after the timeout", `trap '' TERM INT; echo > ready; while :; do sleep 0.05; done`, "SIGTERM", time.Second, time.Second, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := td.task("t", sh(tc.script))
			handle := td.start(cfg)
			var st taskState
			if err := handle.GetDriverState(&st); err != nil {
				t.Fatal(err)
			}
			waitFile(t, filepath.Join(cfg.TaskDir().Dir, "ready"), 5*time.Second)
			start := time.Now()
			if err := td.h.StopTask(cfg.ID, tc.timeout, tc.signal); err != nil {
				t.Fatalf("StopTask: %v", err)
			}
			took := time.Since(start)
			res := td.wait(cfg.ID, 5*time.Second)
			if res.Signal != tc.wantSignal {
				t.Errorf("exit %+v, want signal %d", res, tc.wantSignal)
			}
			if took < tc.minTime || took > tc.minTime+3*time.Second {
				t.Errorf("StopTask took %v, want about %v", took, tc.minTime)
			}
			// Nothing of the task's process group is left. The kernel reaps a
			// killed group's members asynchronously, and on a loaded machine that
			// takes longer than a fixed pause, so look again until a deadline.
			var procs []procStat
			for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if procs = taskProcesses(st.Pid, st.StartTicks); len(procs) == 0 || time.Now().After(deadline) {
					break
				}
			}
			if len(procs) != 0 {
				t.Errorf("%d processes of the task left 3 s after StopTask", len(procs))
			}
		})
	}
}

// After a plugin restart, a new driver recovers the running task from its
// handle: it can inspect, signal, stop and wait for it.
func TestRecoverTask(t *testing.T) {
	root := t.TempDir()
	td := newTestDriver(t, func(c *Config) { c.CheckpointRoot = root })
	cfg := td.task("train", sh(`trap 'echo checkpoint >> got' USR1; trap 'exit 0' INT; echo > ready; while :; do sleep 0.05; done`))
	handle := td.start(cfg)
	waitFile(t, filepath.Join(cfg.TaskDir().Dir, "ready"), 5*time.Second)

	td2 := newTestDriver(t, func(c *Config) { c.CheckpointRoot = root })
	events := td2.events()
	if _, err := td2.h.InspectTask(cfg.ID); err != drivers.ErrTaskNotFound && (err == nil || !strings.Contains(err.Error(), drivers.ErrTaskNotFound.Error())) {
		t.Fatalf("InspectTask before recovery: %v, want not found", err)
	}
	if err := td2.h.RecoverTask(handle); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	if err := td2.h.RecoverTask(handle); err != nil {
		t.Fatalf("RecoverTask again: %v", err)
	}
	st, err := td2.h.InspectTask(cfg.ID)
	if err != nil || st.State != drivers.TaskStateRunning {
		t.Fatalf("InspectTask after recovery: %+v %v", st, err)
	}
	if err := td2.h.SignalTask(cfg.ID, "SIGUSR1"); err != nil {
		t.Fatalf("SignalTask: %v", err)
	}
	expectEvent(t, events, cfg.ID, "checkpoint requested (SIGUSR1)", 5*time.Second)
	waitFile(t, filepath.Join(cfg.TaskDir().Dir, "got"), 5*time.Second)
	if err := td2.h.StopTask(cfg.ID, 5*time.Second, "SIGINT"); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	if res := td2.wait(cfg.ID, 5*time.Second); res.Err != nil {
		t.Errorf("stopped recovered task: %+v", res)
	}

	// A task that is gone cannot be recovered (Nomad then starts it
	// again).
	td3 := newTestDriver(t, nil)
	if err := td3.h.RecoverTask(handle); err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Errorf("RecoverTask of an ended task: %v, want an error", err)
	}
}

func TestTaskStats(t *testing.T) {
	td := newTestDriver(t, nil)
	cfg := td.task("t", sh(`while :; do :; done`))
	td.start(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := td.h.TaskStats(ctx, cfg.ID, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("TaskStats: %v", err)
	}
	// A busy loop's share of a CPU is what the machine leaves it: on a shared
	// 2-core machine under load it may get a sixth of a core. The test asks
	// that the busiest of the samples shows the loop clearly above an idle
	// process's ~0 %, not that the machine was quiet.
	var last *drivers.TaskResourceUsage
	busiest := 0.0
	for i := 0; i < 6; i++ {
		select {
		case last = <-ch:
			busiest = max(busiest, last.ResourceUsage.CpuStats.Percent)
		case <-time.After(5 * time.Second):
			t.Fatal("no stats")
		}
	}
	ru := last.ResourceUsage
	if ru.MemoryStats.RSS == 0 {
		t.Errorf("RSS 0")
	}
	if busiest < 5 {
		t.Errorf("CPU at most %.1f%% for a busy loop over 6 samples", busiest)
	}
	if len(last.Pids) == 0 {
		t.Errorf("no per-process stats")
	}
}

// The simulated GPU's activity (the file the task writes) becomes one
// idle event and one busy event, with hysteresis.
func TestGPUIdleBusyEvents(t *testing.T) {
	td := newTestDriver(t, func(c *Config) {
		c.IdleAfter = 300 * time.Millisecond
		c.BusyAfter = 150 * time.Millisecond
	})
	events := td.events()
	activity := filepath.Join(t.TempDir(), "utilization")
	write := func(v string) {
		if err := os.WriteFile(activity, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("80")
	cfg := td.task("t", sh(`while :; do sleep 0.05; done`))
	cfg.DeviceEnv = map[string]string{envVisibleDevices: "SIM-GPU-1-0", "STEWARD_SIM_ACTIVITY_FILES": activity}
	td.start(cfg)
	noEvent(t, events, cfg.ID, 400*time.Millisecond)

	write("2")
	ev := expectEvent(t, events, cfg.ID, "GPU idle: the task's processes use 2% of SIM-GPU-1-0 (under 10%)", 5*time.Second)
	if ev.Annotations["steward.event"] != "gpu-idle" {
		t.Errorf("annotations %v", ev.Annotations)
	}
	// Between the thresholds: still idle, no event.
	write("15")
	noEvent(t, events, cfg.ID, 500*time.Millisecond)
	write("90")
	expectEvent(t, events, cfg.ID, "GPU busy again: the task's processes use 90% of SIM-GPU-1-0 (20% or more)", 5*time.Second)
	noEvent(t, events, cfg.ID, 500*time.Millisecond)

	st, err := td.h.InspectTask(cfg.ID)
	if err != nil || st.DriverAttributes["gpu_utilization"] != "90" {
		t.Errorf("InspectTask attributes %v (%v), want gpu_utilization 90", st.DriverAttributes, err)
	}
}
