package controller

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// decisionSeries are the series the dashboard and the alert rules read beside
// the older per-tenant gauges: what the leader decided and what waits. Only
// the leader sets the gauges; it drops them when it steps down (stepDown),
// so that a follower never shows a stale picture next to the leader's.
// Counters stay: they count what this process did while it led.
//
// Label values come from the policy (tenants, tiers, the engine's rule
// names) or, for namespaces no tenant claims, the namespace: never job IDs.
type decisionSeries struct {
	gpusLimit        *prometheus.GaugeVec // tenant
	gpusBorrowed     *prometheus.GaugeVec // tenant
	fairUsage        *prometheus.GaugeVec // tenant
	fairShare        *prometheus.GaugeVec // tenant
	reserveShortfall *prometheus.GaugeVec // tenant
	waitingGroups    *prometheus.GaugeVec // tenant, tier, rule
	oldestWait       *prometheus.GaugeVec // tenant, tier
	tierPreemptible  *prometheus.GaugeVec // tier
	tierPriority     *prometheus.GaugeVec // tier
	evictionCap      *prometheus.GaugeVec // no labels: absent on followers
	jobStopsMax      *prometheus.GaugeVec // tenant, tier
	jobsAtCap        *prometheus.GaugeVec // tenant, tier

	waitSeconds       *prometheus.HistogramVec // tier
	idleGPUsReclaimed *prometheus.CounterVec   // tenant
	idleGPUHours      *prometheus.CounterVec   // tenant
	rounds            *prometheus.CounterVec   // result

	// accruedAt is when idle GPU-hours were last added up (zero: not
	// since this process began to lead), and idleHeld the groups held
	// after an idle release then.
	accruedAt time.Time
	idleHeld  map[heldGroup]bool

	departmentSeries
}

type heldGroup struct {
	job   jobKey
	group string
}

// Round results (steward_rounds_total's result label).
const (
	roundOK          = "ok"           // read, planned, acted
	roundCallsFailed = "calls-failed" // done, but some Nomad calls failed (retried next round)
	roundError       = "error"        // failed before planning (a read, the state): nothing decided
)

// waitBuckets span a notebook placed at once to training queued for days.
var waitBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 24 * 3600, 3 * 24 * 3600}

func (m *metrics) newDecisions() {
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
		m.register(v)
		return v
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.register(v)
		return v
	}
	d := &m.decisionSeries
	d.gpusLimit = gauge("steward_gpus_limit", "Most GPUs a tenant may hold, borrowing included (no series for a tenant without a limit).", "tenant")
	d.gpusBorrowed = gauge("steward_gpus_borrowed", "GPUs a tenant holds beyond its reserve.", "tenant")
	d.fairUsage = gauge("steward_tenant_fair_share_usage_gpu_hours",
		"A tenant's decayed use of borrowed GPUs, in GPU-hours (fair share over time: preemption.fair_share_half_life).", "tenant")
	d.fairShare = gauge("steward_tenant_fair_share",
		"A tenant's fair share (0..1) of the borrowed GPUs: its weight over the weights of the tenants that used, hold or wait for GPUs.", "tenant")
	d.reserveShortfall = gauge("steward_reserve_shortfall_gpus",
		"GPUs of its reserve a tenant lacks while its work waits: the smaller of reserve minus in use and the GPUs its waiting work wants "+
			"(work requeued after an idle release left out: it takes only free GPUs by design). 0: the reserve is met or nothing waits.", "tenant")
	d.waitingGroups = gauge("steward_waiting_groups",
		"Task groups waiting for GPUs after the round's plan (queued by Nomad or held by Steward; paused jobs left out), by the rule that holds each.", "tenant", "tier", "rule")
	d.oldestWait = gauge("steward_oldest_wait_seconds",
		"How long the longest-waiting task group of a tenant and tier has waited for GPUs, at the round's plan.", "tenant", "tier")
	d.tierPreemptible = gauge("steward_tier_preemptible", "1 for a tier whose work may be preempted, 0 for one that is never a victim (serving).", "tier")
	d.tierPriority = gauge("steward_tier_priority", "A tier's Nomad job priority.", "tier")
	d.evictionCap = gauge("steward_eviction_cap_per_job_per_hour",
		"The policy's eviction cap (preemption.max_per_job_per_hour): the most times one job is stopped in an hour; 0: no cap.")
	d.jobStopsMax = gauge("steward_job_preemptions_last_hour_max",
		"The most times any one job of a tenant and tier was stopped by Steward (preempted or idle-released) in the last hour.", "tenant", "tier")
	d.jobsAtCap = gauge("steward_jobs_at_eviction_cap",
		"Jobs stopped as many times in the last hour as the eviction cap allows: nobody may preempt them until the hour passes.", "tenant", "tier")
	d.waitSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "steward_wait_seconds",
		Help: "From when a task group began to wait for GPUs to when all of it runs, observed once per wait (waits that end " +
			"in a stop or a purge are left out), by the job's tier.", Buckets: waitBuckets}, []string{"tier"})
	m.register(d.waitSeconds)
	d.idleGPUsReclaimed = counter("steward_idle_gpus_reclaimed_total",
		"GPUs idle rules took back (requeued or stopped for good), by the idle work's tenant.", "tenant")
	d.idleGPUHours = counter("steward_idle_gpu_hours_reclaimed_total",
		"GPU-hours idle rules took back, counted as they accrue: the GPUs of work Steward holds after an idle release, "+
			"for as long as it holds them. Work stopped for good adds none: how long it would have idled on is unknown.", "tenant")
	m.newDepartments()
	d.rounds = counter("steward_rounds_total",
		"Control rounds the leader ran, by result: ok, calls-failed (some Nomad calls failed and are retried), error (nothing decided).", "result")
}

