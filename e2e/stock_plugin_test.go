package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestIdleReclaimWithStockPluginStats: on a node whose GPU stats have
// exactly the shape of HashiCorp's nomad-device-nvidia (the simulated
// backend with sim_stats_shape = "nomad-device-nvidia": Summary = memory
// used in MiB, utilisation the "GPU utilization" statistic), a notebook
// idle by utilisation (2%) but holding a loaded model (30000 MiB) is
// idle-reclaimed, and the same notebook busy (95%) with little memory
// (6 MiB) is never reclaimed. A controller that read the Summary as a
// percentage saw the opposite: 30000 "%" busy, 6 "%" idle under the rule's
// 10%.
func TestIdleReclaimWithStockPluginStats(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2, statsShape: "nomad-device-nvidia"}}}, "product")

	// The node has the attributes the stock plugin fingerprints, so that
	// constraints written for it match.
	node, _, err := c.Client.Nodes().Info(c.NodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range node.NodeResources.Devices {
		for _, attr := range []string{"bar1", "cores_clock", "memory_clock", "pci_bandwidth", "display_state", "persistence_mode", "memory", "power", "driver_version"} {
			if d.Attributes[attr] == nil {
				t.Errorf("device group %s/%s/%s lacks attribute %s", d.Vendor, d.Type, d.Name, attr)
			}
		}
	}

	ctl := c.startController("ctl", writePolicy(t, idlePolicyText("always", "stop")))
	c.work("idle-nb", "product", "interactive", 1, 1, "priority", "60",
		"busy_seconds", "0", "idle_percent", "2", "gpu_memory_mib", "30000")
	c.work("busy-nb", "product", "interactive", 1, 1, "priority", "60",
		"busy_percent", "95", "gpu_memory_mib", "6")
	c.waitRunning(60*time.Second, map[string]int{"product/idle-nb": 1, "product/busy-nb": 1})
	started := time.Now()

	// Both verdicts are collected before failing, so that a controller
	// that reads the Summary shows both of its mistakes.
	var idleGone, busyGone time.Duration
	for deadline := started.Add(60 * time.Second); time.Now().Before(deadline) && idleGone == 0; time.Sleep(time.Second) {
		if idleGone == 0 && c.running("product", "idle-nb") == 0 {
			idleGone = time.Since(started)
		}
		if busyGone == 0 && c.running("product", "busy-nb") == 0 {
			busyGone = time.Since(started)
		}
	}
	// The rule's time is 6 s: the busy notebook has had well over twice
	// that once the idle one is gone; watch it a while longer.
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end) && busyGone == 0; time.Sleep(time.Second) {
		if c.running("product", "busy-nb") == 0 {
			busyGone = time.Since(started)
		}
	}
	if idleGone == 0 {
		t.Errorf("the notebook idle at 2%% with 30000 MiB of model loaded was not reclaimed in 60s (its Summary read as utilisation?)")
	} else {
		t.Logf("idle notebook reclaimed %s after it started", idleGone.Round(time.Second))
		rec := c.waitRecord(20*time.Second, "product", "idle-nb", "steward_state", "idle-stopped")
		if !strings.Contains(rec["steward_reason"], "(under 10%)") {
			t.Errorf("idle notebook's reason %q", rec["steward_reason"])
		}
	}
	if busyGone != 0 {
		t.Errorf("the notebook busy at 95%% with 6 MiB was reclaimed %s after it started (its Summary read as utilisation?)", busyGone.Round(time.Second))
	}
	if rec := c.record("product", "busy-nb"); strings.Contains(rec["steward_state"], "idle") {
		t.Errorf("busy notebook's record %v", rec)
	}
	if ctl.Contains("GPU refused") {
		t.Errorf("the controller refused a GPU of the stock shape:\n%s", tail(ctl.Log(), 20))
	}

	// steward status does not list the busy notebook as idle, nor warn
	// about the stock-shaped GPUs.
	v, _, err := c.Client.Variables().Read("steward/status", &api.QueryOptions{Namespace: "steward"})
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Idle     []struct{ Job string }     `json:"idle"`
		Warnings []struct{ Problem string } `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(v.Items["status"]), &st); err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, i := range st.Idle {
		if i.Job == "product/busy-nb" {
			t.Errorf("steward status lists the busy notebook as idle")
		}
	}
	if len(st.Warnings) != 0 {
		t.Errorf("status warnings %+v", st.Warnings)
	}
}
