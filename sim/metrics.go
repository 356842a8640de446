package sim

import (
	"math"
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Result is one policy's figures over one workload. docs/simulator.md
// defines each; times are in minutes or hours as the names say.
type Result struct {
	Policy string `json:"policy"`
	// Forecast is the start-time forecast's error (Config.Forecasts).
	Forecast *ForecastError `json:"forecast,omitempty"`
	// ForecastP50Coverage and ForecastP90Coverage are Forecast's
	// CoverageP50 and CoverageP90 at the top level (absent without
	// -forecast), for checks that read one key.
	ForecastP50Coverage *float64 `json:"forecast_p50_coverage,omitempty"`
	ForecastP90Coverage *float64 `json:"forecast_p90_coverage,omitempty"`
	// ForecastP50Given is Forecast's P50Given (the share of forecast jobs
	// with a P50), ForecastBeyondHorizon its StartedBeyondHorizon.
	ForecastP50Given      *float64 `json:"forecast_p50_given,omitempty"`
	ForecastBeyondHorizon *int     `json:"forecast_started_beyond_horizon,omitempty"`

	Jobs              int `json:"jobs"`
	Completed         int `json:"completed"`
	StoppedByIdleRule int `json:"stopped_by_idle_rule"`
	// NeverStarted are jobs still waiting when nothing else could happen
	// (e.g. held by a tenant limit smaller than the job).
	NeverStarted int `json:"never_started"`

	// Utilisation over the arrival window (first to last submission).
	WindowHours   float64 `json:"window_hours"`
	MakespanHours float64 `json:"makespan_hours"`
	UtilAllocated float64 `json:"util_allocated"`
	UtilBusy      float64 `json:"util_busy"`

	// Queueing delay: first start minus submission, of jobs that started.
	HighPriorityDelay Delay `json:"high_priority_delay"`
	// HighPriorityLongWaits counts high-priority jobs that waited longer
	// than LongWait for their first start, by the rule of the last hold
	// before it (engine.Rule; "queued" for work Nomad's queue held alone).
	HighPriorityLongWaits map[string]int `json:"high_priority_long_waits,omitempty"`
	// HighPriorityDelayNetOwnLimit is HighPriorityDelay less, for each
	// job, the time its own tenant's limit held it (rule limit, summed
	// over every plan of its wait; holds.go): the wait the policy did not
	// ask for.
	HighPriorityDelayNetOwnLimit Delay `json:"high_priority_delay_net_own_limit"`
	// HighPriorityLongWaitHours is, over the jobs HighPriorityLongWaits
	// counts, the hours held under each rule, summed ("queued": Nomad's
	// queue alone).
	HighPriorityLongWaitHours map[string]float64 `json:"high_priority_long_wait_hours,omitempty"`
	// HighPriorityWaitHours is the same over every high-priority job's
	// wait for its first start.
	HighPriorityWaitHours map[string]float64 `json:"high_priority_wait_hours,omitempty"`
	DelayByTier           []Delay            `json:"delay_by_tier"`
	// UnknownTierDelay: jobs whose tier the policy lacks, by that name
	// (they are in DelayByTier too, under the tier they ran as).
	UnknownTierDelay []Delay `json:"unknown_tier_delay,omitempty"`

	// LostGPUHours: work not kept by stops, and time spent loading
	// checkpoints on restart (Config.CheckpointCost).
	LostGPUHours float64 `json:"lost_gpu_hours"`
	Preemptions  int     `json:"preemptions"`
	// WastedPreemptions are preemptions made for a named beneficiary that
	// was not running one plan interval after the victim's grace ended;
	// WastedVictimBack those of them whose victim was running again by
	// then.
	WastedPreemptions int `json:"wasted_preemptions"`
	WastedVictimBack  int `json:"wasted_victim_back"`
	// Migrations are preemptions whose victims fit at once in free GPUs
	// elsewhere, and resume there (engine.Action.MoveTo).
	Migrations int `json:"migrations"`
	// CapBreaches are stops (preemptions and idle stops) of a job that had
	// already been stopped max_per_job_per_hour times in the hour before;
	// MaxPreemptionsPerJobPerHour the most stops of one job in any hour.
	CapBreaches                 int            `json:"cap_breaches"`
	MaxPreemptionsPerJobPerHour int            `json:"max_preemptions_per_job_per_hour"`
	PreemptionsByRule           map[string]int `json:"preemptions_by_rule,omitempty"`
	PreemptedJobs               int            `json:"preempted_jobs"`
	MaxPreemptionsPerJob        int            `json:"max_preemptions_per_job"`
	// MaxPreemptionsPerJobLife is the most stops of one job over its life
	// (preemptions, limit give-backs and idle stops alike, as
	// preemption.max_per_job counts them).
	MaxPreemptionsPerJobLife int     `json:"max_preemptions_per_job_life"`
	PreemptionsPerJob        []int   `json:"preemptions_per_job"` // jobs preempted 0, 1, 2, 3, 4, 5+ times
	Promotions               int     `json:"promotions"`
	IdleStops                int     `json:"idle_stops"`
	IdleReclaimedGPUHours    float64 `json:"idle_reclaimed_gpu_hours"`
	// IdleUnreclaimedGPUHours are GPU-hours held by runs in their idle
	// tail, by why they were not reclaimed: "no_rule" (no idle rule covers
	// the job, or its tier is not preemptible), "within_after" (idle for
	// less than the rule's after), "past_after" (the rule was due but did
	// not act: a pressure rule with nothing waiting that needed the GPUs,
	// the eviction cap, or a policy other than Steward's).
	IdleUnreclaimedGPUHours map[string]float64 `json:"idle_unreclaimed_gpu_hours"`

	// Reservation: time tenants under their reservation had work waiting.
	ReserveWaitHours     float64 `json:"reserve_wait_hours"`
	ReserveShortGPUHours float64 `json:"reserve_short_gpu_hours"`

	Tenants []TenantResult `json:"tenants"`
	// FairShare: how fairly the tenants shared contested GPU-hours over
	// 24-hour windows (fairshare.go).
	FairShare

	EnginePlans   int     `json:"engine_plans"`
	EngineSkipped int     `json:"engine_skipped"`
	WallSeconds   float64 `json:"wall_seconds"`

	Series []SeriesPoint `json:"series"`

	// delays holds each tier's queueing delays in minutes, sorted, for
	// the CDF charts.
	delays map[string][]float64
}

// Delay summarises queueing delays in minutes (nearest-rank percentiles).
type Delay struct {
	Tier     string  `json:"tier,omitempty"`
	Priority int     `json:"priority,omitempty"`
	Jobs     int     `json:"jobs"`
	Mean     float64 `json:"mean_min"`
	P50      float64 `json:"p50_min"`
	P95      float64 `json:"p95_min"`
	P99      float64 `json:"p99_min"`
	Max      float64 `json:"max_min"`
}

// TenantResult is one tenant's share of the GPU-hours.
type TenantResult struct {
	Tenant           string  `json:"tenant"`
	Reserve          int     `json:"reserve"`
	GPUHours         float64 `json:"gpu_hours"`
	Share            float64 `json:"share"`
	ReserveWaitHours float64 `json:"reserve_wait_hours"`
}

// SeriesPoint is utilisation averaged over one slice of time.
type SeriesPoint struct {
	Hour      float64 `json:"hour"` // start of the slice
	Allocated float64 `json:"allocated"`
	Busy      float64 `json:"busy"`
}

// metrics accumulates one run's figures as the event loop advances time.
type metrics struct {
	capacity    float64
	windowStart time.Duration // first submission
	windowEnd   time.Duration // last submission
	end         time.Duration
	jobs        int

	allocated, busy int // GPUs now

	allocSec, busySec float64 // GPU-seconds within the window

	tenantNS      map[string]int
	tenants       []*policy.Tenant
	tenantUse     []int
	tenantWaiting []int
	tenantGPUSec  []float64
	tenantResSec  []float64
	reserveShort  float64 // GPU-seconds
	fair          fairShare

	// waitSizes: [tenant] its waiting jobs by GPUs (a job is placed
	// whole: every multi-allocation job is a gang), for fairShare; jobs
	// an idle rule requeued are left out of it and counted in
	// idleWaiting (GPUs) instead: all they have left is their idle tail
	// (fairShare.wantsMore).
	waitSizes   []map[int]int
	idleWaiting []int
	// depts: the policy's departments with a limit, each its members'
	// indexes; dept: [tenant] its index into depts, -1 in none. The
	// engine holds a department's tenants to its limit together
	// (fairShare.wantsMore, entitle).
	depts []deptCap
	dept  []int

	bucket  time.Duration
	sAlloc  []float64 // GPU-seconds per bucket
	sBusy   []float64
	maxBins int

	delays                  map[string][]float64
	tierPrio                map[string]int
	high                    []float64
	holds                   holdTimes
	longWaits               map[string]int
	lostSec, reclaimSec     float64
	wastedN, wastedBack     int
	migrations              int
	idleKept                map[string]float64 // GPU-seconds, by why
	preemptions, idleStops  int
	byRule                  map[string]int
	promotions              int
	nCompleted, stoppedJobs int
}

func newMetrics(cfg Config, jobs []Job) *metrics {
	m := &metrics{
		capacity: float64(cfg.totalGPUs()),
		jobs:     len(jobs),
		tenantNS: map[string]int{},
		delays:   map[string][]float64{},
		tierPrio: map[string]int{},
		byRule:   map[string]int{},
		idleKept: map[string]float64{"no_rule": 0, "within_after": 0, "past_after": 0},
	}
	if len(jobs) > 0 {
		m.windowStart, m.windowEnd = jobs[0].Submit, jobs[len(jobs)-1].Submit
	}
	m.fair.halfLife = cfg.Policy.Preemption.FairShareHalfLife
	m.bucket = max(time.Minute, (m.windowEnd-m.windowStart)/time.Duration(cfg.SeriesPoints))
	m.maxBins = 3 * cfg.SeriesPoints
	for _, name := range cfg.Policy.TenantNames() {
		m.tenantIndex(cfg.Policy.Tenants[name].Namespace)
	}
	for i := range m.tenants {
		m.tenants[i] = cfg.Policy.TenantOf(m.tenants[i].Namespace)
	}
	for _, name := range cfg.Policy.DepartmentNames() {
		m.addDept(cfg.Policy, cfg.Policy.Departments[name])
	}
	for _, t := range cfg.Policy.Tiers {
		m.tierPrio[t.Name] = t.Priority
	}
	return m
}

func (m *metrics) tenantIndex(ns string) int {
	if i, ok := m.tenantNS[ns]; ok {
		return i
	}
	i := len(m.tenants)
	m.tenantNS[ns] = i
	m.tenants = append(m.tenants, &policy.Tenant{Name: ns, Namespace: ns, Limit: policy.Unlimited, Weight: policy.DefaultTenantWeight})
	m.tenantUse = append(m.tenantUse, 0)
	m.tenantWaiting = append(m.tenantWaiting, 0)
	m.waitSizes = append(m.waitSizes, map[int]int{})
	m.idleWaiting = append(m.idleWaiting, 0)
	m.dept = append(m.dept, -1)
	m.tenantGPUSec = append(m.tenantGPUSec, 0)
	m.tenantResSec = append(m.tenantResSec, 0)
	return i
}

// advance accumulates what held between two instants.
func (m *metrics) advance(from, to time.Duration) {
	if to <= from {
		return
	}
	dt := (to - from).Seconds()
	if lo, hi := max(from, m.windowStart), min(to, m.windowEnd); lo < hi {
		w := (hi - lo).Seconds()
		m.allocSec += float64(m.allocated) * w
		m.busySec += float64(m.busy) * w
	}
	m.fair.advance(m, from, to)
	for t, use := range m.tenantUse {
		m.tenantGPUSec[t] += float64(use) * dt
		if short := m.tenants[t].Reserve - use; short > 0 && m.tenantWaiting[t] > 0 {
			m.tenantResSec[t] += dt
			m.reserveShort += float64(min(short, m.tenantWaiting[t])) * dt
		}
	}
	// Spread over the series' buckets.
	for t := max(from, m.windowStart); t < to; {
		b := int((t - m.windowStart) / m.bucket)
		if b >= m.maxBins {
			break
		}
		for len(m.sAlloc) <= b {
			m.sAlloc = append(m.sAlloc, 0)
			m.sBusy = append(m.sBusy, 0)
		}
		next := min(to, m.windowStart+time.Duration(b+1)*m.bucket)
		w := (next - t).Seconds()
		m.sAlloc[b] += float64(m.allocated) * w
		m.sBusy[b] += float64(m.busy) * w
		t = next
	}
}

// setWaiting counts delta GPUs more (or fewer) waiting for tenant t, of a
// job an idle rule requeued (idle) or not.
func (m *metrics) setWaiting(t, delta int, idle bool) {
	m.tenantWaiting[t] += delta
	if idle {
		m.idleWaiting[t] += delta
		return
	}
	if delta > 0 {
		m.waitSizes[t][delta]++
	} else if m.waitSizes[t][-delta]--; m.waitSizes[t][-delta] <= 0 {
		delete(m.waitSizes[t], -delta)
	}
}

// smallestWaiting is the GPUs of tenant t's smallest waiting job but
// those an idle rule requeued; 0 when none waits.
func (m *metrics) smallestWaiting(t int) int {
	least := 0
	for g := range m.waitSizes[t] {
		if least == 0 || g < least {
			least = g
		}
	}
	return least
}

func (m *metrics) setBusy(delta int) { m.busy += delta }
func (m *metrics) setAllocated(t, delta int) {
	m.allocated += delta
	m.tenantUse[t] += delta
}

func (m *metrics) started(j *simJob, now time.Duration) {
	d := (now - j.spec.Submit).Minutes()
	m.delays[j.tier] = append(m.delays[j.tier], d)
	if j.high {
		m.high = append(m.high, d)
		m.holds.started(j.idx, d, now)
		if now-j.spec.Submit > LongWait {
			rule := j.holdRule
			if rule == "" {
				rule = "queued"
			}
			if m.longWaits == nil {
				m.longWaits = map[string]int{}
			}
			m.longWaits[rule]++
		}
	}
}

// LongWait is the wait for a first start past which a high-priority job
// is counted in HighPriorityLongWaits, with the rule that held it.
const LongWait = 30 * time.Minute

func (m *metrics) completed(*simJob, time.Duration)      { m.nCompleted++ }
func (m *metrics) stoppedForGood(*simJob, time.Duration) { m.stoppedJobs++ }
func (m *metrics) lost(gpus int, d time.Duration)        { m.lostSec += float64(gpus) * d.Seconds() }
func (m *metrics) reclaimed(gpus int, d time.Duration)   { m.reclaimSec += float64(gpus) * d.Seconds() }
func (m *metrics) preemption()                           { m.preemptions++ }
func (m *metrics) preemptionRule(rule string)            { m.byRule[rule]++ }
func (m *metrics) promotion()                            { m.promotions++ }
func (m *metrics) migration()                            { m.migrations++ }
func (m *metrics) wasted(victimBack bool) {
	m.wastedN++
	if victimBack {
		m.wastedBack++
	}
}
func (m *metrics) idleStop()                { m.idleStops++ }
func (m *metrics) finish(now time.Duration) { m.end = now }

func (m *metrics) result(s *simulator) *Result {
	r := &Result{
		Policy:                  string(s.kind),
		Jobs:                    m.jobs,
		Completed:               m.nCompleted,
		StoppedByIdleRule:       m.stoppedJobs,
		WindowHours:             (m.windowEnd - m.windowStart).Hours(),
		LostGPUHours:            m.lostSec / 3600,
		Preemptions:             m.preemptions,
		Promotions:              m.promotions,
		IdleStops:               m.idleStops,
		IdleReclaimedGPUHours:   m.reclaimSec / 3600,
		WastedPreemptions:       m.wastedN,
		WastedVictimBack:        m.wastedBack,
		Migrations:              m.migrations,
		IdleUnreclaimedGPUHours: map[string]float64{},
		ReserveShortGPUHours:    m.reserveShort / 3600,
		EnginePlans:             s.plans,
		EngineSkipped:           s.skipped,
		PreemptionsPerJob:       make([]int, 6),
		delays:                  m.delays,
	}
	r.FairShare = m.fair.result()
	if len(m.byRule) > 0 {
		r.PreemptionsByRule = m.byRule
	}
	if len(s.jobs) > 0 {
		r.MakespanHours = (m.end - m.windowStart).Hours()
	}
	if window := (m.windowEnd - m.windowStart).Seconds(); window > 0 {
		r.UtilAllocated = m.allocSec / (m.capacity * window)
		r.UtilBusy = m.busySec / (m.capacity * window)
	}
	for i := range s.jobs {
		j := &s.jobs[i]
		if j.state.waiting() {
			r.NeverStarted++
		}
		r.PreemptionsPerJob[min(j.preemptions, 5)]++
		if j.preemptions > 0 {
			r.PreemptedJobs++
		}
		r.MaxPreemptionsPerJob = max(r.MaxPreemptionsPerJob, j.preemptions)
		r.MaxPreemptionsPerJobLife = max(r.MaxPreemptionsPerJobLife, len(j.preemptTimes))
		most, breaches := perHour(j.preemptTimes, s.pol.Preemption.MaxPerJobPerHour)
		r.MaxPreemptionsPerJobPerHour = max(r.MaxPreemptionsPerJobPerHour, most)
		r.CapBreaches += breaches
	}
	for why, sec := range m.idleKept {
		r.IdleUnreclaimedGPUHours[why] = sec / 3600
	}
	r.HighPriorityDelay = summarise(m.high)
	r.HighPriorityLongWaits = m.longWaits
	r.HighPriorityDelayNetOwnLimit = summarise(m.holds.net)
	r.HighPriorityLongWaitHours = inHours(m.holds.longByRule)
	r.HighPriorityWaitHours = inHours(m.holds.allByRule)
	tiers := make([]string, 0, len(m.tierPrio))
	for name := range m.tierPrio {
		tiers = append(tiers, name)
	}
	slices.SortFunc(tiers, func(a, b string) int {
		if m.tierPrio[a] != m.tierPrio[b] {
			return m.tierPrio[b] - m.tierPrio[a]
		}
		return compareStrings(a, b)
	})
	for _, name := range tiers {
		slices.Sort(m.delays[name])
		d := summarise(m.delays[name])
		d.Tier, d.Priority = name, m.tierPrio[name]
		r.DelayByTier = append(r.DelayByTier, d)
	}
	var total float64
	for _, sec := range m.tenantGPUSec {
		total += sec
	}
	for t, ten := range m.tenants {
		tr := TenantResult{Tenant: ten.Name, Reserve: ten.Reserve, GPUHours: m.tenantGPUSec[t] / 3600,
			ReserveWaitHours: m.tenantResSec[t] / 3600}
		if total > 0 {
			tr.Share = m.tenantGPUSec[t] / total
		}
		r.ReserveWaitHours += tr.ReserveWaitHours
		r.Tenants = append(r.Tenants, tr)
	}
	for b := range m.sAlloc {
		w := m.bucket.Seconds()
		if end := m.windowStart + time.Duration(b+1)*m.bucket; end > m.end {
			w = (m.end - m.windowStart - time.Duration(b)*m.bucket).Seconds()
		}
		if w <= 0 {
			break
		}
		r.Series = append(r.Series, SeriesPoint{Hour: (time.Duration(b) * m.bucket).Hours(),
			Allocated: m.sAlloc[b] / (m.capacity * w), Busy: m.sBusy[b] / (m.capacity * w)})
	}
	return r
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// summarise takes delays in minutes; it sorts them in place.
func summarise(d []float64) Delay {
	out := Delay{Jobs: len(d)}
	if len(d) == 0 {
		return out
	}
	slices.Sort(d)
	var sum float64
	for _, x := range d {
		sum += x
	}
	out.Mean = sum / float64(len(d))
	out.P50, out.P95, out.P99 = percentile(d, 50), percentile(d, 95), percentile(d, 99)
	out.Max = d[len(d)-1]
	return out
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(0, min(rank, len(sorted))-1)]
}

// perHour returns the most stops in any hour (a window [t-1h, t] ending at
// a stop, as the engine counts its cap) and the stops that went over limit
// (none when limit is 0: no cap). times are in order.
func perHour(times []time.Time, limit int) (most, over int) {
	lo := 0
	for i, t := range times {
		for times[lo].Before(t.Add(-time.Hour)) {
			lo++
		}
		n := i - lo + 1
		most = max(most, n)
		if limit > 0 && n > limit {
			over++
		}
	}
	return most, over
}

// idleEnded accounts a run's idle tail of d on gpus, which nothing
// reclaimed (the run completed or was stopped by something other than its
// idle rule), by why.
func (m *metrics) idleEnded(j *simJob, d time.Duration) {
	if d <= 0 {
		return
	}
	g := float64(j.gpus())
	if j.idleRule == nil || !j.preemptible {
		m.idleKept["no_rule"] += g * d.Seconds()
		return
	}
	within := min(d, j.idleRule.After)
	m.idleKept["within_after"] += g * within.Seconds()
	m.idleKept["past_after"] += g * (d - within).Seconds()
}