// stepDown ends this process's leadership in the metrics: it exports
// leader 0 and none of the leader's gauges.
func (m *metrics) stepDown() {
	m.leader.Set(0)
	m.heldJobs.Set(0)
	m.activity.up.Set(1) // a follower reads no GPU activity: nothing of it fails
	m.idleGPUs.Set(0)
	for _, v := range []*prometheus.GaugeVec{m.gpusInUse, m.gpusReserved, m.gpusWaiting, m.gpusLimit, m.gpusBorrowed,
		m.fairUsage, m.fairShare, m.reserveShortfall, m.waitingGroups, m.oldestWait, m.tierPreemptible, m.tierPriority, m.evictionCap, m.jobStopsMax, m.jobsAtCap,
		m.activity.allocInfo} {
		v.Reset()
	}
	for _, v := range m.departmentGauges() {
		v.Reset()
	}
	m.accruedAt, m.idleHeld = time.Time{}, nil
}

// roundEnded counts a round by its result.
func (m *metrics) roundEnded(err error, failedCalls int) {
	result := roundOK
	switch {
	case err != nil:
		result = roundError
	case failedCalls > 0:
		result = roundCallsFailed
	}
	m.rounds.WithLabelValues(result).Inc()
}

// waited observes a wait that ended with the group running.
func (m *metrics) waited(tier string, d time.Duration) {
	m.waitSeconds.WithLabelValues(tier).Observe(max(d, 0).Seconds())
}

// observeWaitEnd observes the wait of group g of job k, waiting since
// since, when the round finds it running: trackWaiting calls it once, as it
// forgets the wait. The wait ends when the group's newest allocation
// started, not at the round: trackWaiting forgets a resumed group's wait
// only once its resume is no longer in flight (resumeInFlight).
func (c *Controller) observeWaitEnd(r *round, k jobKey, g string, since time.Time) {
	if since.IsZero() || r.live[k][g] == 0 {
		return // stopped, purged or scaled to zero: it did not get to run
	}
	var end time.Time
	for i := range r.obs.Allocs {
		a := &r.obs.Allocs[i]
		if a.JobID == k.ID && a.Namespace == k.Namespace && a.Group == g && a.StartedAt.After(end) {
			end = a.StartedAt
		}
	}
	if end.Before(since) {
		return // nothing started since it began to wait (its count was lowered)
	}
	pol, _ := c.engineNow()
	var meta map[string]string
	if j := r.obs.Jobs[k]; j != nil {
		meta = j.Meta
	}
	c.metrics.waited(pol.ResolveJob(k.Namespace, meta).Tier, end.Sub(since))
}

