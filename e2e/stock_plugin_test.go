package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
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

// TestStockPluginMIGRefusedOnce: the stock plugin sends no stats for MIG
// instances, so an idle notebook on one has no utilisation to judge. The
// controller refuses it loudly and once: one line in its log, a warning on
// the job in `steward status` and in /healthz; it neither reclaims the
// notebook (not idle) nor counts it busy.
func TestStockPluginMIGRefusedOnce(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 1, statsShape: "nomad-device-nvidia", migProfile: "1g.10gb", migCount: 2}}}, "product")
	ctl := c.startController("ctl", writePolicy(t, idlePolicyText("always", "stop")), "-listen", "127.0.0.1:0")
	c.work("nb", "product", "interactive", 1, 1, "priority", "60", "device", "nvidia/gpu/Simulated A100 MIG 1g.10gb",
		"busy_seconds", "0", "idle_percent", "2", "gpu_memory_mib", "9000")
	c.waitRunning(60*time.Second, map[string]int{"product/nb": 1})

	var warning string
	testnomad.WaitFor(t, 30*time.Second, "a status warning on product/nb", func() (bool, string) {
		v, _, err := c.Client.Variables().Read("steward/status", &api.QueryOptions{Namespace: "steward"})
		if err != nil {
			return false, err.Error()
		}
		var st struct {
			Warnings []struct{ Job, Problem string } `json:"warnings"`
		}
		_ = json.Unmarshal([]byte(v.Items["status"]), &st)
		for _, w := range st.Warnings {
			if w.Job == "product/nb" && strings.Contains(w.Problem, "has no utilisation") {
				warning = w.Problem
				return true, ""
			}
		}
		return false, fmt.Sprint(st.Warnings)
	})
	t.Logf("status warning: %s", warning)
	if !strings.Contains(warning, "absent from its node's device stats") || !strings.Contains(warning, "idle rules do not act on allocation") {
		t.Errorf("warning %q", warning)
	}
	// Well past the rule's 6 s: not reclaimed, and refused only once.
	time.Sleep(15 * time.Second)
	if n := c.running("product", "nb"); n != 1 {
		t.Errorf("the notebook whose GPU has no utilisation was reclaimed (running %d)", n)
	}
	if n := strings.Count(ctl.Log(), "GPU refused:"); n != 1 {
		t.Errorf("the controller logged the refusal %d times, want once:\n%s", n, tail(ctl.Log(), 40))
	}
	var addr string
	testnomad.WaitFor(t, 10*time.Second, "the metrics address in the log", func() (bool, string) {
		m := listenRE.FindStringSubmatch(ctl.Log())
		if m != nil {
			addr = m[1]
		}
		return m != nil, ""
	})
	var h struct {
		Warnings []string `json:"warnings"`
	}
	body := get(t, "http://"+addr+"/healthz")
	if err := json.Unmarshal([]byte(body), &h); err != nil || len(h.Warnings) != 1 || !strings.Contains(h.Warnings[0], "product/nb: GPU MIG-") {
		t.Errorf("/healthz = %s", body)
	}
}
