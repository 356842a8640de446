package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

const placeholderPolicy = twoTiers + `
preemption {
  min_runtime = "0s"
  grace       = "10s"
}
`

// TestPlaceholderKeepsFreeGPUs: a 4-GPU interactive job needs the whole
// node, where a 2-GPU training job runs beside 2 free GPUs. The training
// job is preempted with a grace, the interactive job waits held, and
// Steward holds the 2 free GPUs with a placeholder job. A 1-GPU job
// submitted during the grace would be placed there by Nomad, and the
// interactive job would not fit when the victim stops; with the
// placeholder it waits, and the interactive job runs once the victim
// stops, the placeholder gone.
//
// The placeholder runs under steward-exec where the node has it (as a user
// of its own, no checkpoint signal), else under raw_exec: both are tried.
func TestPlaceholderKeepsFreeGPUs(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"raw_exec", "steward-exec"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			var opts testnomad.Options
			if driver == "steward-exec" {
				opts.Plugins = []testnomad.Plugin{{Name: "steward-exec", Config: fmt.Sprintf(`    checkpoint_root = %q`, t.TempDir())}}
			}
			placeholderKeepsFreeGPUs(t, driver, startClusterWith(t, 4, opts, "ml"))
		})
	}
}

func placeholderKeepsFreeGPUs(t *testing.T, driver string, c *cluster) {
	c.waitDriver(c.NodeID, driver)
	ctl := c.startController("ctl", writePolicy(t, placeholderPolicy))

	c.work("train", "ml", "training", 2, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("big", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRecord(30*time.Second, "ml", "big", "steward_reason", "GPUs are being freed for it: 2 GPUs of ml/train checkpoint")

	var ph *api.JobListStub
	testnomad.WaitFor(t, 20*time.Second, "a running placeholder in namespace steward", func() (bool, string) {
		jobs, _, err := c.Client.Jobs().List(&api.QueryOptions{Namespace: "steward", Prefix: "steward-hold-"})
		if err != nil || len(jobs) != 1 {
			return false, fmt.Sprintf("%d placeholders, %v", len(jobs), err)
		}
		ph = jobs[0]
		return c.running("steward", ph.ID) == 1, "placeholder " + ph.ID + " not running yet"
	})
	job, _, err := c.Client.Jobs().Info(ph.ID, &api.QueryOptions{Namespace: "steward"})
	if err != nil {
		t.Fatal(err)
	}
	if got := *job.TaskGroups[0].Tasks[0]; got.Driver != driver {
		t.Errorf("placeholder runs under %s, want %s", got.Driver, driver)
	}
	if got := job.Meta["steward.placeholder_for"]; got != "ml/big" {
		t.Errorf("placeholder for %q, want ml/big", got)
	}
	if reason := job.Meta["steward.reason"]; !strings.Contains(reason, "holds 2 free GPUs on node") {
		t.Errorf("placeholder reason %q", reason)
	}

	// Nomad would place this at once on the free GPUs: the placeholder
	// holds them, so it waits (and Steward holds it).
	c.work("sneak", "ml", "training", 1, 1, "priority", "40")
	deadline := time.Now().Add(30 * time.Second)
	for c.running("ml", "big") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("ml/big not running 30 s after the preemption; controller log:\n%s", tail(ctl.Log(), 40))
		}
		if n := c.running("ml", "sneak"); n != 0 {
			t.Fatalf("ml/sneak runs (%d) while ml/big waits for the victim's GPUs", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.waitRunning(30*time.Second, map[string]int{"ml/big": 1, "ml/train": 0, "ml/sneak": 0})
	// It was resumed ahead of Nomad's queue: an evaluation of priority
	// 100, the job's own priority unchanged.
	evals, _, err := c.Client.Jobs().Evaluations("big", &api.QueryOptions{Namespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	var prios []int
	ahead := false
	for _, e := range evals {
		prios = append(prios, e.Priority)
		ahead = ahead || (e.Priority == 100 && e.TriggeredBy == "job-register")
	}
	if !ahead {
		t.Errorf("ml/big's evaluations have priorities %v: want one of 100, by its resume", prios)
	}
	if big, _, err := c.Client.Jobs().Info("big", &api.QueryOptions{Namespace: "ml"}); err != nil || *big.Priority != 60 {
		t.Errorf("ml/big's priority: %v (%v), want 60", big, err)
	}
	testnomad.WaitFor(t, 20*time.Second, "the placeholder purged", func() (bool, string) {
		_, _, err := c.Client.Jobs().Info(ph.ID, &api.QueryOptions{Namespace: "steward"})
		return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprint(err)
	})
	if !ctl.Contains("placeholder registered") || !ctl.Contains("placeholder purged") {
		t.Errorf("the controller's log does not show the placeholder registered and purged:\n%s", tail(ctl.Log(), 40))
	}
}

const urgentPolicy = `
tier "inference" {
  priority      = 90
  preemptible   = false
  preempt_grace = "0s"
}
` + twoTiers + `
tenant "ml" {
  reserve = 4
}
preemption {
  min_runtime = "0s"
  grace       = "20s"
}
`

// TestUrgentWorkTakesSetAsideGPUs: as in TestPlaceholderKeepsFreeGPUs, a
// 4-GPU interactive job waits while a 2-GPU training job checkpoints for it
// (20 s grace), and a placeholder holds the 2 free GPUs beside it. Then an
// inference job (an urgent tier: preempt_grace 0s) of 1 GPU arrives: nothing
// else is free, and nothing may be preempted for it (the only other work
// is already draining). It takes one of the set-aside GPUs at once — the
// placeholder is purged for it — rather than waiting out the victim's grace
// with GPUs idle beside it.
func TestUrgentWorkTakesSetAsideGPUs(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 4, testnomad.Options{}, "ml")
	c.waitDriver(c.NodeID, "raw_exec")
	ctl := c.startController("ctl", writePolicy(t, urgentPolicy))

	c.work("train", "ml", "training", 2, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("big", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRecord(30*time.Second, "ml", "big", "steward_reason", "GPUs are being freed for it: 2 GPUs of ml/train checkpoint")
	testnomad.WaitFor(t, 20*time.Second, "a running placeholder in namespace steward", func() (bool, string) {
		jobs, _, err := c.Client.Jobs().List(&api.QueryOptions{Namespace: "steward", Prefix: "steward-hold-"})
		if err != nil || len(jobs) != 1 {
			return false, fmt.Sprintf("%d placeholders, %v", len(jobs), err)
		}
		return c.running("steward", jobs[0].ID) == 1, "placeholder " + jobs[0].ID + " not running yet"
	})

	submitted := time.Now()
	c.work("api", "ml", "inference", 1, 1, "priority", "90")
	deadline := submitted.Add(15 * time.Second)
	for c.running("ml", "api") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("ml/api not running 15 s after it was submitted; controller log:\n%s", tail(ctl.Log(), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(submitted)
	if c.running("ml", "train") != 1 {
		t.Errorf("ml/api ran only once the victim had stopped (%s after it was submitted): it waited for the grace", took)
	}
	t.Logf("ml/api running %s after it was submitted, the victim still checkpointing", took.Round(time.Millisecond))
	if !ctl.Contains("set-aside GPUs taken") || !ctl.Contains("tier inference (priority 90) of ml/api/work takes 1 GPU") {
		t.Errorf("the controller's log does not record the GPUs taken:\n%s", tail(ctl.Log(), 40))
	}
}
