package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// batchTenantsPolicy: two tenants with no reserve and the same weight
// share a node: Steward holds what is over a tenant's share and resumes
// it as GPUs free up.
const batchTenantsPolicy = twoTiers + `
tenant "ta" {
  reserve = 0
  weight  = 1
}
tenant "tb" {
  reserve = 0
  weight  = 1
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`

// TestFinishedBatchJobNotRerun (issue 28, item 1): two tenants each submit
// six one-GPU batch jobs of about 12 s to a 4-GPU node. Steward holds and
// resumes them in turn; every job finishes exactly once. A job Steward
// resumed used to be held again when it completed (its completed
// allocation looked like a resume Nomad had not placed yet), then resumed,
// and Nomad, which ignores a batch job's terminal allocations of an older
// job version, ran the finished work again. Run on a loaded machine: the
// order in which Nomad and the controller act decides which jobs are held.
func TestFinishedBatchJobNotRerun(t *testing.T) {
	t.Parallel()
	loadMachine(t, 2)
	c := startCluster(t, 4, "ta", "tb")
	ctl := c.startController("ctl", writePolicy(t, batchTenantsPolicy))

	const perTenant = 6
	var jobs []string
	for i := range perTenant {
		for _, ns := range []string{"ta", "tb"} {
			name := fmt.Sprintf("%s-%d", ns, i)
			c.work(name, ns, "training", 1, 1, "type", "batch", "busy_seconds", "12", "priority", "40")
			jobs = append(jobs, ns+"/"+name)
		}
	}

	// done: allocations whose work ran to its end (its task exited by
	// itself: no kill, whatever Nomad says of the allocation since);
	// live: allocations placed or running. Work that finished and is
	// placed again, or finished twice, ran again.
	check := func() (finished int, bad []string, summary string) {
		var parts []string
		for _, k := range jobs {
			ns, job, _ := strings.Cut(k, "/")
			allocs, _, err := c.Client.Jobs().Allocations(job, true, &api.QueryOptions{Namespace: ns})
			if err != nil {
				parts = append(parts, k+"=?")
				continue
			}
			done, live := 0, 0
			for _, a := range allocs {
				switch {
				case ranToEnd(a):
					done++
				case a.ClientStatus == "pending" || a.ClientStatus == "running":
					if a.DesiredStatus == "run" {
						live++
					}
				}
			}
			if done > 0 {
				finished++
			}
			if done > 1 || done > 0 && live > 0 {
				bad = append(bad, fmt.Sprintf("%s finished %d times and runs %d allocations again", k, done, live))
			}
			parts = append(parts, fmt.Sprintf("%s=%d/%d", k, done, live))
		}
		sort.Strings(bad)
		return finished, bad, strings.Join(parts, " ")
	}

	deadline := time.Now().Add(150 * time.Second)
	var allAt time.Time
	for {
		finished, bad, summary := check()
		if len(bad) > 0 {
			t.Fatalf("finished batch work ran again: %s\n(done/live per job: %s)\ncontroller log:\n%s",
				strings.Join(bad, "; "), summary, tail(ctl.Log(), 60))
		}
		if finished == len(jobs) && allAt.IsZero() {
			allAt = time.Now()
			t.Logf("all %d jobs finished once: %s", len(jobs), summary)
		}
		// Watched a while after the last finished: a job held again at
		// its completion is resumed (and re-run) within seconds.
		if !allAt.IsZero() && time.Since(allAt) > 20*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 150 s only %d of %d jobs had finished (done/live per job: %s)\ncontroller log:\n%s",
				finished, len(jobs), summary, tail(ctl.Log(), 60))
		}
		time.Sleep(time.Second)
	}
	if !ctl.Contains("hold: job=") || !ctl.Contains("resume: job=") {
		t.Errorf("Steward neither held nor resumed: the story did not happen\ncontroller log:\n%s", tail(ctl.Log(), 60))
	}
}

// ranToEnd reports whether an allocation's work task exited by itself
// (exit code 0), rather than being killed.
func ranToEnd(a *api.AllocationListStub) bool {
	ts := a.TaskStates["work"]
	if ts == nil || ts.State != "dead" || ts.Failed {
		return false
	}
	ended := false
	for _, e := range ts.Events {
		switch e.Type {
		case api.TaskKilling, api.TaskKilled:
			return false
		case api.TaskTerminated:
			ended = e.ExitCode == 0
		}
	}
	return ended
}

