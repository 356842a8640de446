package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/internal/testdocker"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// notebookIdleAfter is the idle rule's time in idlePolicyText.
const notebookIdleAfter = 6 * time.Second

// notebookBusyWatch is how long the busy notebook is watched once its GPU
// reads busy: four times the idle rule's time, with the controller
// sampling every second.
const notebookBusyWatch = 4 * notebookIdleAfter

// idleReasonRE picks the figures out of an idle reclaim's reason
// (policy/engine/reasons.go): "GPU utilisation 0% (under 10%) for 7s
// (idle rule notebooks: after 6s, mode always); job stopped".
var idleReasonRE = regexp.MustCompile(`GPU utilisation (\d+)% \(under (\d+)%\) for (\d+)s \(idle rule notebooks: after 6s, mode always\); job stopped`)

// TestDockerNotebookIdleReclaimedStockStats: the example
// jobs/notebook-docker.nomad.hcl, as shipped but for the image's tag in the
// run's daemon, runs under Nomad's docker driver (no network) on a client
// of the production-shaped cluster whose GPU stats have exactly the shape
// of HashiCorp's nomad-device-nvidia (the simulated backend with
// sim_stats_shape = "nomad-device-nvidia": Summary = memory used in MiB,
// utilisation only in the "GPU utilization" statistic). The notebook's
// stand-in writes 80% to its GPU's activity file (devices/sim.go: the
// file's path is in STEWARD_SIM_ACTIVITY_FILES, its dir mounted into the
// container) while /alloc/busy exists, 0% once it is gone.
//
//   - idle: its user leaves it (`nomad alloc exec ... sh -c "rm
//     /alloc/busy"`: the image has no rm of its own, only busybox's
//     applets through sh); its GPU reads 0% and it is idle-reclaimed, its
//     reason naming the figures (utilisation under the threshold, for at
//     least the rule's time).
//   - busy: it keeps working; its GPU reads 80% with a Summary of 0 MiB
//     (a controller that read the Summary as utilisation took it for 0%
//     idle and stopped it 7 s in: checked by building one), and it is
//     never reclaimed in four times the rule's time.
//
// The idle rule's mode is "always", not "pressure": in pressure mode an
// idle notebook is reclaimed only when other work waits for its GPU, so
// the busy case would pass whatever its GPU read, and the idle case would
// hang on the timing of a second job. In mode always the notebook's own
// GPU reading alone decides, so each case's outcome says what the
// controller read from the stock-shaped stats.
func TestDockerNotebookIdleReclaimedStockStats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// leave: the notebook's user stops working in it once its GPU
		// reads busy.
		leave bool
	}{
		{name: "idle", leave: true},
		{name: "busy", leave: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 1, statsShape: "nomad-device-nvidia"}},
				extra: dockerExtra(t, testnomad.Options{})}, "product")
			c.waitDriver(c.NodeID, "docker")
			ctl := c.startController("ctl", writePolicy(t, idlePolicyText("always", "stop")))

			job := c.RegisterJobFile(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "notebook-docker.nomad.hcl"), map[string]string{
				"namespace": "product", "image": testdocker.Image("shell")})
			nb := c.waitJobAlloc("product", *job.ID, "", 90*time.Second)
			if nb.NodeID != c.NodeID {
				t.Fatalf("notebook placed on %s, not the GPU client %s", nb.NodeID, c.NodeID)
			}
			if task := job.TaskGroups[0].Tasks[0]; task.Driver != "docker" || task.Config["network_mode"] != "none" {
				t.Errorf("the example runs under %s with network_mode %v, want docker and none", task.Driver, task.Config["network_mode"])
			}
			gpu := allocGPU(t, nb)
			c.waitStockUtil(nb.NodeID, gpu, 80, 30*time.Second)
			busySince := time.Now()

			if tc.leave {
				c.allocExec(nb, "notebook", "sh", "-c", "rm /alloc/busy")
				left := time.Now()
				c.waitStockUtil(nb.NodeID, gpu, 0, 15*time.Second)
				testnomad.WaitFor(t, 60*time.Second, "the idle notebook reclaimed", func() (bool, string) {
					return c.running("product", *job.ID) == 0, fmt.Sprint(c.record("product", *job.ID))
				})
				t.Logf("idle notebook reclaimed %s after its user left it", time.Since(left).Round(time.Second))
				rec := c.waitRecord(20*time.Second, "product", *job.ID, "steward_state", "idle-stopped")
				m := idleReasonRE.FindStringSubmatch(rec["steward_reason"])
				if m == nil {
					t.Fatalf("the idle notebook's reason does not name its figures: %q", rec["steward_reason"])
				}
				util, _ := strconv.Atoi(m[1])
				threshold, _ := strconv.Atoi(m[2])
				secs, _ := strconv.Atoi(m[3])
				if threshold != 10 || util >= threshold || time.Duration(secs)*time.Second < notebookIdleAfter {
					t.Errorf("the idle notebook's reason %q: utilisation %d%% under %d%% for %ds, want under 10%% for at least %s",
						rec["steward_reason"], util, threshold, secs, notebookIdleAfter)
				}
				t.Logf("reason: %s", rec["steward_reason"])
				// Its allocation was stopped by Steward, not failed.
				if a := c.alloc(nb.ID); a.DesiredStatus != "stop" {
					t.Errorf("the reclaimed notebook's allocation is %s/%s, want desired stop", a.DesiredStatus, a.ClientStatus)
				}
			} else {
				for end := busySince.Add(notebookBusyWatch); time.Now().Before(end); time.Sleep(time.Second) {
					if n := c.running("product", *job.ID); n != 1 {
						t.Fatalf("the busy notebook was reclaimed %s after its GPU read 80%% (running %d); its record: %v",
							time.Since(busySince).Round(time.Second), n, c.record("product", *job.ID))
					}
				}
				// Its GPU still reads busy: the watch was not of a notebook
				// that stopped working.
				c.waitStockUtil(nb.NodeID, gpu, 80, 5*time.Second)
				if rec := c.record("product", *job.ID); strings.Contains(rec["steward_state"], "idle") || strings.Contains(rec["steward_reason"], "GPU utilisation") {
					t.Errorf("the busy notebook's record %v", rec)
				}
				// The controller sees it (its tenant holds its GPU) and
				// does not count it idle.
				st := c.stewardStatus()
				var inUse int
				for _, tn := range st.Tenants {
					if tn.Tenant == "product" {
						inUse = tn.InUse
					}
				}
				if inUse != 1 {
					t.Errorf("steward status: tenant product holds %d GPUs, want the notebook's 1 (tenants %+v)", inUse, st.Tenants)
				}
				for _, i := range st.Idle {
					if i.Job == "product/"+*job.ID {
						t.Errorf("steward status lists the busy notebook as idle: %+v", i)
					}
				}
				t.Logf("busy notebook still running %s after its GPU read busy (idle rule after %s)",
					time.Since(busySince).Round(time.Second), notebookIdleAfter)
			}
			if ctl.Contains("GPU refused") {
				t.Errorf("the controller refused the stock-shaped GPU:\n%s", tail(ctl.Log(), 20))
			}
		})
	}
}

