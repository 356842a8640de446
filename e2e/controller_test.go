package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The seed stories of the foundation issue, end to end: a real agent with
// simulated GPUs, the controller as a subprocess, jobs from jobs/.

const clearmlPolicy = `
tier "training" {
  priority    = 40
  preemptible = true
}
tenant "rnd" {
  reserve = 5
  limit   = 9
}
tenant "devops" {
  reserve = 5
  limit   = 9
}
preemption {
  min_runtime       = "0s"
  grace             = "0s"
  checkpoint_signal = "SIGUSR1"
}
`

// TestClearMLWorkedExample: 10 GPUs; R&D and DevOps each reserve 5, limit
// 9. R&D submits five 3-GPU jobs: three run, two wait. DevOps submits a
// 3-GPU job: the R&D job started last is preempted and DevOps runs. DevOps
// submits a 2-GPU job: one more R&D job is preempted.
func TestClearMLWorkedExample(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 10, "rnd", "devops")
	ctl := c.startController("ctl", writePolicy(t, clearmlPolicy))

	// r1 comes with Nomad's default priority (50): Steward sets it to its
	// tier's (40) without restarting it.
	c.work("r1", "rnd", "training", 3, 1)
	c.waitRunning(60*time.Second, map[string]int{"rnd/r1": 1})
	r1 := c.allocIDs("rnd", "r1")
	rec := c.waitRecord(30*time.Second, "rnd", "r1", "steward_priority", "40")
	if !strings.Contains(rec["steward_reason"], "tier training runs at priority 40; the job had priority 50") {
		t.Errorf("r1's reason %q", rec["steward_reason"])
	}
	time.Sleep(1100 * time.Millisecond)
	for _, name := range []string{"r2", "r3"} {
		c.work(name, "rnd", "training", 3, 1, "priority", "40")
		c.waitRunning(60*time.Second, map[string]int{"rnd/" + name: 1})
		time.Sleep(1100 * time.Millisecond) // distinct start times: "started last" is well defined
	}
	if got := c.allocIDs("rnd", "r1"); len(got) != 1 || got[0] != r1[0] {
		t.Errorf("setting r1's priority replaced its allocation: %v, then %v", r1, got)
	}
	c.work("r4", "rnd", "training", 3, 1, "priority", "40")
	c.work("r5", "rnd", "training", 3, 1, "priority", "40")
	// r4 and r5 wait: held by Steward (limit 9 / capacity).
	c.waitRecord(60*time.Second, "rnd", "r4", "steward_state", "held")
	c.waitRecord(60*time.Second, "rnd", "r5", "steward_state", "held")
	c.waitRunning(10*time.Second, map[string]int{"rnd/r1": 1, "rnd/r2": 1, "rnd/r3": 1, "rnd/r4": 0, "rnd/r5": 0})

	c.work("d1", "devops", "training", 3, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"devops/d1": 1, "rnd/r3": 0, "rnd/r1": 1, "rnd/r2": 1})
	rec = c.waitRecord(30*time.Second, "rnd", "r3", "steward_state", "preempted")
	// A tenant's record names another tenant's job only as such (issue 29),
	// with the numbers and the other tenant.
	if !strings.Contains(rec["steward_reason"], "reclaiming 3 for another tenant's job (tenant devops holds 0, reserve 5)") {
		t.Errorf("r3's reason %q does not say it was reclaimed for devops's job", rec["steward_reason"])
	}
	if rec["steward_preemptions"] != "1" || rec["steward_tenant"] != "rnd" || rec["steward_tier"] != "training" {
		t.Errorf("r3's record = %v", rec)
	}

	c.work("d2", "devops", "training", 2, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"devops/d1": 1, "devops/d2": 1, "rnd/r2": 0, "rnd/r1": 1})
	c.waitRecord(30*time.Second, "rnd", "r2", "steward_state", "preempted")
	if !ctl.Contains("reclaim") {
		t.Errorf("controller log never mentions reclaim")
	}

	// DevOps' jobs end. R&D gets its GPUs back, up to its limit of 9:
	// with resume_order = "preempted-first" (the default) the two jobs
	// preempted mid-run (r2, r3) resume before the two that never started
	// (r4, r5), which keep waiting for R&D's limit.
	for _, id := range []string{"d1", "d2"} {
		if _, _, err := c.Client.Jobs().Deregister(id, false, &api.WriteOptions{Namespace: "devops"}); err != nil {
			t.Fatal(err)
		}
	}
	c.waitRunning(60*time.Second, map[string]int{"rnd/r1": 1, "rnd/r2": 1, "rnd/r3": 1, "rnd/r4": 0, "rnd/r5": 0})
	time.Sleep(2 * time.Second)
	c.waitRunning(10*time.Second, map[string]int{"rnd/r1": 1, "rnd/r2": 1, "rnd/r3": 1, "rnd/r4": 0, "rnd/r5": 0})
	for _, id := range []string{"r4", "r5"} {
		if rec := c.record("rnd", id); !strings.Contains(rec["steward_reason"], "limit 9") {
			t.Errorf("%s waits without its tenant's limit as the reason: %v", id, rec)
		}
	}
}

