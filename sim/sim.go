// Package sim is Steward's trace-driven simulator: it replays a GPU
// cluster's job history in virtual time, on a model of Nomad's placement,
// under three policies: FIFO without preemption, Nomad's strict priority
// preemption, and Steward, which runs the very engine the controller runs
// (policy/engine). It is a deterministic discrete-event loop: the same
// trace, seed and configuration always give the same figures.
//
// docs/simulator.md describes the model, the trace format, the derivation
// rule and every metric.
package sim

import (
	"container/heap"
	"fmt"
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// PolicyKind names one of the compared policies.
type PolicyKind string

const (
	// FIFO is Nomad with preemption off: queued work is placed by priority,
	// then submission, whenever it fits; nothing is ever preempted.
	FIFO PolicyKind = "fifo"
	// Strict is Nomad's built-in preemption: a job preempts work at least
	// StrictPriorityDelta priority points lower, lowest priority first,
	// with no reservations, minimum runtime, caps or checkpoint signal.
	Strict PolicyKind = "strict"
	// Steward runs policy/engine on every event and applies its plan.
	Steward PolicyKind = "steward"
)

// AllPolicies are the policies a simulation compares, in report order.
var AllPolicies = []PolicyKind{FIFO, Strict, Steward}

// ParsePolicyKind accepts a policy name.
func ParsePolicyKind(s string) (PolicyKind, error) {
	for _, k := range AllPolicies {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown policy %q (known: fifo, strict, steward)", s)
}

// StrictPriorityDelta is how much lower a victim's priority must be under
// Nomad's preemption.
const StrictPriorityDelta = 10

// DefaultCheckpointEvery is how often jobs save a checkpoint on their own.
const DefaultCheckpointEvery = 30 * time.Minute

// DefaultCheckpointCost is how long a job takes to write a checkpoint,
// and to load one when it restarts: large models take 30-120 s.
const DefaultCheckpointCost = 60 * time.Second

// DefaultDoneNotice is how long after a job says its checkpoint is written
// the controller stops it, at most, under the checkpoint contract for
// every driver: it reads the victims' checkpoint-written files every
// 250 ms and stops them in the round that follows (docs/reference/driver.md; 0.2-0.4
// s measured on a real cluster, 2 s the contract's bound). steward-exec's
// own event path alone took up to its gpu_sample_period (10 s by
// default): -checkpoint-done-notice 10s gives that.
const DefaultDoneNotice = 2 * time.Second

// DefaultPlanInterval is how often, at most, the simulated controller
// plans: events in between are planned for together.
const DefaultPlanInterval = 30 * time.Second

// Config is the simulated cluster and the rules that are the same for
// every policy.
type Config struct {
	Policy      *policy.Policy
	Nodes       int
	GPUsPerNode int
	// NodeGPUs, when set, is every node's GPU count (nodes of mixed
	// sizes) and overrides Nodes and GPUsPerNode.
	NodeGPUs []int
	// NodeModels, when set, is every node's GPU model (as NodeGPUs): jobs
	// that ask for a model (Job.Model) run only on its nodes, and the
	// engine sees each model as a device class. nil: no models.
	NodeModels []string
	// CheckpointEvery is how often every job checkpoints on its own, in
	// run time since it last started; a job stopped without a checkpoint
	// signal loses the work since its last one. 0: jobs never checkpoint
	// on their own and lose the whole run.
	CheckpointEvery time.Duration
	// CheckpointCost is how long a job takes to write a checkpoint when
	// signalled, and to load one each time it restarts with progress to
	// resume. A preemption whose grace is shorter than it ends without a
	// checkpoint: the job falls back to its last periodic one. The load
	// and the work done after the signal are GPU time lost. 0: free.
	CheckpointCost time.Duration
	// CheckpointDone: jobs say when the checkpoint a checkpoint signal
	// asked for is written (STEWARD_CHECKPOINT_DONE, as jobs/trainer
	// does), and the controller stops them then, DoneNotice later at most,
	// rather than at the end of the grace.
	CheckpointDone bool
	// DoneNotice is how long the controller takes, at most, to stop a job
	// that said so (0: DefaultDoneNotice).
	DoneNotice time.Duration
	// NoEarmarks stops the simulated controller from telling the engine
	// which GPUs were freed for whom (Alloc.For, Snapshot.Earmarks), as the
	// real controller does: then freed GPUs are free to all at the next
	// plan. For comparison only.
	NoEarmarks bool
	// PlanInterval is the least virtual time between two of Steward's
	// plans, as a controller that batches events: triggers that come
	// sooner are planned for together when it has passed. A new job Nomad
	// cannot place, and a victim's grace end, are planned for at once, as
	// the controller does (it reacts to Nomad's blocked evaluation, and
	// wakes at the deadline). 0: plan at every instant something happens.
	PlanInterval time.Duration
	// SeriesPoints is the resolution of the utilisation-over-time series.
	SeriesPoints int
	// Forecasts, under Steward, is about how many start-time forecasts to
	// measure over the trace (forecast.go; 0: none), and
	// ForecastExpected makes every job say its run time exactly.
	Forecasts        int
	ForecastExpected bool
	// ForecastMaxNodes replays the measured forecasts of a cluster of
	// more nodes a share at a time (forecast.Options.MaxNodes; 0: the
	// default, as the controller does).
	ForecastMaxNodes int
}

// epoch is virtual time zero, as the engine sees it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type jobState uint8

const (
	notArrived jobState = iota
	queued              // in Nomad's queue: placed as soon as it fits
	held                // held by Steward until it resumes the job
	running
	draining // preempted, in its checkpoint grace; still holds its GPUs
	done     // finished its work
	stopped  // stopped for good by an idle rule
)

func (st jobState) waiting() bool { return st == queued || st == held }

// simJob is a job's state in one simulation.
type simJob struct {
	spec     *Job
	idx      int32
	model    int32 // of its GPUs: anyModel, an index into cluster.models, or noModel
	ref      engine.JobRef
	name     string // ref as namespace/ID: the wait order's tie-break (waitorder.go)
	tier     string // the tier it runs in: its spec's, resolved in its tenant
	tierPrio int    // the tier's priority (Nomad job priority at submission)
	high     bool
	// holdRule is the rule of the last hold (engine.Rule): why it
	// waited, for Result.HighPriorityLongWaits.
	holdRule string
	// preemptible: the job's tier may lose its GPUs (Steward's policy).
	preemptible bool
	tenant      int
	idleRule    *policy.IdleRule
	priority    int // current Nomad priority (Steward may promote)
	state       jobState
	allocs      []alloc
	gen         uint32 // bumped on every start and stop
	runs        int

	startedAt time.Duration // current run
	progress  time.Duration // work saved when the current run started
	// workFrom is when the current run starts making progress: its start
	// plus the time to load its checkpoint (Config.CheckpointCost) when it
	// resumes from one.
	workFrom time.Duration
	// signalAt is when the current drain's checkpoint signal came: the
	// checkpoint holds the work done until then.
	signalAt time.Duration
	// lastStart is when the current (or last) run started; -1 before the
	// first.
	lastStart  time.Duration
	waitSince  time.Duration
	firstStart time.Duration // -1 until it first runs
	endedAt    time.Duration // when it completed
	idleFrom   time.Duration // this run's GPUs idle since; -1 while busy

	drainCheckpoint bool          // the drain ends with a checkpoint (signal and grace)
	drainFor        int32         // the job the drain frees GPUs for; -1: none
	drainEnd        time.Duration // when the drain's grace ends
	// parked: the engine resumed (or admitted) this job while victims
	// were still draining for it; it joins Nomad's queue when the last of
	// them stops, as the controller resumes it (see parkBeneficiary).
	parked bool
	// ahead: Steward resumed it onto GPUs set aside for it and asked
	// Nomad to evaluate it ahead of the rest of its queue
	// (engine.Action.Ahead), until it is placed or held again.
	ahead        bool
	preemptTimes []time.Time
	preemptions  int
	// evictDecided is when the drain in progress was decided, while its
	// eviction is pending: it counts toward the cap from then, under that
	// time, and moves to its stop's time when the grace ends (evictStopped),
	// as the controller counts it. Zero: none pending.
	evictDecided time.Time
	// Idle reclaim accounting: when an idle rule requeued the job, and how
	// much idle run time it still had then.
	idleStoppedAt time.Duration
	idleOwed      time.Duration

	pos     int // index in simulator.active or simulator.heldList
	samples [2]engine.Sample
	// demand is what of its engine.Demand never changes (demandOf): built
	// once, not from its spec (one more read of scattered memory) every
	// plan it waits.
	demand engine.Demand
}

type alloc struct {
	id     string
	node   int
	gpus   []int8
	gpuIDs []string
}

func (j *simJob) gpus() int { return j.spec.TotalGPUs() }

// simulator is one policy's run over one workload.
type simulator struct {
	// modelDevices[m] is the Demand.Devices of jobs asking for model m.
	modelDevices [][]string
	cfg          Config
	kind         PolicyKind
	pol          *policy.Policy
	eng          *engine.Engine
	// watch, when set (by tests), sees each of the engine's actions just
	// before it is applied.
	watch func(engine.Action)
	// maxGrace is the longest checkpoint grace the policy gives a victim.
	maxGrace time.Duration
	cl       *cluster
	jobs     []simJob
	byRef    map[engine.JobRef]int32

	events      eventQueue
	seq         uint64
	nextArrival int
	now         time.Duration

	queue    []int32 // Nomad's queue by (priority desc, waiting since, index)
	active   []int32 // running or draining
	heldList []int32
	scratch  []int
	room     []int    // free GPUs Nomad may place on (placeholderRoom)
	mark     []uint32 // per job, generation-stamped (strict's victim search)
	markGen  uint32
	prioRun  [policy.MaxPriority + 1]int // running jobs per priority

	// waitOrder holds the waiting jobs (queued or held) by waitSince and
	// name, under Steward only; snapPos is each job's index in the last
	// snapshot's Waiting (waitorder.go).
	waitOrder []int32
	snapPos   []int32

	// What asks for a plan at this instant: jobs that arrived, and any
	// other event (a plan after arrivals alone can often be skipped).
	arrived   []int32
	wantPlan  bool
	forcePlan bool
	// drainEnded: a victim's grace ended at this instant. The controller
	// wakes at that deadline to stop it (finishDrains) and plans in the
	// same round, whatever its batching of other events.
	drainEnded bool
	lastPlan   time.Duration
	deferred   bool // a wake-up for a deferred plan is scheduled
	// fairWake is the wake-up for the next crossing of decayed usages,
	// with fair share over time (fairwake.go).
	fairWake  fairWake
	snap      engine.Snapshot
	plans     int
	skipped   int
	maxEvents int
	handled   int

	// checks are preemptions made for a named beneficiary, to be checked
	// when it should be running (wasted preemptions); due holds those
	// due at this instant.
	checks []beneCheck
	due    []int32
	// marks are GPUs victims gave back for a beneficiary that has not
	// started yet, as the controller records them (Snapshot.Earmarks).
	marks []simMark

	m *metrics
	// fc measures forecasts (Config.Forecasts); nil: none.
	fc *forecaster
}

// Simulate runs one policy over a derived workload (Derive first).
func Simulate(jobs []Job, cfg Config, kind PolicyKind) (*Result, error) {
	start := time.Now()
	s, err := newSimulator(jobs, cfg, kind)
	if err != nil {
		return nil, err
	}
	if err := s.run(); err != nil {
		return nil, fmt.Errorf("simulate %s: %w", kind, err)
	}
	r := s.m.result(s)
	if s.fc != nil {
		r.Forecast = s.fc.result(s)
		r.ForecastP50Coverage, r.ForecastP90Coverage = &r.Forecast.CoverageP50, &r.Forecast.CoverageP90
		r.ForecastP50Given, r.ForecastBeyondHorizon = &r.Forecast.P50Given, &r.Forecast.StartedBeyondHorizon
	}
	r.UnknownTierDelay = unknownTierDelays(s)
	r.WallSeconds = time.Since(start).Seconds()
	return r, nil
}

// newSimulator sets up one policy's run over a derived workload.
func newSimulator(jobs []Job, cfg Config, kind PolicyKind) (*simulator, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("simulate %s: no policy", kind)
	}
	nodeGPUs, err := cfg.nodeGPUs()
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", kind, err)
	}
	if cfg.SeriesPoints <= 0 {
		cfg.SeriesPoints = 240
	}
	cfg.Policy = traceTenantsNamed(cfg.Policy, jobs)
	s := &simulator{
		cfg: cfg, kind: kind, pol: cfg.Policy,
		cl:        newCluster(nodeGPUs, cfg.NodeModels),
		jobs:      make([]simJob, len(jobs)),
		scratch:   make([]int, len(nodeGPUs)),
		room:      make([]int, len(nodeGPUs)),
		mark:      make([]uint32, len(jobs)),
		maxEvents: 1000*len(jobs) + 1000,
	}
	if kind == Steward {
		s.eng = engine.New(cfg.Policy)
		s.maxGrace = cfg.Policy.Preemption.Grace
		for _, p := range cfg.Policy.Pools {
			s.maxGrace = max(s.maxGrace, p.Grace)
		}
		s.byRef = make(map[engine.JobRef]int32, len(jobs))
		s.snapPos = make([]int32, len(jobs))
		s.snap.Nodes = make([]engine.Node, len(nodeGPUs))
		for n := range s.snap.Nodes {
			s.snap.Nodes[n] = engine.Node{ID: s.cl.nodeIDs[n], NodePool: "default", GPUs: nodeGPUs[n]}
			if s.cl.nodeModel != nil {
				model := s.cl.models[s.cl.nodeModel[n]]
				s.snap.Nodes[n].Device, s.snap.Nodes[n].Model = model, model
				s.snap.Nodes[n].Share = engine.ShareOf(model) // a MIG profile's slices count as their part of a GPU
			}
		}
		// One Devices slice per model, shared by the demands that ask
		// for it (the engine interns them).
		for _, m := range s.cl.models {
			s.modelDevices = append(s.modelDevices, []string{m})
		}
	}
	s.m = newMetrics(cfg, jobs)
	if kind == Steward && cfg.Forecasts > 0 {
		defer func() { s.fc = newForecaster(s) }()
	}
	lowest := lowestPriority(cfg.Policy)
	for i := range jobs {
		spec := &jobs[i]
		if i > 0 && spec.Submit < jobs[i-1].Submit {
			return nil, fmt.Errorf("simulate %s: job %s is submitted before the job listed ahead of it", kind, spec.ID)
		}
		if spec.GPUs > s.cl.maxGPUs {
			return nil, fmt.Errorf("simulate %s: job %s wants %d GPUs an allocation, more than any node has (run Derive first)",
				kind, spec.ID, spec.GPUs)
		}
		// The tier a job names is resolved in its tenant, as the
		// controller and the engine do: a tier the tenant may not use (or
		// one the policy lacks) runs as the tenant's default tier.
		tenant := cfg.Policy.TenantOf(spec.Tenant)
		tierName, _ := cfg.Policy.TenantTier(tenant, spec.Tier)
		tier := cfg.Policy.Tiers[tierName]
		j := &s.jobs[i]
		*j = simJob{
			spec: spec, idx: int32(i), ref: engine.JobRef{Namespace: spec.Tenant, ID: spec.ID},
			name: spec.Tenant + "/" + spec.ID, tier: tierName,
			tierPrio: tier.Priority, priority: tier.Priority, high: tier.Priority > lowest, preemptible: tier.Preemptible,
			tenant:     s.m.tenantIndex(spec.Tenant),
			model:      s.cl.modelOf(spec.Model),
			idleRule:   cfg.Policy.IdleRuleFor(tier.Name, tenant.Name),
			firstStart: -1, idleFrom: -1, idleStoppedAt: -1, lastStart: -1, drainFor: -1,
		}
		j.demand = engine.Demand{
			Job:   engine.Job{Ref: j.ref, Tier: spec.Tier, Gang: spec.Allocs > 1},
			Group: "main", GPUsPerAlloc: spec.GPUs, Count: spec.Allocs,
			Devices: s.devicesOf(j), Asks: spec.Model,
		}
		if s.byRef != nil {
			if _, dup := s.byRef[j.ref]; dup {
				return nil, fmt.Errorf("simulate %s: job %s appears twice in namespace %s", kind, spec.ID, spec.Tenant)
			}
			s.byRef[j.ref] = int32(i)
		}
	}
	return s, nil
}

