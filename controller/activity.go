package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpu-steward/steward/policy"
)

// GPU activity comes from one of two sources, the operator's choice
// (Config.ActivitySource): Nomad (each covered node's host stats, sweep.go;
// the default, right for small clusters) or Prometheus (one query per
// interval for the whole cluster, activity_prometheus.go).
//
// When the Prometheus source fails (unreachable, an error, an answer cut
// for size, no series at all), idle rules pause, loudly: the covered
// allocations' samples are dropped and the plan is given none while the
// source is down, so that nothing is reclaimed on missing data (an idle
// stretch restarts when readings come back); a warning is logged,
// steward_activity_source_up is 0, /healthz says why and the status tells
// each covered job that its idle rule is paused.

// activitySource names the source in logs and warnings.
func (sp *sampler) activitySource() string {
	if sp.prom != nil {
		return ActivityPrometheus
	}
	return ActivityNomad
}

// activityState is whether the activity source answers. Sweeps run beside
// the control loop: it has a lock of its own; its zero value is "up".
type activityState struct {
	mu sync.Mutex
	// down is why the source last failed ("" while it answers), since
	// when, and when that was last logged at warn level.
	down      string
	since     time.Time
	warnedAt  time.Time
	failures  int
	pausedFor []string // the covered jobs when it failed, as ns/job
}

// activityWarnEvery repeats the warning while the source stays down.
const activityWarnEvery = 5 * time.Minute

// activityMetrics are the source's series.
type activityMetrics struct {
	up                     prometheus.Gauge
	errors, queries, bytes prometheus.Counter
	allocInfo              *prometheus.GaugeVec
	// lastQueries and lastBytes are the source's counts last added.
	lastQueries, lastBytes int64
}

func (m *metrics) newActivity() {
	a := &m.activity
	a.up = prometheus.NewGauge(prometheus.GaugeOpts{Name: "steward_activity_source_up",
		Help: "1 while the GPU activity source answers (its last read succeeded), 0 while idle rules are paused for want of readings. " +
			"Always 1 with the nomad source, whose failures are per node (steward_gpu_stats_failures_total)."})
	a.up.Set(1)
	a.errors = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_activity_source_errors_total",
		Help: "Failed reads of the GPU activity source (Prometheus: failed, cut or empty queries)."})
	a.queries = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_activity_source_queries_total",
		Help: "Queries sent to the Prometheus activity source."})
	a.bytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_activity_source_read_bytes_total",
		Help: "Bytes of the Prometheus activity source's answers, as sent (gzip)."})
	a.allocInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_gpu_allocation_info",
		Help: "1 for each GPU (by its UUID, a MIG instance's MIG UUID) an allocation holds, with the allocation's namespace, job, tenant and tier: " +
			"join GPU telemetry (DCGM's UUID label) to jobs. Set by the leader; one series per GPU held."},
		[]string{"uuid", "namespace", "job", "tenant", "tier"})
	m.register(a.up, a.errors, a.queries, a.bytes, a.allocInfo)
}

// sweepPrometheus reads the targets' GPU activity with one query and adds
// one sample per allocation whose GPUs all have a reading.
func (sp *sampler) sweepPrometheus(ctx context.Context, targets []statsTarget) {
	sp.gpuRefused.keep(targets)
	now := sp.now()
	rctx, cancel := context.WithTimeout(ctx, statsTimeout(sp.cfg().StatsInterval))
	readings, err := sp.prom.read(rctx, now)
	cancel()
	m := &sp.metrics.activity
	q, b := sp.prom.queries.Load(), sp.prom.wire.Load()
	m.queries.Add(float64(q - m.lastQueries))
	m.bytes.Add(float64(b - m.lastBytes))
	m.lastQueries, m.lastBytes = q, b
	if err != nil {
		if ctx.Err() != nil {
			return // the lead term ended: not the source's fault
		}
		sp.activityDown(err, targets, now)
		return
	}
	for _, t := range targets {
		for _, a := range t.allocs {
			for _, id := range a.GPUIDs {
				if _, ok := readings[id]; !ok {
					readings[id] = gpuReading{refused: sp.prom.missing(id)}
				}
			}
		}
	}
	sp.activityUp(now)
	for _, t := range targets {
		sp.sampleNode(t, readings, now)
	}
}

