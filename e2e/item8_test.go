package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// Issue 29, item 8: the smaller fixes, each on a real agent of the
// production-shaped cluster (their unit tests: controller/unnamed_test.go,
// TestAllocAgeFromCreation).

// unnamedPolicy: ml is a tenant; scratch, where the jobs run, is named by
// no tenant block. %s is more of the defaults block.
const unnamedPolicy = `
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
}
tenant "ml" {
  reserve = 0
}
defaults {
  tier = "training"
%s
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`

// TestUnnamedNamespaceGetsDefaultTier: a namespace no tenant block names
// (scratch, one the operator forgot) gets the default tier alone: its
// notebook naming interactive with priority 90 runs as training, priority
// 40, its record says why, and it cannot preempt the namespace's training
// to take its GPUs. defaults.unnamed_tiers widens that: listed, the same
// notebook runs as interactive (60) and preempts. Before the fix such a
// namespace got every tier, and the first case's notebook preempted.
func TestUnnamedNamespaceGetsDefaultTier(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{}, "ml", "scratch")
	cases := []struct {
		name, defaults string
		wantTier       string
		wantPrio       int
		wantWarning    string // "" none
		preempts       bool
	}{
		{name: "default tier only", wantTier: "training", wantPrio: 40,
			wantWarning: "tier interactive is not allowed in namespace scratch, which no tenant block names (only the default tier, training): runs as training"},
		{name: "unnamed_tiers widens it", defaults: `  unnamed_tiers = ["interactive", "training"]`,
			wantTier: "interactive", wantPrio: 60, preempts: true},
	}
	for i, tc := range cases {
		train, nb := fmt.Sprintf("train-%d", i), fmt.Sprintf("nb-%d", i)
		c.work(train, "scratch", "training", 4, 1, "priority", "40")
		c.waitRunning(60*time.Second, map[string]int{"scratch/" + train: 1})
		ctl := c.startController(fmt.Sprintf("ctl-%d", i), writePolicy(t, fmt.Sprintf(unnamedPolicy, tc.defaults)), "-listen", "127.0.0.1:0")
		c.work(nb, "scratch", "interactive", 4, 1, "priority", "90")
		rec := c.waitRecord(60*time.Second, "scratch", nb, "steward_tier", tc.wantTier)
		testnomad.WaitFor(t, 60*time.Second, fmt.Sprintf("%s: %s at priority %d", tc.name, nb, tc.wantPrio), func() (bool, string) {
			p := c.priorityOf("scratch", nb)
			return p == tc.wantPrio, fmt.Sprintf("priority %d", p)
		})
		if tc.wantWarning != "" {
			rec = c.waitRecord(30*time.Second, "scratch", nb, "steward_warning", tc.wantWarning)
		} else if w := rec["steward_warning"]; w != "" {
			t.Errorf("%s: %s's record warns %q", tc.name, nb, w)
		}
		if tc.preempts {
			c.waitRunning(90*time.Second, map[string]int{"scratch/" + nb: 1, "scratch/" + train: 0})
		} else {
			c.rounds(ctl, 4)
			if n, p := c.running("scratch", train), c.running("scratch", nb); n != 1 || p != 0 {
				t.Errorf("%s: %s running %d, %s running %d: the default tier's notebook preempted training of its own tier", tc.name, train, n, nb, p)
			}
		}
		t.Logf("%s: %s's record: tier %s, warning %q", tc.name, nb, rec["steward_tier"], rec["steward_warning"])
		ctl.Stop()
		c.deregister("scratch", nb)
		c.deregister("scratch", train)
		c.waitRunning(60*time.Second, map[string]int{"scratch/" + nb: 0, "scratch/" + train: 0})
	}
}

// agePolicy: training past min_runtime (20s) is preempted youngest first;
// younger work only when nothing older frees enough.
const agePolicy = twoTiers + `
preemption {
  min_runtime = "20s"
  grace       = "0s"
}
`

// TestRestartingTaskDoesNotStayYoung: two 2-GPU training jobs on a 4-GPU
// node: steady, then restarting, created two seconds later, whose task
// exits every few seconds and is restarted in place. Both allocations
// are past min_runtime when a 2-GPU notebook comes: restarting, created
// last, is the youngest and the victim; steady keeps its allocation.
// Before the fix a job's age was its task's latest start: restarting
// looked seconds old and min_runtime shielded it; run on the code before
// the fix (42f93f4^), no victim was taken and the notebook waited.
func TestRestartingTaskDoesNotStayYoung(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{}, "ml")
	c.work("steady", "ml", "training", 2, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/steady": 1})
	steady := c.allocIDs("ml", "steady")
	time.Sleep(2 * time.Second)

	// gpu-work as a batch job ends its task after busy_seconds; as a
	// service job with a restart policy, Nomad restarts it in place.
	job := c.parseWork("restarting", "ml", "training", 2, 1, "type", "batch", "busy_seconds", "3", "priority", "40")
	service, attempts, delay, interval, mode := "service", 1000, time.Second, time.Hour, "delay"
	job.Type = &service
	restart := &api.RestartPolicy{Attempts: &attempts, Delay: &delay, Interval: &interval, Mode: &mode}
	job.TaskGroups[0].RestartPolicy = restart
	for _, task := range job.TaskGroups[0].Tasks {
		task.RestartPolicy = restart // canonicalized: the group's, copied to each task
	}
	if _, _, err := c.Client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register ml/restarting: %v", err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/restarting": 1})
	restarting := c.allocIDs("ml", "restarting")[0]
	testnomad.WaitFor(t, 90*time.Second, "ml/restarting past min_runtime since its creation, its task restarted since", func() (bool, string) {
		a := c.alloc(restarting)
		ts := a.TaskStates["work"]
		if ts == nil {
			return false, "no task state"
		}
		age := time.Since(time.Unix(0, a.CreateTime))
		var events []string
		for _, e := range ts.Events {
			events = append(events, e.Type+": "+e.DisplayMessage)
		}
		return age > 25*time.Second && ts.Restarts >= 3, fmt.Sprintf("age %s, %d restarts, events %s", age.Round(time.Second), ts.Restarts, strings.Join(events, "; "))
	})

	c.startController("ctl", writePolicy(t, agePolicy))
	c.work("nb", "ml", "interactive", 2, 1, "priority", "60")
	testnomad.WaitFor(t, 90*time.Second, "a victim for ml/nb", func() (bool, string) {
		s, r := c.running("ml", "steady"), c.running("ml", "restarting")
		return s+r == 1 && c.running("ml", "nb") == 1, fmt.Sprintf("steady %d, restarting %d, nb %d", s, r, c.running("ml", "nb"))
	})
	if got := c.allocIDs("ml", "steady"); len(got) != 1 || got[0] != steady[0] {
		a := c.alloc(restarting)
		t.Fatalf("ml/steady (created first) was preempted, ml/restarting (created later, %d restarts) kept: its age was taken from its task's latest start",
			a.TaskStates["work"].Restarts)
	}
	rec := c.waitRecord(30*time.Second, "ml", "restarting", "steward_reason", "ml/nb")
	if !strings.Contains(rec["steward_state"], "preempted") && !strings.Contains(rec["steward_state"], "held") {
		t.Errorf("ml/restarting's record: %v", rec)
	}
}