func lowestPriority(p *policy.Policy) int {
	lowest := policy.MaxPriority
	for _, t := range p.Tiers {
		lowest = min(lowest, t.Priority)
	}
	return lowest
}

// run is the event loop: take every event at the next instant, then let
// the policy react once to all of them.
func (s *simulator) run() error {
	for {
		next, ok := s.nextTime()
		if !ok {
			break
		}
		if fairDebug != nil {
			fairDebug(s, s.now, next)
		}
		s.m.advance(s.now, next)
		s.now = next
		arrivedFrom := s.nextArrival
		for s.nextArrival < len(s.jobs) && s.jobs[s.nextArrival].spec.Submit == next {
			s.arrive(int32(s.nextArrival))
			s.nextArrival++
		}
		for len(s.events) > 0 && s.events[0].at == next {
			e := heap.Pop(&s.events).(event)
			s.handle(e)
		}
		if s.handled++; s.handled > s.maxEvents {
			return fmt.Errorf("no end after %d instants at %s of virtual time: the policies keep undoing each other", s.handled, s.now)
		}
		if err := s.settle(); err != nil {
			return err
		}
		if s.fc != nil && s.nextArrival > arrivedFrom {
			s.fc.afterSettle(s, arrivedFrom, s.nextArrival)
		}
		s.checkBeneficiaries()
	}
	s.m.finish(s.now)
	return nil
}

