package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

const smallDefectsPolicy = twoTiers + `
tenant "ml" {
  reserve = 0
  limit   = 1
}
tenant "research" {
  reserve = 0
}
idle "notebooks" {
  tiers      = ["interactive"]
  threshold  = 10
  after      = "1h"
  max_snooze = "1m"
}
preemption {
  min_runtime       = "0s"
  grace             = "3s"
  checkpoint_signal = "SIGUSR1"
}
`

// TestSmallDefects: five things a user sees, on one agent with 2 GPUs
// (issue 28, item 6), one subtest each, in order:
//
//   - over_limit_placement_is_held: work Nomad places over its tenant's
//     limit is stopped at once and its job is held by the limit, not
//     preempted (no preemption counted);
//   - queue_json_without_forecast: `steward queue -json` leaves out the
//     forecast of a job that has none;
//   - checkpoint_signal_nomad_cannot_send: a job meta checkpoint signal
//     Nomad cannot send (SIGPWR: raw_exec would send SIGINT) is refused in
//     the record, and the policy's is sent: the task checkpoints;
//   - snooze_cut_says_to_what: a snooze cut by max_snooze says how long;
//   - record_agrees_with_queue: a waiting job's "position x of N" agrees
//     with what `steward queue` lists, and a namespace's view says how
//     many wait in the cluster.
func TestSmallDefects(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "ml", "research")
	ctl := c.startController("ctl", writePolicy(t, smallDefectsPolicy))
	// Each subtest waits and fails on its own t (the cluster's helpers
	// fail the whole test), and with t.Errorf where a later subtest
	// still needs the rest of it done.
	eventually := func(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) bool {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			ok, status := cond()
			if ok {
				return true
			}
			if time.Now().After(deadline) {
				t.Errorf("timed out after %v waiting for %s; last status: %s", timeout, what, status)
				return false
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	running := func(t *testing.T, timeout time.Duration, want map[string]int) bool {
		t.Helper()
		return eventually(t, timeout, fmt.Sprintf("running allocations %v", want), func() (bool, string) {
			ok, got := true, ""
			for k, n := range want {
				ns, job, _ := strings.Cut(k, "/")
				r := c.running(ns, job)
				got += fmt.Sprintf("%s=%d ", k, r)
				ok = ok && r == n
			}
			return ok, got
		})
	}
	record := func(t *testing.T, timeout time.Duration, ns, job, key, contains string) map[string]string {
		t.Helper()
		var rec map[string]string
		eventually(t, timeout, fmt.Sprintf("record of %s/%s with %s containing %q", ns, job, key, contains), func() (bool, string) {
			rec = c.record(ns, job)
			return strings.Contains(rec[key], contains), fmt.Sprint(rec)
		})
		return rec
	}
	purge := func(t *testing.T, ns string, jobs ...string) {
		t.Helper()
		want := map[string]int{}
		for _, job := range jobs {
			if _, _, err := c.Client.Jobs().Deregister(job, true, &api.WriteOptions{Namespace: ns}); err != nil {
				t.Errorf("purge %s/%s: %v", ns, job, err)
			}
			want[ns+"/"+job] = 0
		}
		running(t, 60*time.Second, want)
	}
	// queue is `steward queue -json` (the operator's, the cluster's).
	queue := func() ([]map[string]any, string) {
		out, err := c.steward("queue", "-json")
		var q []map[string]any
		if err != nil || json.Unmarshal([]byte(out), &q) != nil {
			return nil, out
		}
		return q, out
	}
	jobsOf := func(q []map[string]any) []string {
		var jobs []string
		for _, e := range q {
			jobs = append(jobs, fmt.Sprint(e["job"]))
		}
		return jobs
	}

	t.Run("over_limit_placement_is_held", func(t *testing.T) {
		defer purge(t, "ml", "lim1", "lim2")
		c.work("lim1", "ml", "training", 1, 1)
		running(t, 60*time.Second, map[string]int{"ml/lim1": 1})
		// A GPU is free: Nomad places lim2 at once, over ml's limit of 1.
		c.work("lim2", "ml", "training", 1, 1)
		rec := record(t, 60*time.Second, "ml", "lim2", "steward_state", "held")
		if rec["steward_rule"] != "limit" || !strings.Contains(rec["steward_reason"], "limit 1") || rec["steward_preemptions"] != "0" {
			t.Errorf("record %v: want held by the limit (rule limit, its numbers), no preemption", rec)
		}
		running(t, 30*time.Second, map[string]int{"ml/lim1": 1, "ml/lim2": 0})
		if rec := c.record("ml", "lim1"); rec["steward_preemptions"] != "" && rec["steward_preemptions"] != "0" {
			t.Errorf("lim1's record %v: it was never stopped", rec)
		}
	})

	t.Run("queue_json_without_forecast", func(t *testing.T) {
		defer purge(t, "ml", "big")
		// 2 GPUs under ml's limit of 1: it never starts, and has no
		// forecast once one is made.
		c.work("big", "ml", "training", 2, 1)
		var out string
		eventually(t, 60*time.Second, "ml/big in steward queue -json, with a forecast note", func() (bool, string) {
			var q []map[string]any
			q, out = queue()
			for _, e := range q {
				if e["job"] == "ml/big" && e["forecast_note"] != nil {
					return true, out
				}
			}
			return false, out
		})
		if strings.Contains(out, "forecast_p50") || strings.Contains(out, "forecast_p90") || strings.Contains(out, "0001-01-01") {
			t.Errorf("steward queue -json gives a job with no forecast a forecast time:\n%s", out)
		}
	})

	// The last three share research/sig (preempted, then waiting) and
	// research/nb (interactive, running on both GPUs).
	t.Run("checkpoint_signal_nomad_cannot_send", func(t *testing.T) {
		c.work("sig", "research", "training", 2, 1, "checkpoint_signal", "SIGPWR")
		running(t, 60*time.Second, map[string]int{"research/sig": 1})
		rec := record(t, 30*time.Second, "research", "sig", "steward_warning", "SIGPWR")
		if want := `steward.checkpoint_signal "SIGPWR" is a signal Nomad cannot send (raw_exec and exec would send SIGINT): uses SIGUSR1`; !strings.Contains(rec["steward_warning"], want) {
			t.Errorf("steward_warning %q, want %q", rec["steward_warning"], want)
		}
		victim := c.allocIDs("research", "sig")[0]
		c.work("nb", "research", "interactive", 2, 1, "priority", "60")
		running(t, 60*time.Second, map[string]int{"research/nb": 1, "research/sig": 0})
		if !ctl.Contains("checkpoint signal sent: job=research/sig signal=SIGUSR1") {
			t.Errorf("the controller did not send the policy's SIGUSR1:\n%s", tail(ctl.Log(), 40))
		}
		alloc, _, err := c.Client.Allocations().Info(victim, &api.QueryOptions{Namespace: "research"})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := readTaskStdout(c.Agent, alloc, "work"); err != nil || !strings.Contains(out, "checkpoint requested: saving state") {
			t.Errorf("the task did not checkpoint (%v):\n%s", err, out)
		}
	})

	t.Run("snooze_cut_says_to_what", func(t *testing.T) {
		out, err := c.steward("snooze", "-namespace", "research", "nb", "2h")
		t.Logf("steward snooze: %v\n%s", err, out)
		rec := record(t, 30*time.Second, "research", "nb", "steward_snooze", "asked for 2h")
		if want := "by a request in namespace research (asked for 2h, cut to 1m; idle rule notebooks allows up to 1m)"; !strings.HasSuffix(rec["steward_snooze"], want) {
			t.Errorf("steward_snooze %q, want it to end %q", rec["steward_snooze"], want)
		}
	})

	t.Run("record_agrees_with_queue", func(t *testing.T) {
		// research/nb holds both GPUs; research/sig waits (preempted).
		c.work("w2", "research", "training", 2, 1)
		c.work("mlq", "ml", "training", 1, 1)
		eventually(t, 60*time.Second, "steward queue lists 3 jobs", func() (bool, string) {
			q, out := queue()
			return len(q) == 3, out
		})
		record(t, 30*time.Second, "research", "sig", "steward_position", "of 3 in the cluster")
		eventually(t, 30*time.Second, "research's view says how many wait in the cluster", func() (bool, string) {
			out, err := c.steward("queue", "-namespace", "research")
			return err == nil && strings.Contains(out, "2 of the 3 jobs waiting in the cluster listed; positions count them all."), out
		})
		purge(t, "research", "w2")
		purge(t, "ml", "mlq")
		eventually(t, 30*time.Second, "steward queue lists research/sig alone", func() (bool, string) {
			q, out := queue()
			return strings.Join(jobsOf(q), " ") == "research/sig", out
		})
		// The record follows within a round or two, not a minute on.
		record(t, 15*time.Second, "research", "sig", "steward_position", "1 of 1 in the cluster, 1 of 1 in tenant research")
	})
}
