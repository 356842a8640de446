package controller

import (
	"os"

	"github.com/hashicorp/go-hclog"
)

// CrashAtEnv names a step at which the controller exits at once, as if it
// were killed there; for tests of what a crash between two steps leaves
// behind (e2e/controller_crash_test.go). Unset in any real deployment.
const CrashAtEnv = "STEWARD_CRASH_AT"

// Steps a crash can be asked for: each lies between writing an intent to
// the job's state and the Nomad call that carries it out.
const (
	stepPreemptRecorded = "preempt-recorded"  // drain saved; no record, no signal yet
	stepSignalRecorded  = "signal-recorded"   // signal time set, saved with the next write; not sent
	stepHoldRecorded    = "hold-recorded"     // preemption finished in state; victims not stopped, group not scaled
	stepResumeRecorded  = "resume-recorded"   // release saved; group not scaled up
	stepHoldBackRecord  = "holdback-recorded" // hold of queued work saved; group not scaled down
)

// crashAt is the step at which the controller exits, from CrashAtEnv
// ("" in any real deployment), and the log that says so. The actor, which
// reaches the steps, is handed point.
type crashAt struct {
	step string
	log  hclog.Logger
}

// point exits the process when the test asked for a crash here.
func (ca crashAt) point(step string) {
	if ca.step != "" && ca.step == step {
		ca.log.Error("crash point reached: exiting at once", "step", step)
		os.Exit(86)
	}
}
