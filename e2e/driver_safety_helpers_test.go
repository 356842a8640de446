package e2e

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// safetyAgent is a dev agent with steward-exec (a checkpoint_root) and 2
// simulated GPUs, for the driver safety tests.
type safetyAgent struct {
	*testnomad.Agent
	t                 *testing.T
	ckptRoot, simDir  string
	namespacesCreated map[string]bool
}

// startSafetyAgent starts the agent; extra is more of steward-exec's
// config (HCL lines).
func startSafetyAgent(t *testing.T, extra ...string) *safetyAgent {
	t.Helper()
	return startSafetyAgentRoot(t, t.TempDir(), extra...)
}

// startSafetyAgentRoot starts the agent with the checkpoint_root given;
// "": none, steward-exec's defaults.
func startSafetyAgentRoot(t *testing.T, ckptRoot string, extra ...string) *safetyAgent {
	t.Helper()
	s := &safetyAgent{t: t, ckptRoot: ckptRoot, simDir: t.TempDir(), namespacesCreated: map[string]bool{}}
	if ckptRoot != "" {
		extra = append([]string{fmt.Sprintf("    checkpoint_root = %q", ckptRoot)}, extra...)
	} else {
		// The job uid registry: in the test's own dir, not the host's
		// default (/var/lib/steward-exec), which other runs share.
		extra = append([]string{fmt.Sprintf("    state_dir = %q", t.TempDir())}, extra...)
	}
	s.Agent = testnomad.Start(t, testnomad.Options{
		Plugins: []testnomad.Plugin{
			{Name: "steward-gpu", Config: fmt.Sprintf(`    backend       = "sim"
    sim_count     = 2
    sim_state_dir = %q
    stats_period  = "1s"`, s.simDir)},
			{Name: "steward-exec", Config: strings.Join(extra, "\n")},
		},
	})
	testnomad.WaitFor(t, 60*time.Second, "steward-exec healthy and 2 simulated GPUs on the node", func() (bool, string) {
		node := s.Node(t)
		if d := node.Drivers["steward-exec"]; d == nil || !d.Healthy {
			return false, fmt.Sprintf("steward-exec driver: %+v", d)
		}
		if node.NodeResources == nil || len(node.NodeResources.Devices) == 0 {
			return false, "no devices yet"
		}
		return true, ""
	})
	return s
}

// startSafetyProd is startSafetyAgentRoot on the production-shaped
// cluster (issue 29): steward-exec with the checkpoint_root given ("":
// none, its defaults) and 2 simulated GPUs on its GPU client, beside a
// client without them, ACLs and mTLS on. The jobs registered run on the
// GPU client, the only node with steward-exec.
func startSafetyProd(t *testing.T, ckptRoot string, extra ...string) *safetyAgent {
	t.Helper()
	if ckptRoot != "" {
		extra = append([]string{fmt.Sprintf("    checkpoint_root = %q", ckptRoot)}, extra...)
	} else {
		extra = append([]string{fmt.Sprintf("    state_dir = %q", t.TempDir())}, extra...)
	}
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2}},
		extra: testnomad.Options{Plugins: []testnomad.Plugin{{Name: "steward-exec", Config: strings.Join(extra, "\n")}}}})
	s := &safetyAgent{Agent: c.Agent, t: t, ckptRoot: ckptRoot, simDir: c.stateDir, namespacesCreated: map[string]bool{}}
	c.waitDriver(c.NodeID, "steward-exec")
	return s
}

// shJob is a batch job of one task that runs a shell script. Failed tasks
// are neither restarted nor rescheduled unless restarts says so.
type shJob struct {
	ns, id, driver, user, script string
	meta                         map[string]string
	gpus                         int
	restarts                     int
	killSignal                   string
	config                       map[string]any // more task config
	env                          map[string]string
}

func (s *safetyAgent) register(j shJob) {
	t := s.t
	t.Helper()
	if j.ns == "" {
		j.ns = "default"
	}
	if j.ns != "default" && !s.namespacesCreated[j.ns] {
		if _, err := s.Client.Namespaces().Register(&api.Namespace{Name: j.ns}, nil); err != nil {
			t.Fatalf("creating namespace %s: %v", j.ns, err)
		}
		s.namespacesCreated[j.ns] = true
	}
	zero, fail := 0, "fail"
	job := api.NewBatchJob(j.id, j.id, "global", 50)
	job.Namespace = &j.ns
	job.AddDatacenter("*")
	job.Meta = j.meta
	tg := api.NewTaskGroup("g", 1)
	delay := time.Second
	tg.RestartPolicy = &api.RestartPolicy{Attempts: &j.restarts, Mode: &fail, Delay: &delay}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: &zero, Unlimited: new(bool)}
	task := api.NewTask("t", j.driver)
	task.User = j.user
	task.Env = j.env
	task.Config = map[string]any{"command": "/bin/sh", "args": []string{"-c", j.script}}
	for k, v := range j.config {
		task.Config[k] = v
	}
	if j.killSignal != "" {
		task.KillSignal = j.killSignal
	}
	killTimeout := 5 * time.Second
	task.KillTimeout = &killTimeout
	task.Resources = &api.Resources{CPU: new(int), MemoryMB: new(int)}
	*task.Resources.CPU, *task.Resources.MemoryMB = 50, 32
	if j.gpus > 0 {
		count := uint64(j.gpus)
		task.Resources.Devices = []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &count}}
	}
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	if _, _, err := s.Client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering job %s/%s: %v", j.ns, j.id, err)
	}
	t.Cleanup(func() {
		// Not purged: the agent's clean-up waits for its allocations to stop.
		_, _, _ = s.Client.Jobs().Deregister(j.id, false, &api.WriteOptions{Namespace: j.ns})
	})
}

