package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// Issue 29, item 2: system and sysbatch GPU jobs are governed like any
// job, whole. Before, the controller left them out: their GPUs counted as
// free, never limited, preempted or idle-reclaimed, and their priority
// stayed their owner's.

// sysCluster is the cluster these tests run on: two client nodes of gpus
// GPUs each (a system job places one allocation on every eligible node).
// It is the production-shaped cluster (two GPU clients and a plain one).
func sysCluster(t *testing.T, gpus int, namespaces ...string) *cluster {
	t.Helper()
	return startProdCluster(t, prodSpec{gpus: []simGPUs{{count: gpus}, {count: gpus}}}, namespaces...)
}

// sysWork registers jobs/gpu-work.nomad.hcl as a job of type typ
// ("system" or "sysbatch"), with gpus GPUs per node. Nomad refuses a
// reschedule block in such jobs: it is dropped.
func (c *cluster) sysWork(name, ns, tier, typ string, gpus int, extra ...string) {
	c.t.Helper()
	src, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(c.t), "jobs", "gpu-work.nomad.hcl"))
	if err != nil {
		c.t.Fatal(err)
	}
	vars := fmt.Sprintf("name = %q\nnamespace = %q\ntier = %q\ngpus = %d\ntype = %q\n", name, ns, tier, gpus, typ)
	for i := 0; i+1 < len(extra); i += 2 {
		vars += fmt.Sprintf("%s = %q\n", extra[i], extra[i+1])
	}
	job, err := c.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, tg := range job.TaskGroups {
		tg.ReschedulePolicy = nil
	}
	if _, _, err := c.Client.Jobs().Register(job, &api.WriteOptions{Namespace: ns}); err != nil {
		c.t.Fatalf("register %s: %v", name, err)
	}
}

// jobPriority is a job's priority as Nomad has it.
func (c *cluster) jobPriority(ns, id string) int {
	j, _, err := c.Client.Jobs().Info(id, &api.QueryOptions{Namespace: ns})
	if err != nil || j.Priority == nil {
		return -1
	}
	return *j.Priority
}

// TestSystemJobIsCharged: tenant a (limit 2) runs a system job of 1 GPU
// per node at priority 100 on both nodes: 2 GPUs, its whole limit. Steward
// resets its priority to its tier's, and a's next job, 1 GPU more, is held
// for a's limit rather than run as if the system job held nothing.
func TestSystemJobIsCharged(t *testing.T) {
	t.Parallel()
	c := sysCluster(t, 2, "a")
	c.startController("ctl", writePolicy(t, twoTiers+`
tenant "a" {
  limit = 2
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`))
	c.sysWork("sys", "a", "training", "system", 1, "priority", "100")
	c.waitRunning(60*time.Second, map[string]int{"a/sys": 2})
	testnomad.WaitFor(t, 30*time.Second, "the system job's priority reset to its tier's (40)", func() (bool, string) {
		p := c.jobPriority("a", "sys")
		return p == 40, fmt.Sprint("priority ", p)
	})

	c.work("more", "a", "training", 1, 1, "priority", "40")
	rec := c.waitRecord(60*time.Second, "a", "more", "steward_state", "held")
	if !strings.Contains(rec["steward_reason"], "limit 2") {
		t.Errorf("a/more's reason %q does not name a's limit of 2", rec["steward_reason"])
	}
	time.Sleep(4 * time.Second)
	c.waitRunning(10*time.Second, map[string]int{"a/sys": 2, "a/more": 0})
}

// TestSysbatchJobIsGoverned: a sysbatch job's GPUs idle on both nodes
// under an idle rule in mode always: Steward stops it whole (every node's
// allocation), its record saying why with the numbers.
func TestSysbatchJobIsGoverned(t *testing.T) {
	t.Parallel()
	c := sysCluster(t, 2, "a")
	c.startController("ctl", writePolicy(t, twoTiers+`
tenant "a" {}
idle "daemons" {
  tiers     = ["training"]
  threshold = 10
  after     = "6s"
  mode      = "always"
  action    = "stop"
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`))
	c.sysWork("sb", "a", "training", "sysbatch", 1, "busy_seconds", "0", "idle_percent", "2")
	c.waitRunning(60*time.Second, map[string]int{"a/sb": 2})
	rec := c.waitRecord(90*time.Second, "a", "sb", "steward_reason", "idle rule daemons")
	if !strings.Contains(rec["steward_reason"], "under 10%") {
		t.Errorf("a/sb's reason %q lacks the threshold", rec["steward_reason"])
	}
	c.waitRunning(60*time.Second, map[string]int{"a/sb": 0})
	time.Sleep(4 * time.Second)
	if n := c.running("a", "sb"); n != 0 {
		t.Errorf("the idle sysbatch job runs again: %d allocations", n)
	}
}

