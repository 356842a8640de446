package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// metrics are the controller's Prometheus series, on its own registry (no
// process-wide globals, so tests can run controllers side by side).
type metrics struct {
	reg *prometheus.Registry

	preemptions      *prometheus.CounterVec
	actions          *prometheus.CounterVec
	reloads          *prometheus.CounterVec
	heldJobs         prometheus.Gauge
	gpusInUse        *prometheus.GaugeVec
	gpusReserved     *prometheus.GaugeVec
	gpusWaiting      *prometheus.GaugeVec
	idleGPUs         prometheus.Gauge
	leader           prometheus.Gauge
	nomadErrors      prometheus.Counter
	decisionLatency  prometheus.Histogram
	reconcileSeconds prometheus.Histogram
	planSeconds      prometheus.Histogram
	metaRefused      *prometheus.CounterVec
	reads            *prometheus.CounterVec
	cacheDrift       prometheus.Counter
	settleTimeouts   prometheus.Counter
	publishDeferred  prometheus.Counter
	lastReads        readStats
	sampleAge        prometheus.Histogram
	sweepSeconds     prometheus.Histogram
	statsFailures    prometheus.Counter
	schemaRefusals   *prometheus.CounterVec
	// givenUp counts finished preemptions given up while their victims
	// still ran (giveup.go), by why.
	givenUp *prometheus.CounterVec
	// leaseRenew times each call renewing the leader lock or lease
	// (leader.go), answered or abandoned.
	leaseRenew prometheus.Histogram
	activity   activityMetrics

	// all are the collectors registered with register: MetricNames lists
	// their names (register every collector so).
	all []prometheus.Collector
	decisionSeries
}

// register registers collectors and keeps them for MetricNames.
func (m *metrics) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.all = append(m.all, cs...)
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.preemptions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_preemptions_total",
		Help: "Allocations' jobs preempted (held) by Steward, by rule, and the victim's tier and tenant."},
		[]string{"reason", "tier", "tenant"})
	m.actions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_actions_total",
		Help: "Actions carried out, by kind and rule."}, []string{"kind", "rule"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_policy_reloads_total",
		Help: "Policy reloads (SIGHUP), by result."}, []string{"result"})
	m.heldJobs = prometheus.NewGauge(prometheus.GaugeOpts{Name: "steward_held_jobs", Help: "Jobs with allocations Steward holds."})
	m.gpusInUse = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_gpus_in_use", Help: "GPUs held per tenant."}, []string{"tenant"})
	m.gpusReserved = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_gpus_reserved", Help: "GPUs reserved per tenant."}, []string{"tenant"})
	m.gpusWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_gpus_waiting", Help: "GPUs wanted by waiting work per tenant."}, []string{"tenant"})
	m.idleGPUs = prometheus.NewGauge(prometheus.GaugeOpts{Name: "steward_idle_gpus", Help: "GPUs held by allocations under their idle threshold."})
	m.metaRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_job_meta_refused_total",
		Help: "Job meta values Steward refused (unknown or disallowed tier, bad gang value, bad checkpoint signal), once per job version."}, []string{"key"})
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "steward_leader", Help: "1 while this controller leads."})
	m.nomadErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_nomad_errors_total", Help: "Failed Nomad API calls."})
	m.decisionLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_decision_latency_seconds",
		Help:    "From the event that creates pressure (a blocked evaluation) to the first API call on a victim.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}})
	m.reconcileSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_reconcile_seconds",
		Help: "Duration of a control round (read, plan, act, record).", Buckets: prometheus.DefBuckets})
	m.planSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_plan_seconds",
		Help: "Duration of the engine's plan.", Buckets: []float64{.0001, .001, .005, .01, .05, .1, .5, 1}})
	m.sampleAge = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_gpu_sample_age_seconds",
		Help:    "Age of the newest GPU activity sample of each allocation an idle rule covers, at the start of each stats sweep.",
		Buckets: []float64{1, 2.5, 5, 10, 15, 20, 30, 60, 120, 300}})
	m.sweepSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_gpu_stats_sweep_seconds",
		Help: "Duration of a sweep of GPU activity reads.", Buckets: []float64{.01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60}})
	m.statsFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_gpu_stats_failures_total",
		Help: "Nodes whose GPU activity read failed or timed out."})
	m.reads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_nomad_reads_total",
		Help: "Cluster reads: full reads of the cluster (start, resync, no event stream), job specs and job summaries read."},
		[]string{"kind"})
	m.cacheDrift = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_cache_drift_total",
		Help: "Entities a full read corrected in the event-fed cache: changes the event stream missed."})
	m.settleTimeouts = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_cache_settle_timeouts_total",
		Help: "Rounds that read the cluster in full because the event stream had not brought back Steward's last writes within 2 s."})
	m.publishDeferred = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_publish_deferred_total",
		Help: "Rounds that left the jobs' records and the status to the next round because new work blocked while they ran (at most 2 s)."})
	m.register(m.sampleAge, m.sweepSeconds, m.statsFailures, m.reads, m.cacheDrift, m.settleTimeouts, m.publishDeferred)
	m.schemaRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_state_schema_refusals_total",
		Help: "Job states (what=state: the controller then refuses to lead) and records (what=record: left as they are) of a schema newer than this controller knows."},
		[]string{"what"})
	m.register(m.schemaRefusals)
	m.givenUp = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_preemptions_given_up_total",
		Help: "Finished preemptions given up while their victims still ran: why=stops-pending (Nomad held their stops past 10 minutes), why=victims-run (stopped again for 2 minutes, still running)."},
		[]string{"why"})
	m.register(m.givenUp)
	m.leaseRenew = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_lease_renew_seconds",
		Help:    "How long each call renewing the leader lock or lease took, answered or abandoned at the lease's deadline (a leader's lease ends one TTL after its last successful renewal was sent).",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 1.5, 2, 3, 5, 10}})
	m.register(m.leaseRenew)
	m.register(m.preemptions, m.actions, m.reloads, m.heldJobs, m.gpusInUse, m.gpusReserved, m.gpusWaiting,
		m.idleGPUs, m.leader, m.nomadErrors, m.decisionLatency, m.reconcileSeconds, m.planSeconds, m.metaRefused)
	m.newDecisions()
	m.newActivity()
	return m
}