// tenantTier labels a series of one tenant and tier.
type tenantTier struct{ tenant, tier string }

// observeDecisions sets the leader's gauges from the round's plan and
// states, and adds up idle GPU-hours since the last round.
func (m *metrics) observeDecisions(r *round, snap *engine.Snapshot, pol *policy.Policy, states map[jobKey]*JobState) {
	for _, v := range []*prometheus.GaugeVec{m.gpusLimit, m.gpusBorrowed, m.fairUsage, m.fairShare, m.reserveShortfall, m.waitingGroups, m.oldestWait,
		m.tierPreemptible, m.tierPriority, m.jobStopsMax, m.jobsAtCap} {
		v.Reset()
	}
	for name, t := range pol.Tiers {
		m.tierPreemptible.WithLabelValues(name).Set(b2f(t.Preemptible))
		m.tierPriority.WithLabelValues(name).Set(float64(t.Priority))
	}
	m.evictionCap.WithLabelValues().Set(float64(pol.Preemption.MaxPerJobPerHour))
	m.observeDepartments(r.plan)
	m.observeWaiting(r, snap, pol)
	m.observeStops(r, pol, states)
	m.accrueIdle(r, pol, states)
}

// observeWaiting sets the per-tenant limits and borrowing, and what waits
// after the plan: per tenant and tier, and against each tenant's reserve.
func (m *metrics) observeWaiting(r *round, snap *engine.Snapshot, pol *policy.Policy) {
	if r.plan == nil || snap == nil {
		return
	}
	type groupKey struct {
		job   engine.JobRef
		group string
	}
	demands := make(map[groupKey]*engine.Demand, len(snap.Waiting))
	for i := range snap.Waiting {
		d := &snap.Waiting[i]
		demands[groupKey{d.Job.Ref, d.Group}] = d
	}
	type tenantTierRule struct {
		tenantTier
		rule string
	}
	groups := map[tenantTierRule]int{}
	oldest := map[tenantTier]time.Duration{}
	reserveWants := map[string]int{} // GPUs of waiting work a reserve serves, per tenant
	for _, w := range r.plan.Waiting {
		d := demands[groupKey{w.Job, w.Group}]
		tenant := pol.TenantOf(w.Job.Namespace)
		raw, requeued, since := "", false, time.Time{}
		if d != nil {
			raw, requeued, since = d.Job.Tier, d.Requeued, d.Since
		}
		tier, _ := pol.TenantTier(tenant, raw)
		key := tenantTier{tenant.Name, tier}
		groups[tenantTierRule{key, string(w.Reason.Rule)}]++
		if !since.IsZero() {
			oldest[key] = max(oldest[key], r.now.Sub(since))
		}
		if !requeued {
			reserveWants[tenant.Name] += w.GPUs
		}
	}
	for key, n := range groups {
		m.waitingGroups.WithLabelValues(key.tenant, key.tier, key.rule).Set(float64(n))
		m.oldestWait.WithLabelValues(key.tenant, key.tier).Set(oldest[key.tenantTier].Seconds())
	}
	for _, t := range r.plan.Tenants {
		if t.Limit != policy.Unlimited {
			m.gpusLimit.WithLabelValues(t.Tenant).Set(float64(t.Limit))
		}
		m.gpusBorrowed.WithLabelValues(t.Tenant).Set(float64(t.Borrowed()))
		if t.FairShare > 0 {
			m.fairUsage.WithLabelValues(t.Tenant).Set(t.UsageGPUHours)
			m.fairShare.WithLabelValues(t.Tenant).Set(t.FairShare)
		}
		m.reserveShortfall.WithLabelValues(t.Tenant).Set(float64(min(max(t.Reserve-t.InUse, 0), reserveWants[t.Tenant])))
	}
}