func (s *simulator) nextTime() (time.Duration, bool) {
	hasArrival := s.nextArrival < len(s.jobs)
	switch {
	case hasArrival && len(s.events) > 0:
		return min(s.jobs[s.nextArrival].spec.Submit, s.events[0].at), true
	case hasArrival:
		return s.jobs[s.nextArrival].spec.Submit, true
	case len(s.events) > 0:
		return s.events[0].at, true
	}
	return 0, false
}

// settle lets the policy react to what happened at this instant.
func (s *simulator) settle() error {
	switch s.kind {
	case FIFO:
		s.placeQueued()
	case Strict:
		s.settleStrict()
	case Steward:
		return s.settleSteward()
	}
	return nil
}

func (s *simulator) arrive(ji int32) {
	j := &s.jobs[ji]
	j.waitSince = s.now
	s.setState(ji, queued)
	s.enqueue(ji)
	s.arrived = append(s.arrived, ji)
	s.wakeForPromotion(j)
}

func (s *simulator) handle(e event) {
	if e.kind == evCheck {
		// A measurement, not something that happens to the cluster.
		s.due = append(s.due, e.check)
		return
	}
	j := &s.jobs[e.job]
	switch e.kind {
	case evComplete:
		if e.gen != j.gen || (j.state != running && j.state != draining) {
			return
		}
		bene := j.drainFor
		if j.state == draining {
			s.markFreed(j) // it finished during its grace: its GPUs are still freed for bene
		}
		s.stopRun(e.job, keepAll)
		s.setState(e.job, done)
		j.endedAt = s.now
		s.m.completed(j, s.now)
		s.unparkBeneficiary(bene)
	case evIdle:
		if e.gen != j.gen || (j.state != running && j.state != draining) {
			return
		}
		j.idleFrom = s.now
		s.m.setBusy(-j.gpus())
		s.wakeForIdleRule(j)
	case evGraceEnd:
		if e.gen != j.gen || j.state != draining {
			return
		}
		if s.workDone(j) >= j.spec.RunTime {
			// It finishes as its grace ends: a completion, not a stop.
			s.evictStopped(j, false)
			bene := j.drainFor
			s.drainEnded = true
			s.markFreed(j)
			s.stopRun(e.job, keepAll)
			s.setState(e.job, done)
			j.endedAt = s.now
			s.m.completed(j, s.now)
			s.unparkBeneficiary(bene)
			break
		}
		k := keepPeriodic
		if j.drainCheckpoint {
			k = keepCheckpoint
		}
		s.evictStopped(j, true)
		bene := j.drainFor
		s.drainEnded = true
		s.markFreed(j)
		s.stopRun(e.job, k)
		j.waitSince = s.now
		s.setState(e.job, held)
		s.unparkBeneficiary(bene) // the controller resumes it in this round
		s.wakeForPromotion(j)
	case evWake:
		if !s.wakeMatters(e) {
			return
		}
		if e.wake.always {
			s.forcePlan = true
		}
	}
	s.wantPlan = true
}