// TestSystemJobPreemptedWithSignal: tenant a's system job (1 GPU on each
// of two 2-GPU nodes) stands in the way of tenant b's 2×2-GPU job within
// b's reserve of 4. Steward preempts the system job whole: the checkpoint
// signal to both its allocations, the grace, then the job held (count 0,
// still registered); b's job then runs on both nodes.
func TestSystemJobPreemptedWithSignal(t *testing.T) {
	t.Parallel()
	c := sysCluster(t, 2, "a", "b")
	c.startController("ctl", writePolicy(t, twoTiers+`
tenant "a" {}
tenant "b" {
  reserve = 4
}
preemption {
  min_runtime       = "0s"
  grace             = "3s"
  checkpoint_signal = "SIGUSR1"
}
`))
	c.sysWork("sys", "a", "training", "system", 1)
	c.waitRunning(60*time.Second, map[string]int{"a/sys": 2})
	victims := c.allocIDs("a", "sys")

	c.work("big", "b", "training", 2, 2)
	for _, id := range victims {
		c.waitTaskEvent(30*time.Second, "a", id, "Signaling", "SIGUSR1")
	}
	c.waitRunning(90*time.Second, map[string]int{"a/sys": 0, "b/big": 2})
	rec := c.waitRecord(30*time.Second, "a", "sys", "steward_state", "preempted")
	if !strings.Contains(rec["steward_reason"], "reserve") {
		t.Errorf("a/sys's reason %q does not say it yields to b's reserve", rec["steward_reason"])
	}
	if j, _, err := c.Client.Jobs().Info("sys", &api.QueryOptions{Namespace: "a"}); err != nil || j.Stop != nil && *j.Stop {
		t.Errorf("the preempted system job is not kept registered (resumable): %v %v", err, j.Stop)
	}
}

// TestNomadSystemPreemptionReported: Nomad's own system-scheduler
// preemption (on by default) evicts lower-priority work without a
// checkpoint signal when a system job registers, before Steward can act.
// With the shipped controller policy (operator read), the controller
// reads the setting, warns in its log and says "on" in /healthz; once the
// operator turns it off, a controller says "off" and does not warn.
func TestNomadSystemPreemptionReported(t *testing.T) {
	t.Parallel()
	c := sysCluster(t, 1, "a")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	state := func(ctl *controllerProc) string {
		t.Helper()
		var addr, got string
		testnomad.WaitFor(t, 60*time.Second, "system_preemption in /healthz", func() (bool, string) {
			if m := listenRE.FindStringSubmatch(ctl.Log()); m != nil {
				addr = m[1]
			}
			if addr == "" {
				return false, "no address yet"
			}
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				return false, err.Error()
			}
			defer resp.Body.Close()
			var h struct {
				SystemPreemption string `json:"system_preemption"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&h)
			got = h.SystemPreemption
			return got != "", got
		})
		return got
	}
	const warning = "Nomad's system scheduler preemption is on"
	on := c.startController("on", policy, "-listen", "127.0.0.1:0")
	if got := state(on); got != "on" {
		t.Errorf("Nomad's default (system preemption on): /healthz says %q, want on", got)
	}
	testnomad.WaitFor(t, 30*time.Second, "the warning in the log", func() (bool, string) { return on.Contains(warning), "" })
	on.Stop()

	cfg, _, err := c.Client.Operator().SchedulerGetConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SchedulerConfig.PreemptionConfig.SystemSchedulerEnabled = false
	if _, _, err := c.Client.Operator().SchedulerSetConfiguration(cfg.SchedulerConfig, nil); err != nil {
		t.Fatal(err)
	}
	off := c.startController("off", policy, "-listen", "127.0.0.1:0")
	if got := state(off); got != "off" {
		t.Errorf("system preemption turned off: /healthz says %q, want off", got)
	}
	if off.Contains(warning) {
		t.Errorf("the controller warns with system preemption off")
	}
}