func nsQuery(ns string) *api.QueryOptions { return &api.QueryOptions{Namespace: ns} }

// allocs lists the job's allocations, newest first.
func (s *safetyAgent) allocs(ns, job string) []*api.AllocationListStub {
	stubs, _, err := s.Client.Jobs().Allocations(job, true, nsQuery(ns))
	if err != nil {
		s.t.Fatalf("listing allocations of %s/%s: %v", ns, job, err)
	}
	return stubs
}

// waitAlloc waits for an allocation of the job other than the ones in
// skip whose client status is one of want, and returns it.
func (s *safetyAgent) waitAlloc(ns, job string, skip map[string]bool, want ...string) *api.Allocation {
	t := s.t
	t.Helper()
	var found *api.Allocation
	testnomad.WaitFor(t, 60*time.Second, fmt.Sprintf("an allocation of %s/%s that is %v", ns, job, want), func() (bool, string) {
		var seen []string
		for _, st := range s.allocs(ns, job) {
			if skip[st.ID] {
				continue
			}
			for _, w := range want {
				if st.ClientStatus == w {
					a, _, err := s.Client.Allocations().Info(st.ID, nsQuery(ns))
					if err != nil {
						return false, err.Error()
					}
					found = a
					return true, ""
				}
			}
			seen = append(seen, st.ID[:8]+" "+st.ClientStatus+" "+stubEvents(st))
		}
		return false, strings.Join(seen, "; ")
	})
	return found
}

// waitEvent waits for a task event of type typ containing want on the
// allocation, and returns its message.
func (s *safetyAgent) waitEvent(alloc *api.Allocation, typ, want string) string {
	t := s.t
	t.Helper()
	var msg string
	testnomad.WaitFor(t, 60*time.Second, fmt.Sprintf("a %s event %q on allocation %s", typ, want, alloc.ID), func() (bool, string) {
		a, _, err := s.Client.Allocations().Info(alloc.ID, nsQuery(alloc.Namespace))
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, st := range a.TaskStates {
			for _, e := range st.Events {
				if e.Type == typ && strings.Contains(e.DisplayMessage, want) {
					msg = e.DisplayMessage
					return true, ""
				}
				seen = append(seen, e.Type+": "+e.DisplayMessage)
			}
		}
		return false, strings.Join(seen, " | ")
	})
	return msg
}

// hasEvent says whether the allocation has a task event containing want.
func (s *safetyAgent) hasEvent(alloc *api.Allocation, want string) bool {
	a, _, err := s.Client.Allocations().Info(alloc.ID, nsQuery(alloc.Namespace))
	if err != nil {
		s.t.Fatalf("reading allocation %s: %v", alloc.ID, err)
	}
	for _, st := range a.TaskStates {
		for _, e := range st.Events {
			if strings.Contains(e.DisplayMessage, want) {
				return true
			}
		}
	}
	return false
}

// waitStdout waits until the task's stdout contains want, and returns it.
func (s *safetyAgent) waitStdout(alloc *api.Allocation, want string) string {
	t := s.t
	t.Helper()
	var out string
	testnomad.WaitFor(t, 60*time.Second, fmt.Sprintf("%q in the stdout of allocation %s", want, alloc.ID), func() (bool, string) {
		o, err := readTaskStdout(s.Agent, alloc, "t")
		if err != nil {
			return false, err.Error()
		}
		out = o
		return strings.Contains(o, want), o
	})
	return out
}

// scale holds (0) or resumes (1) the job's group, as the controller does.
func (s *safetyAgent) scale(ns, job string, n int) {
	s.t.Helper()
	if _, _, err := s.Client.Jobs().Scale(job, "g", &n, fmt.Sprintf("test: scale to %d", n), false, nil, &api.WriteOptions{Namespace: ns}); err != nil {
		s.t.Fatalf("scaling %s/%s to %d: %v", ns, job, n, err)
	}
}

// ownerAndMode is a path's uid and permission bits (not following a
// symlink), for checks made as root.
func ownerAndMode(t *testing.T, path string) (int, os.FileMode) {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return int(info.Sys().(*syscall.Stat_t).Uid), info.Mode()
}

func stubEvents(s *api.AllocationListStub) string {
	var out []string
	for task, st := range s.TaskStates {
		for _, e := range st.Events {
			out = append(out, fmt.Sprintf("[%s %s: %s]", task, e.Type, e.DisplayMessage))
		}
	}
	return strings.Join(out, " ")
}