// TestResumedBatchGroupRunsOnlyTheRest (issue 28, item 1): a one-GPU
// batch job of count 6 on a 4-GPU node. Nomad places four; Steward holds
// the other two (capacity), which makes a new job version. When the four
// complete, Steward resumes the two: the count it writes leaves the four
// completed allocations out, since Nomad ignores a batch job's terminal
// allocations of an older version and would place them all again. The
// job's work runs six times, not ten.
func TestResumedBatchGroupRunsOnlyTheRest(t *testing.T) {
	t.Parallel()
	loadMachine(t, 2)
	c := startCluster(t, 4, "ta", "tb")
	ctl := c.startController("ctl", writePolicy(t, batchTenantsPolicy))
	c.work("sweep", "ta", "training", 1, 6, "type", "batch", "busy_seconds", "10", "priority", "40")

	runs := func() (done, live int) {
		allocs, _, err := c.Client.Jobs().Allocations("sweep", true, &api.QueryOptions{Namespace: "ta"})
		if err != nil {
			return -1, -1
		}
		for _, a := range allocs {
			switch {
			case ranToEnd(a):
				done++
			case (a.ClientStatus == "pending" || a.ClientStatus == "running") && a.DesiredStatus == "run":
				live++
			}
		}
		return done, live
	}
	c.waitRecord(60*time.Second, "ta", "sweep", "steward_state", "held")
	deadline := time.Now().Add(120 * time.Second)
	var allAt time.Time
	for {
		done, live := runs()
		if done+live > 6 {
			t.Fatalf("completed work placed again: %d allocations ran to their end, %d run or wait to run (count 6)\ncontroller log:\n%s",
				done, live, tail(ctl.Log(), 60))
		}
		if done == 6 && allAt.IsZero() {
			allAt = time.Now()
		}
		if !allAt.IsZero() && time.Since(allAt) > 15*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 120 s %d of 6 allocations had run to their end (%d run)\ncontroller log:\n%s", done, live, tail(ctl.Log(), 60))
		}
		time.Sleep(time.Second)
	}
	if !ctl.Contains("resume: job=ta/sweep") {
		t.Errorf("the held allocations were never resumed: the story did not happen\ncontroller log:\n%s", tail(ctl.Log(), 60))
	}
}

// TestBatchGroupResumedAsMuchAsCompleted (issue 29, found by the soak):
// a one-GPU batch job of count 2, "pair", one allocation of which Steward
// holds; when the other completes, Steward resumes the held one. The
// count it writes leaves the completed allocation out (Nomad ignores a
// batch job's terminal allocations of an older version): 1 − 1 + 1 = 1,
// the count Nomad already has. A scale makes a new version whatever the
// count, but a resume onto GPUs set aside for it (a preempted job's
// earmarks) re-registers the job to go ahead of Nomad's queue, and Nomad
// takes a registration that changes nothing for no change: no new
// version, the completed allocation still counted, nothing placed, half
// the job's work lost. Steward now makes the version first (a scale that
// leaves the completed allocation out: TestBatchWritesLeaveCompletedOut).
// Each case ends with both allocations run to their end, once each. On a
// real agent the resume here goes through either path, as the order of
// Nomad's and the controller's writes has it: the soak (make soak) is what
// met the re-registration.
func TestBatchGroupResumedAsMuchAsCompleted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gpus  int
		setup func(t *testing.T, c *cluster)
		story string // in the controller's log: the case's path was taken
	}{
		{name: "held whole for capacity then resumed one at a time", gpus: 1,
			setup: func(t *testing.T, c *cluster) {
				// Another tenant's job holds the only GPU: pair is held
				// whole, then resumed one allocation at a time.
				c.work("blocker", "tb", "training", 1, 1, "priority", "40")
				c.waitRunning(60*time.Second, map[string]int{"tb/blocker": 1})
				c.work("pair", "ta", "training", 1, 2, "type", "batch", "busy_seconds", "8", "priority", "40")
				c.waitRecord(60*time.Second, "ta", "pair", "steward_state", "held")
				if _, _, err := c.Client.Jobs().Deregister("blocker", true, &api.WriteOptions{Namespace: "tb"}); err != nil {
					t.Fatal(err)
				}
			},
			story: "resume: job=ta/pair"},
		{name: "preempted then resumed ahead onto its earmarks", gpus: 2,
			setup: func(t *testing.T, c *cluster) {
				// Both run; an interactive job preempts one; the other
				// completes, and the preempted one is resumed ahead.
				c.work("pair", "ta", "training", 1, 2, "type", "batch", "busy_seconds", "15", "priority", "40")
				c.waitRunning(60*time.Second, map[string]int{"ta/pair": 2})
				c.work("hi", "tb", "interactive", 1, 1, "priority", "60")
				c.waitRecord(60*time.Second, "ta", "pair", "steward_state", "preempted")
			},
			story: "resume: job=ta/pair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			loadMachine(t, 2)
			c := startCluster(t, tc.gpus, "ta", "tb")
			ctl := c.startController("ctl", writePolicy(t, batchTenantsPolicy))
			tc.setup(t, c)
			runs := func() (done, live int) {
				allocs, _, err := c.Client.Jobs().Allocations("pair", true, &api.QueryOptions{Namespace: "ta"})
				if err != nil {
					return -1, -1
				}
				for _, a := range allocs {
					switch {
					case ranToEnd(a):
						done++
					case (a.ClientStatus == "pending" || a.ClientStatus == "running") && a.DesiredStatus == "run":
						live++
					}
				}
				return done, live
			}
			deadline := time.Now().Add(90 * time.Second)
			var allAt time.Time
			for {
				done, live := runs()
				if done+live > 2 {
					t.Fatalf("completed work placed again: %d allocations ran to their end, %d run or wait to run (count 2)\ncontroller log:\n%s",
						done, live, tail(ctl.Log(), 60))
				}
				if done == 2 && allAt.IsZero() {
					allAt = time.Now()
				}
				if !allAt.IsZero() && time.Since(allAt) > 10*time.Second {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 90 s %d of 2 allocations had run to their end (%d run): the held one was never placed\ncontroller log:\n%s",
						done, live, tail(ctl.Log(), 60))
				}
				time.Sleep(time.Second)
			}
			if !ctl.Contains(tc.story) {
				t.Errorf("the story did not happen: no %q in the controller's log\ncontroller log:\n%s", tc.story, tail(ctl.Log(), 60))
			}
		})
	}
}