// observeStops sets, per tenant and tier, the most times one job was
// stopped in the last hour (the eviction cap's window, both ends
// included, as the engine counts) and the jobs the cap now protects.
func (m *metrics) observeStops(r *round, pol *policy.Policy, states map[jobKey]*JobState) {
	limit := pol.Preemption.MaxPerJobPerHour
	hourAgo := r.now.Add(-time.Hour)
	most := map[tenantTier]int{}
	capped := map[tenantTier]int{}
	for k, st := range states {
		n := 0
		for _, at := range st.Preemptions {
			if !at.Before(hourAgo) && !at.After(r.now) {
				n++
			}
		}
		if n == 0 {
			continue
		}
		var meta map[string]string
		if j := r.obs.Jobs[k]; j != nil {
			meta = j.Meta
		}
		set := pol.ResolveJob(k.Namespace, meta)
		key := tenantTier{set.Tenant.Name, set.Tier}
		most[key] = max(most[key], n)
		if limit > 0 && n >= limit {
			capped[key]++
		}
	}
	for key, n := range most {
		m.jobStopsMax.WithLabelValues(key.tenant, key.tier).Set(float64(n))
		m.jobsAtCap.WithLabelValues(key.tenant, key.tier).Set(float64(capped[key]))
	}
}

// accrueIdle adds the GPU-hours of work held after an idle release from
// the last round to this one, for each group held so at both. (A hold's
// Since is when its group began to wait, which may be before the release,
// and its rule may change: the rounds themselves say when it was held
// for idleness.)
func (m *metrics) accrueIdle(r *round, pol *policy.Policy, states map[jobKey]*JobState) {
	from, before := m.accruedAt, m.idleHeld
	m.accruedAt, m.idleHeld = r.now, map[heldGroup]bool{}
	hours := 0.0
	if !from.IsZero() && r.now.After(from) {
		hours = r.now.Sub(from).Hours()
	}
	for k, st := range states {
		for g, h := range st.Held {
			if h.Rule != string(engine.RuleIdle) || h.Count <= 0 {
				continue
			}
			key := heldGroup{k, g}
			m.idleHeld[key] = true
			j := r.obs.Jobs[k]
			if !before[key] || j == nil || hours == 0 {
				continue
			}
			if gpus := h.Count * j.Groups[g].GPUsPerAlloc; gpus > 0 {
				m.idleGPUHours.WithLabelValues(pol.TenantOf(k.Namespace).Name).Add(float64(gpus) * hours)
			}
		}
	}
}

// drainGPUs are the GPUs a preemption or idle release stops.
func drainGPUs(d *Drain, job *ObservedJob) int {
	if d.Group != "" {
		return len(d.Allocs) * job.Groups[d.Group].GPUsPerAlloc
	}
	gpus := 0
	for _, spec := range job.Groups {
		gpus += spec.Count * spec.GPUsPerAlloc
	}
	return gpus
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// MetricNames lists, sorted, the name of every series the controller's
// /metrics can show, histograms as their _bucket, _sum and _count series:
// the names dashboards and alert rules may use (tools/monitoring checks
// them against monitoring/).
func MetricNames() []string {
	m := newMetrics()
	collectors := append(append(append([]prometheus.Collector{}, m.all...), (&Traffic{}).collectors()...), newNotifyMetrics().collectors()...)
	seen := map[string]bool{}
	for _, c := range collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name := descName(d)
			switch c.(type) {
			case prometheus.Histogram, *prometheus.HistogramVec:
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					seen[name+suffix] = true
				}
			default:
				seen[name] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// descName reads the metric name out of a Desc, which keeps it private:
// its String form begins `Desc{fqName: "name", ...`.
func descName(d *prometheus.Desc) string {
	s := strings.TrimPrefix(d.String(), "Desc{fqName: ")
	name, err := strconv.QuotedPrefix(s)
	if err != nil {
		return ""
	}
	name, _ = strconv.Unquote(name)
	return name
}
