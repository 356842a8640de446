package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// fairSharePolicy: two tenants with no reserve and the same weight, whose
// use of borrowed GPUs is remembered (fair share over time).
const fairSharePolicy = twoTiers + `
tenant "ta" {
  reserve = 0
  weight  = 1
}
tenant "tb" {
  reserve = 0
  weight  = 1
}
preemption {
  min_runtime          = "0s"
  grace                = "0s"
  fair_share_half_life = "1h"
}
`

// TestFairShareOverTime (issue 31): tenants ta and tb, equal weights and
// no reserve, each submit a backlog of one-GPU batch jobs to a 2-GPU node,
// ta 10 s before tb. ta's first jobs take both GPUs; from then on, tb's
// work goes first until its decayed use has caught up with ta's, so that
// over the time both wait, head start included, each gets 40–60 % of the
// GPU-seconds. By the GPUs borrowed *now* (the order without a half-life)
// the two would alternate from the start, and ta's head start would never
// be paid back.
func TestFairShareOverTime(t *testing.T) {
	c := startCluster(t, 2, "ta", "tb")
	ctl := c.startController("ctl", writePolicy(t, fairSharePolicy))

	const perTenant, seconds = 6, 15
	jobs := map[string][]string{}
	submit := func(ns string) {
		for i := range perTenant {
			name := fmt.Sprintf("%s-%d", ns, i)
			c.work(name, ns, "training", 1, 1, "type", "batch", "busy_seconds", fmt.Sprint(seconds), "priority", "40")
			jobs[ns] = append(jobs[ns], name)
		}
	}
	submit("ta")
	c.waitRunning(60*time.Second, map[string]int{"ta/ta-0": 1, "ta/ta-1": 1})
	time.Sleep(10 * time.Second)
	submit("tb")

	// runs lists each tenant's work: [start, end) of every allocation
	// whose task started (end: now while it runs).
	type span struct{ from, to time.Time }
	started := map[string]map[string]bool{} // tenant → jobs that started
	runs := func() map[string][]span {
		out := map[string][]span{}
		for ns, names := range jobs {
			for _, name := range names {
				allocs, _, err := c.Client.Jobs().Allocations(name, true, &api.QueryOptions{Namespace: ns})
				if err != nil {
					t.Fatalf("allocations of %s/%s: %v", ns, name, err)
				}
				for _, a := range allocs {
					ts := a.TaskStates["work"]
					if ts == nil || ts.StartedAt.IsZero() {
						continue
					}
					end := ts.FinishedAt
					if end.IsZero() {
						end = time.Now()
					}
					out[ns] = append(out[ns], span{ts.StartedAt, end})
					if started[ns] == nil {
						started[ns] = map[string]bool{}
					}
					started[ns][name] = true
				}
			}
		}
		return out
	}
	// Both wait until the first tenant's last job has started: after
	// that one tenant has nothing left waiting. Zero until every job of
	// both has started.
	lastStart := func(r map[string][]span) time.Time {
		var end time.Time
		for _, ns := range []string{"ta", "tb"} {
			if len(started[ns]) < perTenant {
				return time.Time{} // not all started yet
			}
			var last time.Time
			for _, s := range r[ns] {
				if s.from.After(last) {
					last = s.from
				}
			}
			if end.IsZero() || last.Before(end) {
				end = last
			}
		}
		return end
	}
	deadline := time.Now().Add(time.Duration(2*perTenant*seconds)*time.Second + 120*time.Second)
	var r map[string][]span
	var end time.Time
	for end.IsZero() {
		r = runs()
		end = lastStart(r)
		if end.IsZero() && time.Now().After(deadline) {
			t.Fatalf("not all work started in time: ta %d, tb %d runs\ncontroller log:\n%s", len(r["ta"]), len(r["tb"]), tail(ctl.Log(), 80))
		}
		time.Sleep(time.Second)
	}
	var begin time.Time
	for _, s := range r["ta"] {
		if begin.IsZero() || s.from.Before(begin) {
			begin = s.from
		}
	}
	gpuSec := map[string]float64{}
	var total float64
	for ns, spans := range r {
		for _, s := range spans {
			from, to := s.from, s.to
			if from.Before(begin) {
				from = begin
			}
			if to.After(end) {
				to = end
			}
			if to.After(from) {
				gpuSec[ns] += to.Sub(from).Seconds()
				total += to.Sub(from).Seconds()
			}
		}
	}
	var summary []string
	for _, ns := range []string{"ta", "tb"} {
		summary = append(summary, fmt.Sprintf("%s %.0f GPU-s (%.0f %%)", ns, gpuSec[ns], 100*gpuSec[ns]/total))
	}
	t.Logf("from ta's first start to %s later (until one tenant had nothing waiting): %s", end.Sub(begin).Round(time.Second), strings.Join(summary, ", "))
	for _, ns := range []string{"ta", "tb"} {
		if share := gpuSec[ns] / total; share < 0.4 || share > 0.6 {
			t.Errorf("tenant %s got %.0f %% of the GPU-seconds while both waited, want 40–60 %%: %s\ncontroller log:\n%s",
				ns, 100*share, strings.Join(summary, ", "), tail(ctl.Log(), 80))
		}
	}
	if !strings.Contains(ctl.Log(), "resume: job=tb/") {
		t.Errorf("Steward resumed none of tb's work: the story did not happen\ncontroller log:\n%s", tail(ctl.Log(), 60))
	}
}