// wasCapped reports whether a job was at the eviction cap just before now:
// its preemptions in the hour up to now, counting one that leaves the hour
// at this instant, reach max_per_job_per_hour.
func (s *simulator) wasCapped(j *simJob) bool {
	limit := s.pol.Preemption.MaxPerJobPerHour
	if limit <= 0 {
		return false
	}
	hourAgo := epoch.Add(s.now - capWindow)
	n := 0
	for _, t := range j.preemptTimes {
		if !t.Before(hourAgo) {
			n++
		}
	}
	return n >= limit
}

// wakeMatters reports whether a wake-up can still change a plan.
func (s *simulator) wakeMatters(e event) bool {
	j := &s.jobs[e.job]
	waiting := len(s.queue)+len(s.heldList) > 0
	switch e.wake.kind {
	case wakeMinRuntime:
		// Only preemptible work can become a victim.
		return e.gen == j.gen && j.state == running && waiting && j.preemptible
	case wakeIdle:
		return e.gen == j.gen && j.state == running && (waiting || e.wake.always)
	case wakePromote:
		pr := s.pol.Preemption.Promote
		return e.gen == j.gen && j.state.waiting() && j.priority < min(j.tierPrio+pr.Boost, policy.MaxPriority)
	case wakeDeferred:
		s.deferred = false
		return true
	case wakeFair:
		s.fairWake.pending = false
		return true
	case wakeCap:
		// Only a job that was at the cap until now becomes a victim again.
		return j.state == running && waiting && s.wasCapped(j)
	}
	return true
}

