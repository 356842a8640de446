package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/internal/testnomad"
)

const forecastPolicy = `
tier "training" {
  priority    = 40
  preemptible = true
}
tenant "research" {
  limit = 16
}
tenant "product" {
  limit = 8
}
preemption {
  min_runtime       = "0s"
  grace             = "0s"
  checkpoint_signal = "SIGUSR1"
}
`

// workWithMeta registers jobs/gpu-work.nomad.hcl like cluster.work, with
// extra job meta.
func (c *cluster) workWithMeta(name, ns, tier string, gpus int, meta map[string]string) {
	c.t.Helper()
	vars := fmt.Sprintf("name = %q\nnamespace = %q\ntier = %q\ngpus = %d\ncount = 1\n", name, ns, tier, gpus)
	src, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(c.t), "jobs", "gpu-work.nomad.hcl"))
	if err != nil {
		c.t.Fatal(err)
	}
	job, err := c.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars, Canonicalize: true})
	if err != nil {
		c.t.Fatal(err)
	}
	if job.Meta == nil {
		job.Meta = map[string]string{}
	}
	for k, v := range meta {
		job.Meta[k] = v
	}
	if _, _, err := c.Client.Jobs().Register(job, nil); err != nil {
		c.t.Fatal(err)
	}
}

// TestQueueForecast: research's training holds all 8 GPUs and says it
// runs 2 hours in all; research and product each submit training that
// waits. The leader's status lists both in the queue, product's first
// (it borrows nothing), and each waiting job's record carries its
// position, since when it waits, its forecast (the running job's end,
// about 2 hours on) and what would unblock it.
func TestQueueForecast(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 8, "research", "product")
	c.startController("ctl", writePolicy(t, forecastPolicy))

	c.workWithMeta("train", "research", "training", 8, map[string]string{"steward.expected_runtime": "2h"})
	c.waitRunning(60*time.Second, map[string]int{"research/train": 1})
	c.work("wait", "research", "training", 4, 1)
	c.work("wait2", "product", "training", 2, 1)

	rec := c.waitRecord(60*time.Second, "research", "wait", "steward_position", "2 of 2 in the cluster, 1 of 1 in tenant research")
	rec = c.waitRecord(60*time.Second, "research", "wait", "steward_forecast", "(P50)")
	p50, err := time.Parse(time.RFC3339, rec["steward_forecast_p50"])
	// research/train said 2h; after an hour of waiting a promotion
	// (the policy's default promote) may preempt it sooner.
	if err != nil || p50.Before(time.Now().Add(30*time.Minute)) || p50.After(time.Now().Add(3*time.Hour)) {
		t.Errorf("steward_forecast_p50 %q (%v): want between 30m and 3h from now", rec["steward_forecast_p50"], err)
	}
	if _, err := time.Parse(time.RFC3339, rec["steward_waiting_since"]); err != nil {
		t.Errorf("steward_waiting_since %q: %v", rec["steward_waiting_since"], err)
	}
	// The queue's figures are as of a time (they are rewritten when they
	// move materially, not as time passes).
	if at, err := time.Parse(time.RFC3339, rec["steward_position_at"]); err != nil || at.After(time.Now().Add(time.Second)) {
		t.Errorf("steward_position_at %q (%v): want a time, not in the future", rec["steward_position_at"], err)
	}
	if !strings.Contains(rec["steward_unblock"], "research/train") {
		t.Errorf("steward_unblock %q: want it to name research/train", rec["steward_unblock"])
	}
	c.waitRecord(30*time.Second, "product", "wait2", "steward_position", "1 of 2 in the cluster, 1 of 1 in tenant product")

	// In the Nomad UI: the waiting job's record, its position, forecast
	// and what would unblock it revealed (values are masked until the eye
	// next to each is clicked).
	b := newBrowser(t, chromiumPath(t), artifactsDir(t))
	b.open(c.Address + "/ui/variables/var/nomad/jobs/wait@research")
	b.waitVisible(varRow("steward_forecast"), 60*time.Second)
	for _, key := range []string{"steward_position", "steward_forecast", "steward_unblock", "steward_reason"} {
		b.click("(" + varRow(key) + "//button)[last()]") // the eye; the first is "copy"
	}
	now := c.record("research", "wait")
	b.waitText(now["steward_forecast"], 30*time.Second)
	if got := b.text(varRow("steward_position") + "//code"); got != now["steward_position"] {
		t.Errorf("steward_position shows %q, want %q", got, now["steward_position"])
	}
	b.screenshot("ui-forecast-record.png")

	var st *controller.Status
	testnomad.WaitFor(t, 30*time.Second, "the queue with its forecast in the leader's status", func() (bool, string) {
		st, err = controller.ReadStatus(context.Background(), controller.NewNomad(c.Client), "steward")
		if err != nil {
			return false, err.Error()
		}
		ok := len(st.Queue) == 2 && st.Queue[0].Job == "product/wait2" && st.Queue[1].Job == "research/wait" &&
			st.Queue[1].Position == 2 && st.Queue[1].TenantPosition == 1 && st.Queue[1].Rule == "capacity" &&
			!st.Queue[1].ForecastP50.IsZero() && !st.Queue[1].ForecastP90.IsZero()
		return ok, fmt.Sprintf("%+v", st.Queue)
	})
}
