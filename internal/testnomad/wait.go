package testnomad

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// WaitFor polls cond every 250ms until it returns true, and fails the test
// after timeout with what, and the last status cond reported.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (done bool, status string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var status string
	for {
		var done bool
		done, status = cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last status: %s", timeout, what, status)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Node returns the agent's client node.
func (a *Agent) Node(t testing.TB) *api.Node {
	t.Helper()
	node, _, err := a.Client.Nodes().Info(a.NodeID, nil)
	if err != nil {
		t.Fatalf("reading node %s: %v", a.NodeID, err)
	}
	return node
}

// RegisterJobFile parses a jobspec file with the agent (HCL2, with vars as
// -var values) and registers it. It returns the parsed job.
func (a *Agent) RegisterJobFile(t testing.TB, path string, vars map[string]string) *api.Job {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading job file: %v", err)
	}
	var varLines string
	for k, v := range vars {
		varLines += fmt.Sprintf("%s = %q\n", k, v)
	}
	job, err := a.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{
		JobHCL:       string(src),
		Variables:    varLines,
		Canonicalize: true,
	})
	if err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	if _, _, err := a.Client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering job %s from %s: %v", *job.ID, path, err)
	}
	return job
}

// WaitForRunningAlloc waits until the job has an allocation whose tasks
// are all running, and returns it. It fails early when an allocation fails
// or cannot be placed.
func (a *Agent) WaitForRunningAlloc(t testing.TB, jobID string, timeout time.Duration) *api.Allocation {
	t.Helper()
	var found *api.Allocation
	WaitFor(t, timeout, fmt.Sprintf("a running allocation of job %s", jobID), func() (bool, string) {
		stubs, _, err := a.Client.Jobs().Allocations(jobID, true, nil)
		if err != nil {
			return false, err.Error()
		}
		if len(stubs) == 0 {
			return false, a.placementStatus(jobID)
		}
		for _, s := range stubs {
			switch s.ClientStatus {
			case api.AllocClientStatusRunning:
				alloc, _, err := a.Client.Allocations().Info(s.ID, nil)
				if err != nil {
					return false, err.Error()
				}
				found = alloc
				return true, ""
			case api.AllocClientStatusFailed, api.AllocClientStatusLost:
				t.Fatalf("allocation %s of job %s is %s: %s", s.ID, jobID, s.ClientStatus, taskEvents(s))
			}
		}
		return false, fmt.Sprintf("allocation %s is %s: %s", stubs[0].ID, stubs[0].ClientStatus, taskEvents(stubs[0]))
	})
	return found
}

// placementStatus explains why a job has no allocation yet.
func (a *Agent) placementStatus(jobID string) string {
	evals, _, err := a.Client.Jobs().Evaluations(jobID, nil)
	if err != nil {
		return fmt.Sprintf("no allocations; evaluations: %v", err)
	}
	for _, e := range evals {
		for tg, m := range e.FailedTGAllocs {
			return fmt.Sprintf("no allocations; group %s not placed: exhausted %v, filtered %v", tg, m.DimensionExhausted, m.ConstraintFiltered)
		}
	}
	return fmt.Sprintf("no allocations yet (%d evaluations)", len(evals))
}

func taskEvents(s *api.AllocationListStub) string {
	var out string
	for task, st := range s.TaskStates {
		for _, e := range st.Events {
			out += fmt.Sprintf("[%s %s: %s] ", task, e.Type, e.DisplayMessage)
		}
	}
	return out
}