// setState moves a job between states, keeping the lists and the
// per-tenant waiting counts in step. The queue is the caller's business:
// it is rebuilt in place while placing.
func (s *simulator) setState(ji int32, to jobState) {
	j := &s.jobs[ji]
	from := j.state
	if from == to {
		return
	}
	if from.waiting() && !to.waiting() {
		s.m.setWaiting(j.tenant, -j.gpus(), j.idleStoppedAt >= 0)
		if s.kind == Steward {
			s.stopWaiting(ji)
		}
	} else if !from.waiting() && to.waiting() {
		s.m.setWaiting(j.tenant, j.gpus(), j.idleStoppedAt >= 0)
		if s.kind == Steward {
			s.startWaiting(ji)
		}
	}
	onList := func(st jobState) *[]int32 {
		switch st {
		case running, draining:
			return &s.active
		case held:
			return &s.heldList
		}
		return nil
	}
	if l := onList(from); l != nil && l != onList(to) {
		last := (*l)[len(*l)-1]
		(*l)[j.pos] = last
		s.jobs[last].pos = j.pos
		*l = (*l)[:len(*l)-1]
	}
	if l := onList(to); l != nil && l != onList(from) {
		j.pos = len(*l)
		*l = append(*l, ji)
	}
	j.state = to
}