const runAIPolicy = twoTiers + `
tenant "project-a" {
  reserve = 4
}
tenant "project-b" {
  reserve = 4
}
preemption {
  min_runtime       = "0s"
  grace             = "3s"
  checkpoint_signal = "SIGUSR1"
}
`

// TestRunAIOverQuotaReclaimAndAutoResume: project-a borrows all 8 GPUs;
// project-b's notebook (within its reservation of 4) takes them back:
// project-a's job gets its checkpoint signal, is held, and resumes by
// itself once the notebook ends.
func TestRunAIOverQuotaReclaimAndAutoResume(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 8, "project-a", "project-b")
	c.startController("ctl", writePolicy(t, runAIPolicy))

	c.work("train", "project-a", "training", 8, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"project-a/train": 1})
	victim := c.allocIDs("project-a", "train")

	c.work("notebook", "project-b", "interactive", 4, 1, "priority", "60")
	rec := c.waitRecord(30*time.Second, "project-a", "train", "steward_state", "checkpointing")
	if !strings.Contains(rec["steward_reason"], "tenant project-a holds 8 GPUs, reserve 4: reclaiming 8 for another tenant's job (tenant project-b holds 0, reserve 4)") {
		t.Errorf("reason %q", rec["steward_reason"])
	}
	c.waitTaskEvent(20*time.Second, "project-a", victim[0], "Signaling", "SIGUSR1")
	c.waitRunning(60*time.Second, map[string]int{"project-b/notebook": 1, "project-a/train": 0})
	c.waitRecord(30*time.Second, "project-a", "train", "steward_state", "preempted")

	// The notebook ends: the training job comes back by itself.
	if _, _, err := c.Client.Jobs().Deregister("notebook", false, &api.WriteOptions{Namespace: "project-b"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"project-a/train": 1})
	rec = c.waitRecord(30*time.Second, "project-a", "train", "steward_state", "running")
	if !strings.Contains(rec["steward_reason"], "resuming") || rec["steward_preemptions"] != "1" {
		t.Errorf("after resume the record says %v", rec)
	}
}

const determinedPolicy = twoTiers + `
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`

