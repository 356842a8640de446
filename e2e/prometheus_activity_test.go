package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestPrometheusActivitySource: GPU activity read from a real Prometheus
// server (bin/prometheus, `make prometheus`) scraping a fake DCGM exporter
// on loopback that serves the UUIDs the real agent's steward-gpu plugin
// reports, on the production-shaped cluster (ACLs, mTLS). The plugin's own
// simulated readings say the opposite of Prometheus's, so that only a
// reading from Prometheus can decide: the notebook Prometheus reads at 3%
// (its plugin says 90%) is reclaimed, with 3% in its reason; the one it
// reads at 80% (its plugin says 2%) is not. With Prometheus stopped,
// nothing is reclaimed, and the controller says so: a warning in its log,
// steward_activity_source_up 0, and the paused idle rule in the status.
func TestPrometheusActivitySource(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 4}}}, "product")
	node, _, err := c.Client.Nodes().Info(c.NodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	busy := map[string]float64{}
	for _, d := range node.NodeResources.Devices {
		for _, inst := range d.Instances {
			if d.Type == "gpu" {
				busy[inst.ID] = 0.8
			}
		}
	}
	if len(busy) != 4 {
		t.Fatalf("the node reports %d GPUs, want 4: %v", len(busy), busy)
	}
	dcgm := testnomad.StartFakeDCGM(t, node.Name, busy)
	prom := testnomad.StartPrometheus(t, dcgm.Target)
	prom.WaitSeries(t, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 4)

	ctl := c.startController("ctl", writePolicy(t, idlePolicyText("always", "stop")), "-listen", "127.0.0.1:0",
		"-activity-source", "prometheus", "-prometheus-address", prom.Address, "-activity-max-age", "10s")
	metrics := metricsAddr(t, ctl)

	// Both start busy in Prometheus. "quiet" is busy by its plugin, idle
	// by Prometheus once its GPUs are known; "loud" the other way round.
	c.work("quiet", "product", "interactive", 2, 1, "priority", "60", "busy_percent", "90")
	c.work("loud", "product", "interactive", 2, 1, "priority", "60", "busy_seconds", "0", "idle_percent", "2")
	c.waitRunning(60*time.Second, map[string]int{"product/quiet": 1, "product/loud": 1})
	quietGPUs, loudGPUs := c.allocGPUs("product", "quiet"), c.allocGPUs("product", "loud")
	for _, id := range quietGPUs {
		dcgm.Set(id, 0.03)
	}

	c.waitRunning(60*time.Second, map[string]int{"product/quiet": 0})
	rec := c.waitRecord(20*time.Second, "product", "quiet", "steward_state", "idle-stopped")
	if r := rec["steward_reason"]; !strings.Contains(r, "GPU utilisation 3% (under 10%)") {
		t.Errorf("quiet's reason %q: want Prometheus's 3%%", r)
	}
	if n := c.running("product", "loud"); n != 1 {
		t.Fatalf("loud (80%% in Prometheus, 2%% by its plugin) was reclaimed: running %d", n)
	}
	// The series are rebuilt at the end of every round: the round that
	// stopped quiet read it before the stop, so its series go with the
	// next round's (the client may report the stop first).
	var m string
	testnomad.WaitFor(t, 15*time.Second, "the reclaimed notebook's GPUs gone from steward_gpu_allocation_info", func() (bool, string) {
		m = scrape(t, metrics)
		return !strings.Contains(m, `job="quiet"`), grepLines(m, "steward_gpu_allocation_info")
	})
	for _, want := range []string{"steward_activity_source_up 1",
		fmt.Sprintf(`steward_gpu_allocation_info{job="loud",namespace="product",tenant="product",tier="interactive",uuid=%q} 1`, loudGPUs[0])} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lack %q:\n%s", want, grepLines(m, "steward_gpu_allocation_info")+grepLines(m, "steward_activity"))
		}
	}

	// Prometheus stops: loud, idle by its plugin, is left alone well past
	// the rule's 6 s, and the controller says why.
	const paused = "GPU activity source failed: idle rules are paused"
	if ctl.Contains(paused) {
		t.Fatalf("the source failed while Prometheus ran:\n%s", ctl.Log())
	}
	prom.Stop()
	testnomad.WaitFor(t, 20*time.Second, "the controller warns that idle rules are paused", func() (bool, string) {
		return ctl.Contains(paused), tail(ctl.Log(), 5)
	})
	testnomad.WaitFor(t, 20*time.Second, "the status tells loud its idle rule is paused", func() (bool, string) {
		v, _, err := c.Client.Variables().Read("steward/status", &api.QueryOptions{Namespace: "steward"})
		if err != nil || v == nil {
			return false, fmt.Sprint(err)
		}
		s := fmt.Sprint(v.Items)
		return strings.Contains(s, "product/loud") && strings.Contains(s, "idle rules are paused: GPU activity could not be read from prometheus"), s
	})
	time.Sleep(12 * time.Second)
	if n := c.running("product", "loud"); n != 1 {
		t.Fatalf("loud was reclaimed with Prometheus down: running %d", n)
	}
	m = scrape(t, metrics)
	if !strings.Contains(m, "steward_activity_source_up 0") || strings.Contains(m, "steward_activity_source_errors_total 0\n") {
		t.Errorf("with Prometheus down:\n%s", grepLines(m, "steward_activity"))
	}
}

// allocGPUs are the device IDs (GPU UUIDs) of the job's running allocation.
func (c *cluster) allocGPUs(ns, job string) []string {
	c.t.Helper()
	stubs, _, err := c.Client.Jobs().Allocations(job, false, &api.QueryOptions{Namespace: ns})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, s := range stubs {
		if s.ClientStatus != "running" {
			continue
		}
		a, _, err := c.Client.Allocations().Info(s.ID, &api.QueryOptions{Namespace: ns})
		if err != nil {
			c.t.Fatal(err)
		}
		var ids []string
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				ids = append(ids, d.DeviceIDs...)
			}
		}
		if len(ids) > 0 {
			return ids
		}
	}
	c.t.Fatalf("%s/%s has no running allocation with GPUs", ns, job)
	return nil
}