// queueLess orders Nomad's queue: priority, then time waiting, then index.
func (s *simulator) queueLess(a, b int32) bool {
	ja, jb := &s.jobs[a], &s.jobs[b]
	if ja.ahead != jb.ahead {
		return ja.ahead
	}
	if ja.priority != jb.priority {
		return ja.priority > jb.priority
	}
	if ja.waitSince != jb.waitSince {
		return ja.waitSince < jb.waitSince
	}
	return a < b
}

func (s *simulator) enqueue(ji int32) {
	i, _ := slices.BinarySearchFunc(s.queue, ji, func(x, target int32) int {
		if s.queueLess(x, target) {
			return -1
		}
		if x == target {
			return 0
		}
		return 1
	})
	s.queue = slices.Insert(s.queue, i, ji)
}

func (s *simulator) dequeue(ji int32) {
	if i := slices.Index(s.queue, ji); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
	}
}

// start runs a job on the given nodes (one allocation each).
func (s *simulator) start(ji int32, nodes []int) {
	j := &s.jobs[ji]
	j.ahead = false
	j.gen++
	j.runs++
	j.allocs = j.allocs[:0]
	for k, n := range nodes {
		gpus := s.cl.take(n, j.spec.GPUs, ji)
		ids := make([]string, len(gpus))
		for i, g := range gpus {
			ids[i] = s.cl.gpuIDs[n][g]
		}
		j.allocs = append(j.allocs, alloc{id: fmt.Sprintf("%s.%d.%d", j.spec.ID, j.runs, k), node: n, gpus: gpus, gpuIDs: ids})
	}
	s.setState(ji, running)
	s.prioRun[j.priority]++
	j.startedAt, j.lastStart, j.workFrom = s.now, s.now, s.now
	if j.progress > 0 {
		// It resumes from a checkpoint: loading it takes its time.
		j.workFrom += s.cfg.CheckpointCost
	}
	if j.firstStart < 0 {
		j.firstStart = s.now
		s.m.started(j, s.now)
	}
	if j.idleStoppedAt >= 0 {
		s.m.reclaimed(j.gpus(), min(s.now-j.idleStoppedAt, j.idleOwed))
		j.idleStoppedAt = -1
	}
	s.schedule(event{at: j.workFrom + j.spec.RunTime - j.progress, kind: evComplete, job: ji, gen: j.gen})
	j.idleFrom = -1
	switch idle := j.spec.IdleAfter; {
	case idle >= j.spec.RunTime:
	case j.progress >= idle:
		j.idleFrom = s.now
		s.wakeForIdleRule(j)
	default:
		s.schedule(event{at: j.workFrom + idle - j.progress, kind: evIdle, job: ji, gen: j.gen})
	}
	s.m.setAllocated(j.tenant, j.gpus())
	if j.idleFrom < 0 {
		s.m.setBusy(j.gpus())
	}
	if s.kind == Steward && s.pol.Preemption.MinRuntime > 0 {
		// Once past min_runtime the job may become a victim.
		s.schedule(event{at: s.now + s.pol.Preemption.MinRuntime, kind: evWake, job: ji, gen: j.gen,
			wake: eventWake{kind: wakeMinRuntime}})
	}
}

