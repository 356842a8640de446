package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestMetricsLeaderAndFollower: against a real agent, a leader and a
// follower; an interactive job preempts a training job. The leader's
// /metrics show the preemption under its rule, tier and tenant, the
// interactive job's wait once in its tier's histogram, the tenant's GPUs
// and the tiers; the follower's show leader 0 and none of the leader's
// gauges. Every series either shows is one controller.MetricNames lists
// (the names monitoring/ is checked against).
func TestMetricsLeaderAndFollower(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	a := c.startController("a", policy, "-listen", "127.0.0.1:0")
	testnomad.WaitFor(t, 30*time.Second, "controller a leads", func() (bool, string) { return a.Contains("leading: this controller acts"), "" })
	b := c.startController("b", policy, "-listen", "127.0.0.1:0")
	testnomad.WaitFor(t, 30*time.Second, "controller b waits", func() (bool, string) { return b.Contains("waiting to lead"), "" })
	leader, follower := metricsAddr(t, a), metricsAddr(t, b)

	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})

	// The wait is observed when a round forgets it: once the resume is
	// no longer in flight (30 s after it).
	var metrics string
	testnomad.WaitFor(t, 90*time.Second, "the leader observes the interactive job's wait", func() (bool, string) {
		metrics = scrape(t, leader)
		return strings.Contains(metrics, `steward_wait_seconds_count{tier="interactive"} 1`), grepLines(metrics, "steward_wait_seconds_count")
	})
	t.Logf("the wait: %s", grepLines(metrics, "steward_wait_seconds_sum"))
	for _, want := range []string{
		`steward_preemptions_total{reason="priority",tenant="ml",tier="training"} 1`,
		`steward_gpus_in_use{tenant="ml"} 4`,
		`steward_tier_preemptible{tier="training"} 1`,
		`steward_tier_priority{tier="interactive"} 60`,
		`steward_eviction_cap_per_job_per_hour 2`,
		`steward_job_preemptions_last_hour_max{tenant="ml",tier="training"} 1`,
		`steward_rounds_total{result="ok"}`,
		"steward_leader 1",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("the leader's /metrics lack %q", want)
		}
	}
	if strings.Contains(metrics, `steward_wait_seconds_count{tier="training"}`) {
		t.Errorf("a wait of the held training job was observed: it has not run since\n%s", grepLines(metrics, "steward_wait_seconds_count"))
	}

	followers := scrape(t, follower)
	if !strings.Contains(followers, "steward_leader 0") {
		t.Errorf("the follower's /metrics lack steward_leader 0")
	}
	for _, gauge := range []string{"steward_gpus_in_use{", "steward_waiting_groups{", "steward_tier_preemptible{", "steward_rounds_total{"} {
		if strings.Contains(followers, gauge) {
			t.Errorf("the follower exports %s…: only the leader does\n%s", gauge, grepLines(followers, strings.TrimSuffix(gauge, "{")))
		}
	}

	names := controller.MetricNames()
	for _, text := range []string{metrics, followers} {
		for line := range strings.Lines(text) {
			if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
				continue
			}
			name := line[:strings.IndexAny(line, "{ ")]
			if !slices.Contains(names, name) {
				t.Errorf("/metrics shows %s, which controller.MetricNames lacks", name)
			}
		}
	}
}

// metricsAddr is the address a controller serves /metrics on, from its log.
func metricsAddr(t *testing.T, p *controllerProc) string {
	t.Helper()
	var addr string
	testnomad.WaitFor(t, 10*time.Second, "the metrics address in the log", func() (bool, string) {
		if m := listenRE.FindStringSubmatch(p.Log()); m != nil {
			addr = m[1]
		}
		return addr != "", ""
	})
	return addr
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	return string(b)
}

// grepLines are the lines of text that begin with prefix.
func grepLines(text, prefix string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}