// allocGPU is the one GPU the notebook's task holds.
func allocGPU(t *testing.T, a *api.Allocation) string {
	t.Helper()
	var ids []string
	if a.AllocatedResources != nil {
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				ids = append(ids, d.DeviceIDs...)
			}
		}
	}
	if len(ids) != 1 {
		t.Fatalf("allocation %s holds GPUs %v, want one", a.ID, ids)
	}
	return ids[0]
}

// waitStockUtil waits until the GPU's stats in its node's host stats
// (what the controller reads: the client's device plugin's) have the stock
// plugin's shape, a Summary in MiB and utilisation only in the "GPU
// utilization" statistic, and that statistic reads want. (Not the
// allocation's stats: Nomad adds device stats to a task's only once its
// driver has reported the task's own usage, and here the docker task's
// carried none in 30 s.)
func (c *cluster) waitStockUtil(node, gpu string, want int64, timeout time.Duration) {
	c.t.Helper()
	start := time.Now()
	testnomad.WaitFor(c.t, timeout, fmt.Sprintf("GPU %s at %d%% (stock-shaped stats)", gpu, want), func() (bool, string) {
		hs, err := c.Client.Nodes().Stats(node, nil)
		if err != nil {
			return false, err.Error()
		}
		var groups []string
		for _, g := range hs.DeviceStats {
			ds := g.InstanceStats[gpu]
			if ds == nil {
				groups = append(groups, fmt.Sprintf("%s/%s/%s (%d devices)", g.Vendor, g.Type, g.Name, len(g.InstanceStats)))
				continue
			}
			if ds.Summary == nil || ds.Summary.Unit != "MiB" || ds.Stats == nil {
				return false, fmt.Sprintf("not the stock shape: summary %s", statText(ds.Summary))
			}
			u := ds.Stats.Attributes["GPU utilization"]
			if u == nil || u.Unit != "%" || u.IntNumeratorVal == nil {
				return false, fmt.Sprintf("GPU utilization %s", statText(u))
			}
			if *u.IntNumeratorVal != want {
				return false, fmt.Sprintf("GPU utilization %s, summary %s", statText(u), statText(ds.Summary))
			}
			c.t.Logf("GPU %s: GPU utilization %s, summary %s, after %s", gpu, statText(u), statText(ds.Summary),
				time.Since(start).Round(100*time.Millisecond))
			return true, ""
		}
		return false, fmt.Sprintf("no stats for GPU %s in its node's device stats %v", gpu, groups)
	})
}

// allocExec runs a command in a task as its user would, with `nomad alloc
// exec` and the operator's token.
func (c *cluster) allocExec(a *api.Allocation, task string, cmdArgs ...string) {
	c.t.Helper()
	args := append([]string{"alloc", "exec", "-i=false", "-t=false", "-namespace", a.Namespace, "-task", task, a.ID}, cmdArgs...)
	cmd := exec.Command(testnomad.NomadBin(c.t), args...)
	cmd.Env = c.nomadEnv(prodMgmtToken)
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// stewardStatus reads the controller's latest status (steward status).
func (c *cluster) stewardStatus() controller.Status {
	c.t.Helper()
	var st controller.Status
	v, _, err := c.Client.Variables().Read("steward/status", &api.QueryOptions{Namespace: "steward"})
	if err != nil {
		c.t.Fatalf("steward status: %v", err)
	}
	if err := json.Unmarshal([]byte(v.Items["status"]), &st); err != nil {
		c.t.Fatalf("steward status: %v", err)
	}
	return st
}