// keep says what work a stopped run keeps.
type keep uint8

const (
	keepAll        keep = iota // it finished, or went idle after its work: nothing unsaved
	keepCheckpoint             // its checkpoint at the signal: work since then is lost
	keepPeriodic               // no checkpoint: it falls back to its last periodic one
)

// workDone is the work a running job has done in all, saved or not.
func (s *simulator) workDone(j *simJob) time.Duration {
	return j.progress + max(0, s.now-j.workFrom)
}

// stopRun ends a job's current run and frees its GPUs, keeping the work
// keep says; the rest of the run, and the time it spent loading its
// checkpoint, count as lost.
func (s *simulator) stopRun(ji int32, k keep) {
	j := &s.jobs[ji]
	ran := s.now - j.startedAt
	work := max(0, s.now-j.workFrom) // progress this run
	kept := work
	switch k {
	case keepCheckpoint:
		kept = min(work, max(0, j.signalAt-j.workFrom))
	case keepPeriodic:
		if s.cfg.CheckpointEvery > 0 {
			kept = work - work%s.cfg.CheckpointEvery
		} else {
			kept = 0
		}
	}
	// ran-work is the time spent loading a checkpoint: lost, like the
	// work not kept.
	s.m.lost(j.gpus(), ran-kept)
	j.progress = min(j.progress+kept, j.spec.RunTime)
	for _, a := range j.allocs {
		s.cl.give(a.node, a.gpus)
	}
	j.allocs = j.allocs[:0]
	s.prioRun[j.priority]--
	s.m.setAllocated(j.tenant, -j.gpus())
	if j.idleFrom < 0 {
		s.m.setBusy(-j.gpus())
	} else {
		s.m.idleEnded(j, s.now-j.idleFrom)
	}
	j.idleFrom = -1
	j.gen++
}

