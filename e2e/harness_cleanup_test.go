package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/devagent"
	"github.com/gpu-steward/steward/internal/procs"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestAgentStopLeavesNoProcess checks that the harness's Stop (which
// t.Cleanup runs, failed test or not) ends every process a test's agent
// started: the task and its `nomad executor` too, which run in sessions of
// their own. The task ignores SIGINT, as a busy shell script in effect
// does, so that it takes its kill_timeout to die.
//
//   - A job purged just before the agent stops (as TestSimGPUsOnRealAgent's
//     clean-up did) left its executor and task running for good (#17): Stop
//     now waits for them before it stops the agent, and kills nothing.
//   - An agent killed outright stops nothing: Stop kills what it left.
func TestAgentStopLeavesNoProcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		purge      bool // purge the job before Stop
		killAgent  bool // SIGKILL the agent before Stop
		wantKilled bool // Stop had to kill leftovers
	}{
		{name: "job left running", wantKilled: false},
		{name: "job purged just before", purge: true, wantKilled: false},
		{name: "agent killed", killAgent: true, wantKilled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := testnomad.Start(t, testnomad.Options{LogLevel: "INFO"})
			job := stubbornJob()
			if _, _, err := a.Client.Jobs().Register(job, nil); err != nil {
				t.Fatalf("registering job: %v", err)
			}
			a.WaitForRunningAlloc(t, *job.ID, 60*time.Second)

			// Its executor and its task run outside the agent's process
			// group.
			agentGroup := a.Pid()
			var before []procs.Proc
			testnomad.WaitFor(t, 30*time.Second, "the task's executor and its sleep under the data dir", func() (bool, string) {
				before, _ = devagent.Under(a.DataDir, func(p procs.Proc) bool { return p.Pgid == agentGroup })
				return hasProc(before, "executor") && hasProc(before, "sleep"), describe(before)
			})

			if tc.purge {
				if _, _, err := a.Client.Jobs().Deregister(*job.ID, true, nil); err != nil {
					t.Fatalf("purging job: %v", err)
				}
			}
			if tc.killAgent {
				if err := syscall.Kill(a.Pid(), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				testnomad.WaitFor(t, 10*time.Second, "the agent to exit", func() (bool, string) { return a.Exited(), "running" })
			}
			start := time.Now()
			a.Stop()
			t.Logf("Stop took %v; killed %d processes:%s", time.Since(start).Round(time.Millisecond), len(a.Killed), describe(a.Killed))

			if left, err := devagent.Under(a.DataDir, nil); err != nil || len(left) > 0 {
				t.Errorf("processes still running under %s after Stop (%v):%s", a.DataDir, err, describe(left))
			}
			if tc.wantKilled != (len(a.Killed) > 0) {
				t.Errorf("Stop killed %d processes, want kills: %v:%s", len(a.Killed), tc.wantKilled, describe(a.Killed))
			}
			if tc.wantKilled && !hasProc(a.Killed, "executor") {
				t.Errorf("Stop did not kill the orphaned executor:%s", describe(a.Killed))
			}
		})
	}
}

// stubbornJob runs a task that ignores SIGINT, so that it dies only of
// the SIGKILL its kill_timeout brings.
func stubbornJob() *api.Job {
	task := api.NewTask("stubborn", "raw_exec").
		SetConfig("command", "/bin/sh").
		SetConfig("args", []string{"-c", `trap "" INT; echo started; sleep 600`})
	killTimeout := 2 * time.Second
	task.KillTimeout = &killTimeout
	task.Resources = &api.Resources{CPU: ptr(50), MemoryMB: ptr(32)}
	tg := api.NewTaskGroup("stubborn", 1).AddTask(task)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	job := api.NewBatchJob("stubborn", "stubborn", "global", 50).AddTaskGroup(tg)
	job.Datacenters = []string{"*"}
	return job
}

func ptr[T any](v T) *T { return &v }

func hasProc(ps []procs.Proc, word string) bool {
	for _, p := range ps {
		if strings.Contains(p.CommandLine(), word) {
			return true
		}
	}
	return false
}

func describe(ps []procs.Proc) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("\n    ")
		b.WriteString(p.CommandLine())
	}
	return b.String()
}