func (m *metrics) action(a engine.Action, _ *policy.Policy) {
	m.actions.WithLabelValues(string(a.Kind), string(a.Reason.Rule)).Inc()
}

func (m *metrics) preempted(d *Drain, job *ObservedJob, pol *policy.Policy) {
	if d.Kind == DrainPause || d.Kind == DrainMaintenance || d.Unadmitted {
		return // a hold, not a preemption
	}
	set := pol.ResolveJob(job.Namespace, job.Meta)
	m.preemptions.WithLabelValues(d.Rule, set.Tier, set.Tenant.Name).Inc()
	if d.Kind == DrainIdleStop {
		m.idleGPUsReclaimed.WithLabelValues(set.Tenant.Name).Add(float64(drainGPUs(d, job)))
	}
}

func (m *metrics) observePlan(r *round, snap *engine.Snapshot, pol *policy.Policy, states map[jobKey]*JobState) {
	held := 0
	for _, st := range states {
		if len(st.Held) > 0 {
			held++
		}
	}
	m.heldJobs.Set(float64(held))
	if r.plan == nil {
		return
	}
	m.gpusInUse.Reset()
	m.gpusReserved.Reset()
	m.gpusWaiting.Reset()
	for _, t := range r.plan.Tenants {
		m.gpusInUse.WithLabelValues(t.Tenant).Set(float64(t.InUse))
		m.gpusReserved.WithLabelValues(t.Tenant).Set(float64(t.Reserve))
		m.gpusWaiting.WithLabelValues(t.Tenant).Set(float64(t.Waiting))
	}
	m.observeAllocGPUs(r, pol)
	m.observeDecisions(r, snap, pol, states)
}

// observed counts the observer's reads since the last call.
func (m *metrics) observed(s *readStats) {
	m.reads.WithLabelValues("full").Add(float64(s.fullReads - m.lastReads.fullReads))
	m.reads.WithLabelValues("job").Add(float64(s.jobReads - m.lastReads.jobReads))
	m.reads.WithLabelValues("summary").Add(float64(s.summaryReads - m.lastReads.summaryReads))
	m.cacheDrift.Add(float64(s.drift - m.lastReads.drift))
	m.lastReads = *s
}