// preempted records a preemption of a job.
func (s *simulator) preempted(j *simJob) {
	j.preemptions++
	j.preemptTimes = append(j.preemptTimes, epoch.Add(s.now))
	s.m.preemption()
}

// Wake-ups let Steward's time-based rules fire without planning on a
// clock tick: each is scheduled for the moment its rule can change a plan.

func (s *simulator) wakeForIdleRule(j *simJob) {
	if s.kind != Steward || j.idleRule == nil {
		return
	}
	s.schedule(event{at: j.idleFrom + j.idleRule.After, kind: evWake, job: j.idx, gen: j.gen,
		wake: eventWake{kind: wakeIdle, always: j.idleRule.Mode == policy.IdleModeAlways}})
}

func (s *simulator) wakeForPromotion(j *simJob) {
	if s.kind != Steward {
		return
	}
	if pr := s.pol.Preemption.Promote; pr.Boost > 0 && pr.AfterWait > 0 {
		s.schedule(event{at: j.waitSince + pr.AfterWait, kind: evWake, job: j.idx, gen: j.gen,
			wake: eventWake{kind: wakePromote}})
	}
}

// wakeForEvictionCap wakes Steward when this preemption leaves the job's
// hour: the engine counts a preemption exactly an hour old, so the first
// instant it no longer does is a second later.
func (s *simulator) wakeForEvictionCap(j *simJob) {
	if s.pol.Preemption.MaxPerJobPerHour > 0 {
		s.schedule(event{at: s.now + capWindow, kind: evWake, job: j.idx, wake: eventWake{kind: wakeCap}})
	}
}

// capWindow is how long a preemption keeps counting toward the eviction
// cap, as the simulator's clock resolves it.
const capWindow = time.Hour + time.Second

// doneNotice is the configured DoneNotice, or its default.
func (c Config) doneNotice() time.Duration {
	if c.DoneNotice > 0 {
		return c.DoneNotice
	}
	return DefaultDoneNotice
}