// TestDeterminedPartialPreemption: eight one-GPU trials fill the node; a
// 4-GPU job of a higher tier preempts exactly four of them, which resume
// when it ends.
func TestDeterminedPartialPreemption(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 8, "ml")
	c.startController("ctl", writePolicy(t, determinedPolicy))

	c.work("experiment", "ml", "training", 1, 8, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/experiment": 8})
	c.work("urgent", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/experiment": 4, "ml/urgent": 1})
	rec := c.waitRecord(30*time.Second, "ml", "experiment", "steward_state", "preempted")
	if !strings.Contains(rec["steward_reason"], "tier training (priority 40) yields 4 GPUs to ml/urgent/work") {
		t.Errorf("reason %q", rec["steward_reason"])
	}
	if rec["steward_held"] != "4 allocations" {
		t.Errorf("held %q, want 4 allocations", rec["steward_held"])
	}
	if _, _, err := c.Client.Jobs().Deregister("urgent", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/experiment": 8})
}

func idlePolicyText(mode, action string) string {
	return twoTiers + `
idle "notebooks" {
  tiers     = ["interactive"]
  threshold = 10
  after     = "6s"
  mode      = "` + mode + `"
  action    = "` + action + `"
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`
}

// TestAMDIdleReclaim: a notebook at 2% GPU utilisation gives its GPUs
// back — in pressure mode only when other work waits (requeued: it runs
// again after that work), in always mode as soon as it has been idle for
// the rule's time (here stopped for good).
func TestAMDIdleReclaim(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"pressure", "always"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, 4, "product", "research")
			action := map[string]string{"pressure": "requeue", "always": "stop"}[mode]
			c.startController("ctl", writePolicy(t, idlePolicyText(mode, action)))
			c.work("notebook", "product", "interactive", 4, 1, "priority", "60", "busy_seconds", "0", "idle_percent", "2")
			c.waitRunning(60*time.Second, map[string]int{"product/notebook": 1})

			if mode == "pressure" {
				// Idle well past 6s, but nobody waits: it keeps its GPUs.
				time.Sleep(10 * time.Second)
				if n := c.running("product", "notebook"); n != 1 {
					t.Fatalf("pressure mode stopped an idle notebook nobody needed the GPUs of (running %d)", n)
				}
				c.work("train", "research", "training", 4, 1, "priority", "40")
				c.waitRunning(60*time.Second, map[string]int{"research/train": 1, "product/notebook": 0})
				rec := c.waitRecord(20*time.Second, "product", "notebook", "steward_state", "held")
				if !strings.Contains(rec["steward_reason"], "(under 10%)") || !strings.Contains(rec["steward_reason"], "mode pressure") ||
					!strings.Contains(rec["steward_reason"], "4 GPUs go to another tenant's job") {
					t.Errorf("reason %q", rec["steward_reason"])
				}
				// The training ends: the requeued notebook runs again.
				if _, _, err := c.Client.Jobs().Deregister("train", false, &api.WriteOptions{Namespace: "research"}); err != nil {
					t.Fatal(err)
				}
				c.waitRunning(60*time.Second, map[string]int{"product/notebook": 1})
				return
			}
			c.waitRunning(60*time.Second, map[string]int{"product/notebook": 0})
			rec := c.waitRecord(20*time.Second, "product", "notebook", "steward_state", "idle-stopped")
			if !strings.Contains(rec["steward_reason"], "mode always") {
				t.Errorf("reason %q", rec["steward_reason"])
			}
		})
	}
}

const qosPolicy = twoTiers + `
preemption {
  min_runtime          = "0s"
  grace                = "0s"
  max_per_job_per_hour = 1
  promote {
    after_preemptions = 0
    after_wait        = "0s"
    boost             = 0
  }
}
`

// TestQoSEvictionCap: a training job preempted once this hour is not
// preempted again: the next notebook waits, and says why.
func TestQoSEvictionCap(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	c.startController("ctl", writePolicy(t, qosPolicy))
	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb1", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb1": 1, "ml/train": 0})
	if _, _, err := c.Client.Jobs().Deregister("nb1", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb2", "ml", "interactive", 4, 1, "priority", "60")
	rec := c.waitRecord(30*time.Second, "ml", "nb2", "steward_state", "held")
	if !strings.Contains(rec["steward_reason"], "nothing may be preempted") {
		t.Errorf("nb2 waits for %q", rec["steward_reason"])
	}
	time.Sleep(3 * time.Second)
	if n := c.running("ml", "train"); n != 1 {
		t.Fatalf("train preempted twice in an hour (running %d)", n)
	}
}

// TestQoSGangPreemptedWhole: a gang (steward.gang = "true") of two
// allocations is preempted whole for a notebook that needs only half its
// GPUs, and comes back whole.
func TestQoSGangPreemptedWhole(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	c.startController("ctl", writePolicy(t, determinedPolicy))
	c.work("gang", "ml", "training", 2, 2, "priority", "40", "gang", "true")
	c.waitRunning(60*time.Second, map[string]int{"ml/gang": 2})
	c.work("nb", "ml", "interactive", 2, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/gang": 0})
	rec := c.waitRecord(30*time.Second, "ml", "gang", "steward_state", "preempted")
	if rec["steward_held"] != "2 allocations" {
		t.Errorf("held %q, want the whole gang (2 allocations)", rec["steward_held"])
	}
	if _, _, err := c.Client.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/gang": 2})
}
