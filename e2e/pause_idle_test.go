package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestPauseFreesGPUsForWaitingWork: team b's interactive job preempts
// team a's training job for the node's 2 GPUs; then team b pauses its job.
// A paused job waits for nothing, so the GPUs set aside for it while its
// victim drained are no longer its own: a's training, waiting for exactly
// those GPUs, resumes at once (well within the minute the set-aside would
// have lasted), and no placeholder holds them for the paused job.
func TestPauseFreesGPUsForWaitingWork(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "a", "b")
	ctl := c.startController("ctl", writePolicy(t, fmt.Sprintf(faultPolicy, "0s")))
	c.work("a1", "a", "training", 2, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"a/a1": 1})
	c.work("b1", "b", "interactive", 2, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"b/b1": 1, "a/a1": 0})
	c.waitRecord(30*time.Second, "a", "a1", "steward_state", "preempted")

	if out, err := c.steward("pause", "-namespace", "b", "b1"); err != nil {
		t.Fatalf("steward pause: %v\n%s", err, out)
	}
	paused := time.Now()
	rec := c.waitRecord(30*time.Second, "b", "b1", "steward_state", "paused")
	if !strings.Contains(rec["steward_reason"], "paused by") {
		t.Errorf("b1's reason %q", rec["steward_reason"])
	}
	// The GPUs b1 gave back go to a1, not to a placeholder for b1.
	c.waitRunning(30*time.Second, map[string]int{"a/a1": 1, "b/b1": 0})
	t.Logf("a1 runs again %s after the pause", time.Since(paused).Round(time.Second))
	for _, line := range strings.Split(ctl.Log(), "\n") {
		if strings.Contains(line, "placeholder registered") && strings.Contains(line, "for=b/b1") {
			t.Errorf("a placeholder held GPUs for the paused job: %s", line)
		}
	}
	time.Sleep(3 * time.Second)
	if n := c.running("b", "b1"); n != 0 {
		t.Fatalf("the paused job came back by itself (running %d)", n)
	}
}

// TestIdleRequeueAlwaysNoLoop: an idle rule in mode always with action
// requeue stops an idle notebook though nothing else waits for its GPUs.
// It is not put straight back on them (it would idle and be stopped again,
// over and over until the eviction cap): it waits held, its record says
// until its owner resumes it or snoozes the rule, and it starts no new
// allocation. Its owner resumes it: it runs again, idles, and is stopped
// once more, then waits again.
func TestIdleRequeueAlwaysNoLoop(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "product")
	c.startController("ctl", writePolicy(t, idlePolicyText("always", "requeue")))
	c.work("notebook", "product", "interactive", 4, 1, "priority", "60", "busy_seconds", "0", "idle_percent", "2")
	c.waitRunning(60*time.Second, map[string]int{"product/notebook": 1})

	rec := c.waitRecord(60*time.Second, "product", "notebook", "steward_state", "held")
	for _, want := range []string{"mode always", "job requeued: it waits held for its owner to resume it (steward resume) or snooze the rule (steward snooze, up to 8h)"} {
		if !strings.Contains(rec["steward_reason"], want) {
			t.Errorf("the requeued notebook's reason %q lacks %q", rec["steward_reason"], want)
		}
	}
	// Nothing else waits and its 4 GPUs are free: still it starts no new
	// allocation (the loop started one every few seconds).
	starts := c.allocsCreated("product", "notebook")
	time.Sleep(30 * time.Second)
	if n := c.allocsCreated("product", "notebook"); n != starts || c.running("product", "notebook") != 0 {
		t.Fatalf("the requeued notebook started %d allocations in 30s (running %d), want none: it waits for its owner",
			n-starts, c.running("product", "notebook"))
	}

	// Its owner asks for it back: it runs, idles, is requeued again, and
	// waits again.
	if out, err := c.steward("resume", "-namespace", "product", "notebook"); err != nil {
		t.Fatalf("steward resume: %v\n%s", err, out)
	}
	testnomad.WaitFor(t, 60*time.Second, "the resumed notebook starts once", func() (bool, string) {
		n := c.allocsCreated("product", "notebook")
		return n == starts+1, fmt.Sprintf("%d allocations", n)
	})
	c.waitRunning(60*time.Second, map[string]int{"product/notebook": 0})
	c.waitRecord(30*time.Second, "product", "notebook", "steward_state", "held")
	time.Sleep(20 * time.Second)
	if n := c.allocsCreated("product", "notebook"); n != starts+1 || c.running("product", "notebook") != 0 {
		t.Fatalf("after one resume by its owner the notebook started %d allocations (running %d), want 1",
			n-starts, c.running("product", "notebook"))
	}
}

// allocsCreated counts the allocations Nomad ever created for a job
// (garbage-collected ones aside): each is a start.
func (c *cluster) allocsCreated(ns, job string) int {
	c.t.Helper()
	allocs, _, err := c.Client.Jobs().Allocations(job, true, &api.QueryOptions{Namespace: ns})
	if err != nil {
		c.t.Fatalf("allocations of %s/%s: %v", ns, job, err)
	}
	return len(allocs)
}
