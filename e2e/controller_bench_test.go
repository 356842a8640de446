package e2e

import (
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Benchmarks of the controller on a real dev agent (make bench-e2e):
//
//	go test -run '^$' -bench Controller -benchtime 20x ./e2e/
//
// They report the latency percentiles as custom metrics.

const benchPolicy = twoTiers + `
preemption {
  min_runtime          = "0s"
  grace                = "0s"
  max_per_job_per_hour = 0
  max_per_job          = 0 # each iteration preempts the same job again
  promote {
    after_preemptions = 0
    after_wait        = "0s"
    boost             = 0
  }
}
`

var latencyRE = regexp.MustCompile(`decision_latency=([0-9.]+(?:ns|µs|us|ms|s))`)

// BenchmarkControllerDecisionLatency: a training job holds all 8 GPUs; a
// notebook of a higher tier arrives. Measured by the controller: from the
// moment Nomad blocks the notebook's evaluation to Steward's first API
// call on the victim. Each iteration then ends the notebook and waits for
// the training job to resume.
func BenchmarkControllerDecisionLatency(b *testing.B) {
	c := startCluster(b, 8, "ml")
	ctl := c.startController("ctl", writePolicy(b, benchPolicy))
	c.work("train", "ml", "training", 8, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.work("nb", "ml", "interactive", 8, 1, "priority", "60")
		c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
		if _, _, err := c.Client.Jobs().Deregister("nb", true, &api.WriteOptions{Namespace: "ml"}); err != nil {
			b.Fatal(err)
		}
		c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	}
	b.StopTimer()
	var lat []time.Duration
	for _, m := range latencyRE.FindAllStringSubmatch(ctl.Log(), -1) {
		d, err := time.ParseDuration(m[1])
		if err == nil {
			lat = append(lat, d)
		}
	}
	if len(lat) < b.N {
		b.Fatalf("%d latencies logged for %d preemptions", len(lat), b.N)
	}
	lat = lat[len(lat)-b.N:] // the last b.N runs: testing runs b.N=1 first
	reportPercentiles(b, "decision", lat)
}

// BenchmarkControllerVsNomadPreemption: time from registering a
// high-priority job on a full cluster to its allocation running, with
// Nomad's own preemption (scheduler preemption on, priorities 20 apart)
// and with Steward (preemption off in Nomad, grace 0). For scale,
// "manual-stop" is Nomad's path without any preemption: the job waits
// (blocked), and the clock starts when a person stops the victim's job.
func BenchmarkControllerVsNomadPreemption(b *testing.B) {
	for _, mode := range []string{"nomad-builtin", "steward", "manual-stop"} {
		b.Run(mode, func(b *testing.B) {
			c := startCluster(b, 8, "ml")
			if mode == "nomad-builtin" {
				cfg := &api.SchedulerConfiguration{SchedulerAlgorithm: api.SchedulerAlgorithmBinpack,
					PreemptionConfig: api.PreemptionConfig{SystemSchedulerEnabled: true, BatchSchedulerEnabled: true,
						ServiceSchedulerEnabled: true, SysBatchSchedulerEnabled: true}}
				if _, _, err := c.Client.Operator().SchedulerSetConfiguration(cfg, nil); err != nil {
					b.Fatal(err)
				}
			}
			var ctl *controllerProc
			if mode == "steward" {
				ctl = c.startController("ctl", writePolicy(b, benchPolicy))
			}
			var took, started []time.Duration
			var traces []preemptTrace
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Each round starts afresh: the training job fills the
				// node, and has run past its deployment's health check.
				b.StopTimer()
				for _, job := range []string{"nb", "train"} {
					if _, _, err := c.Client.Jobs().Deregister(job, true, &api.WriteOptions{Namespace: "ml"}); err != nil {
						b.Fatal(err)
					}
				}
				c.waitRunning(60*time.Second, map[string]int{"ml/nb": 0, "ml/train": 0})
				c.work("train", "ml", "training", 8, 1, "priority", "40")
				c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
				if mode == "manual-stop" {
					c.work("nb", "ml", "interactive", 8, 1, "priority", "60")
					time.Sleep(200 * time.Millisecond) // blocked by now
				}
				b.StartTimer()
				start := time.Now()
				if mode == "manual-stop" {
					if _, _, err := c.Client.Jobs().Deregister("train", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
						b.Fatal(err)
					}
				} else {
					c.work("nb", "ml", "interactive", 8, 1, "priority", "60")
				}
				waitAllocRunning(b, c, "ml", "nb")
				took = append(took, time.Since(start))
				started = append(started, taskStarted(b, c, "ml", "nb").Sub(start))
				b.StopTimer()
				var log string
				if ctl != nil {
					log = ctl.Log()
				}
				traces = append(traces, tracePreemption(b, c, start, "ml", "train", "nb", log))
				b.StartTimer()
			}
			b.StopTimer()
			logTraces(b, traces)
			reportPercentiles(b, "to-running", took)
			reportPercentiles(b, "to-started", started)
		})
	}
}

// waitAllocRunning polls tightly for a running allocation of the job.
func waitAllocRunning(b *testing.B, c *cluster, ns, job string) {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if c.running(ns, job) > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("%s/%s not running within 90s", ns, job)
}

// taskStarted is when the job's task started, by the client's clock (the
// same machine's): the server learns of it in the client's next update.
func taskStarted(b *testing.B, c *cluster, ns, job string) time.Time {
	allocs, _, err := c.Client.Jobs().Allocations(job, false, &api.QueryOptions{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	var first time.Time
	for _, a := range allocs {
		for _, ts := range a.TaskStates {
			if !ts.StartedAt.IsZero() && (first.IsZero() || ts.StartedAt.Before(first)) {
				first = ts.StartedAt
			}
		}
	}
	if first.IsZero() {
		b.Fatalf("%s/%s: no task start recorded", ns, job)
	}
	return first
}

func reportPercentiles(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	pct := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, name+"-p99-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("%s: n=%d p50=%s p99=%s max=%s", name, len(ds), pct(0.5), pct(0.99), ds[len(ds)-1])
}