// activityDown pauses idle rules: the targets' samples go, the plan gets
// none until the source answers, and the operator is told.
func (sp *sampler) activityDown(err error, targets []statsTarget, now time.Time) {
	sp.metrics.activity.up.Set(0)
	sp.metrics.activity.errors.Inc()
	var jobs []string
	seen := map[jobKey]bool{}
	for _, t := range targets {
		for _, a := range t.allocs {
			sp.usage.forget(a.ID)
			if k := (jobKey{a.Namespace, a.JobID}); !seen[k] {
				seen[k] = true
				jobs = append(jobs, k.String())
			}
		}
	}
	sp.usage.pause(true)
	s := &sp.activity
	s.mu.Lock()
	first := s.down == ""
	if first {
		s.since = now
	}
	s.down, s.failures, s.pausedFor = err.Error(), s.failures+1, jobs
	warn := first || now.Sub(s.warnedAt) >= activityWarnEvery
	if warn {
		s.warnedAt = now
	}
	since, failures := s.since, s.failures
	s.mu.Unlock()
	if warn {
		sp.log().Warn("GPU activity source failed: idle rules are paused, nothing is reclaimed for idleness until it answers",
			"source", sp.activitySource(), "down_since", since, "failures", failures, "covered_jobs", len(jobs), "error", err)
	} else {
		sp.log().Debug("GPU activity source failed again", "source", sp.activitySource(), "error", err)
	}
	if first {
		sp.poke() // the status says so at once
	}
}

// activityUp resumes idle rules after the source answers again.
func (sp *sampler) activityUp(now time.Time) {
	sp.metrics.activity.up.Set(1)
	s := &sp.activity
	s.mu.Lock()
	was, since, failures := s.down, s.since, s.failures
	s.down, s.failures, s.pausedFor = "", 0, nil
	s.mu.Unlock()
	sp.usage.pause(false)
	if was != "" {
		sp.log().Warn("GPU activity source answers again: idle rules resume (idle stretches start afresh)",
			"source", sp.activitySource(), "was_down_for", now.Sub(since).Round(time.Second), "failures", failures)
		sp.poke()
	}
}

// activityProblem is why idle rules are paused, for tenants (no address, no
// error text: those are the operator's, in /healthz and the log); "" while
// the source answers.
func (sp *sampler) activityProblem() (problem string, jobs []string) {
	s := &sp.activity
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down == "" {
		return "", nil
	}
	return fmt.Sprintf("idle rules are paused: GPU activity could not be read from %s since %s, so nothing is reclaimed for idleness until it can (the idle time starts afresh then)",
		sp.activitySource(), s.since.UTC().Format(time.RFC3339)), s.pausedFor
}

// activityJobWarnings tells each job the failed source paused an idle rule
// for, in the status (and its namespace's view).
func (sp *sampler) activityJobWarnings() []JobWarning {
	problem, jobs := sp.activityProblem()
	out := make([]JobWarning, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, JobWarning{Job: j, Problem: problem})
	}
	return out
}

// activityHealthWarning is the operator's warning in /healthz.
func (sp *sampler) activityHealthWarning() []string {
	s := &sp.activity
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down == "" {
		return nil
	}
	return []string{fmt.Sprintf("GPU activity source %s has failed since %s (%d reads): idle rules are paused for %d jobs, nothing is reclaimed for idleness: %s",
		sp.activitySource(), s.since.UTC().Format(time.RFC3339), s.failures, len(s.pausedFor), s.down)}
}

// observeAllocGPUs sets steward_gpu_allocation_info: one series per GPU an
// allocation of the round holds (pending or running), so that dashboards
// can join GPU telemetry by UUID to jobs, tenants and tiers. It is rebuilt
// every round: the series of ended allocations go with them, and there are
// never more than the cluster's GPUs.
func (m *metrics) observeAllocGPUs(r *round, pol *policy.Policy) {
	v := m.activity.allocInfo
	v.Reset()
	for _, a := range r.obs.Allocs {
		if len(a.GPUIDs) == 0 || a.DesiredStatus != "run" || (a.ClientStatus != "running" && a.ClientStatus != "pending") {
			continue
		}
		var meta map[string]string
		if job := r.obs.Jobs[jobKey{a.Namespace, a.JobID}]; job != nil {
			meta = job.Meta
		}
		set := pol.ResolveJob(a.Namespace, meta)
		for _, id := range a.GPUIDs {
			v.WithLabelValues(id, a.Namespace, a.JobID, set.Tenant.Name, set.Tier).Set(1)
		}
	}
}
