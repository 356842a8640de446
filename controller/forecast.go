package controller

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpu-steward/steward/forecast"
	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// The queue and its forecast (package forecast). Every round fills the
// queue from its own plan: positions, the blocking rule and its reason are
// always the round's. The start-time forecast and the unblock hints cost
// many plans, so they are computed on a goroutine of their own, at most
// every forecastEvery (sooner, but not within forecastMinGap of the last,
// when the set of waiting jobs changed), within forecastBudget of wall
// time: rounds never wait for them, and show the latest.

const (
	forecastEvery  = time.Minute
	forecastMinGap = 5 * time.Second
	// forecastBudget bounds one forecast's wall time: replays not done by
	// then are left out (the forecast rests on fewer draws).
	forecastBudget = 10 * time.Second
	// queueRecordEvery is how often, at most, a waiting job's record is
	// rewritten for its queue figures alone: a forecast that moved by more
	// than forecastMoves, new unblock hints, or (behind the first
	// queueRecordsPerRound) a new position. Forecasts finish every few
	// seconds while the waiting set changes, and each may move every
	// waiting job's figures.
	queueRecordEvery = time.Minute
	// queueRecordGap is how often, at most, the record of a job in the
	// first queueRecordsPerRound positions is rewritten because its
	// position or the queue's length moved by more than a tenth: soon
	// enough that it says what steward queue lists within a round or two.
	queueRecordGap = 5 * time.Second
	// calibrateEvery is how often, at most, a forecast is kept to
	// calibrate later ones (forecast.Calibration): one a minute would keep
	// thousands per waiting job, each much like the last.
	calibrateEvery = 10 * time.Minute
	// queueRecordsPerRound bounds the record writes the queue's figures
	// cause in one round (the head of the queue first; the rest follow in
	// later rounds).
	queueRecordsPerRound = 32
)

// horizonText is forecast.DefaultHorizon for people.
const horizonText = "7 days"

// forecastMoves reports whether a forecast start moved enough to rewrite
// a record: by more than 5 minutes and a tenth of the time until it.
func forecastMoves(old, new, now time.Time) bool {
	if old.IsZero() != new.IsZero() {
		return true
	}
	d := new.Sub(old)
	if d < 0 {
		d = -d
	}
	return d > max(5*time.Minute, new.Sub(now)/10)
}

// forecaster works out the queue each round (each waiting job's place,
// what would unblock it) and its forecasts, in the background
// (forecastRound), learning the run times, arrivals and starts from the
// rounds. It reads the jobs' states through the store; poke asks for a
// round once a forecast is made. What it knows is fc's, made with the
// first round.
type forecaster struct {
	wiring
	store *stateStore
	poke  func()
	fc    *queueForecaster
}

// queueForecaster keeps the latest forecast, the run-time history and
// what waiting jobs' records show.
type queueForecaster struct {
	mu      sync.Mutex // guards running, result, hints, cal (the goroutine writes them)
	running bool
	result  *forecast.Result
	hints   map[engine.JobRef][]string
	basis   string // what the latest forecast's run times rest on
	// cal corrects each forecast with how past ones did; calAt is when
	// a forecast was last kept for it. In memory, like the history: a
	// restarted controller forecasts uncalibrated until starts are seen
	// again.
	cal   forecast.Calibration
	calAt time.Time

	// Owned by the control loop.
	startedAt time.Time
	waitSet   string
	history   *forecast.History
	runs      map[string]seenRun // running allocations at the last round
	// arrivals are the jobs that arrived in the last day (the forecast's
	// replays draw arrivals from them); seen the jobs observed at the last
	// round, so that a job counts once, when it first shows.
	arrivals *forecast.Arrivals
	seen     map[jobKey]bool
	shown    map[jobKey]*shownQueue
	// latest is what the round's queue says of each waiting job, shown
	// or not (queueadopt.go).
	latest map[jobKey]*shownQueue
}

type seenRun struct {
	job     jobKey
	group   string
	class   forecast.Class
	started time.Time
}

// shownQueue is what a job's record shows of the queue, and as of when
// (at: the record's steward_position_at).
type shownQueue struct {
	position, unblock string
	// The numbers in position: the job's places and the queue's lengths.
	pos, of, tenantPos, tenantOf int
	since, p50, p90              time.Time
	known                        bool // a forecast has been made for it
	at                           time.Time
}

// movedMuch reports whether a position or a queue's length moved by more
// than a tenth (any move up to 10): a job joining the back of a long
// queue, or one starting from its head, does not rewrite every record
// behind the first few.
func movedMuch(old, new int) bool {
	d := new - old
	if d < 0 {
		d = -d
	}
	return d > 0 && 10*d > old
}

func newQueueForecaster() *queueForecaster {
	return &queueForecaster{history: forecast.NewHistory(), runs: map[string]seenRun{}, shown: map[jobKey]*shownQueue{},
		seen: map[jobKey]bool{}}
}

// forecastRound is the round's hook: learn run times from the runs that
// ended, fill the round's queue, and start a forecast when one is due.
func (qf *forecaster) forecastRound(r *round, pol *policy.Policy, eng *engine.Engine, snap *engine.Snapshot) {
	if qf.fc == nil {
		qf.fc = newQueueForecaster()
	}
	fc := qf.fc
	qf.learnRunTimes(r, pol)
	qf.learnArrivals(r, pol, snap)
	queue := forecast.Queue(pol, snap, r.plan)
	qf.learnStarts(r, queue)
	fc.mu.Lock()
	res, hints, basis, running := fc.result, fc.hints, fc.basis, fc.running
	fc.mu.Unlock()
	r.queue = make([]QueueEntry, 0, len(queue))
	for _, e := range queue {
		q := QueueEntry{Job: e.Job.String(), Namespace: e.Job.Namespace, ID: e.Job.ID, Tenant: e.Tenant, Tier: e.Tier,
			Priority: e.Priority, GPUs: e.GPUs, Position: e.Position, TenantPosition: e.TenantPosition,
			WaitingSince: e.Since, Rule: string(e.Rule), Reason: e.Reason, Unblock: hints[e.Job],
			QueueLength: e.Of, TenantQueueLength: e.TenantOf}
		if st := qf.store.states()[jobKey{e.Job.Namespace, e.Job.ID}]; st != nil && st.QueueMove != nil {
			q.Moved = st.QueueMove.Reason
		}
		if f := resultFor(res, e.Job); f != nil {
			q.ForecastP50, q.ForecastP90 = f.P50, f.P90
			q.ForecastNote = basis + " (as of " + forecast.Clock(res.At, r.now) + ")"
			if f.P50.IsZero() {
				q.ForecastNote = "no start within " + horizonText + " in most replays; " + q.ForecastNote
			}
		}
		r.queue = append(r.queue, q)
	}
	qf.stabiliseQueue(r)
	set := waitSet(queue)
	due := fc.startedAt.IsZero() || r.now.Sub(fc.startedAt) >= forecastEvery ||
		(set != fc.waitSet && r.now.Sub(fc.startedAt) >= forecastMinGap)
	if len(queue) == 0 || running || !due {
		return
	}
	fc.startedAt, fc.waitSet = r.now, set
	in, basis := qf.forecastInput(r, pol, eng, snap)
	fc.mu.Lock()
	fc.running = true
	fc.mu.Unlock()
	plan := r.plan
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), forecastBudget)
		defer cancel()
		start := time.Now()
		// What the budget affords: one plan of this snapshot, timed.
		t := time.Now()
		eng.Plan(in.Snapshot, in.Now)
		opt, hintPlans := forecastOptions(time.Since(t))
		raw := forecast.Run(ctx, in, opt)
		hints := forecast.Hints(in, queue, plan, raw, hintPlans)
		fc.mu.Lock()
		res, k := fc.cal.Correct(raw)
		if in.Now.Sub(fc.calAt) >= calibrateEvery {
			fc.cal.Record(raw)
			fc.calAt = in.Now
		}
		fc.mu.Unlock()
		basis += "; " + k.Note()
		qf.log().Debug("forecast", "waiting", len(queue), "replays", res.Replays, "shares", res.Shares, "plans", res.Plans,
			"arrivals", len(in.Arrivals), "calibration", k.String(), "took", time.Since(start))
		fc.mu.Lock()
		fc.result, fc.hints, fc.basis, fc.running = res, hints, basis, false
		fc.mu.Unlock()
		qf.poke() // show it
	}()
}

// learnStarts tells the calibration which jobs its forecasts were made
// for started (no longer waiting, running) or went (gone, or neither).
func (qf *forecaster) learnStarts(r *round, queue []forecast.Entry) {
	fc := qf.fc
	waiting := map[engine.JobRef]bool{}
	for _, e := range queue {
		waiting[e.Job] = true
	}
	running := map[engine.JobRef]bool{}
	for _, a := range r.obs.Allocs {
		if len(a.GPUIDs) > 0 {
			running[engine.JobRef{Namespace: a.Namespace, ID: a.JobID}] = true
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, ref := range fc.cal.Waiting() {
		switch {
		case waiting[ref]:
		case running[ref]:
			fc.cal.Started(ref, r.now)
		default:
			fc.cal.Forget(ref)
		}
	}
}

func resultFor(res *forecast.Result, ref engine.JobRef) *forecast.JobForecast {
	if res == nil {
		return nil
	}
	return res.Jobs[ref]
}

// forecastOptions sizes a forecast given how long one plan of the live
// cluster takes: every replay (10, of a cluster of at most
// forecast.DefaultMaxNodes nodes however large the live one: a larger one
// is replayed a share at a time), and unblock hints, which plan the whole
// cluster, with what half a second affords (at most 32, at least 1). One
// seed for every forecast: an unchanged cluster draws the same run times
// each time, so its forecast does not wander.
func forecastOptions(plan time.Duration) (forecast.Options, int) {
	hints := int(hintBudget / max(plan, time.Millisecond))
	return forecast.Options{Seed: 1}, min(max(hints, 1), forecast.DefaultHintPlans)
}

// hintBudget is the wall time unblock hints may take in one forecast.
const hintBudget = 500 * time.Millisecond

// waitSet names the waiting jobs, for telling when the queue changed.
func waitSet(q []forecast.Entry) string {
	var b strings.Builder
	for _, e := range q {
		b.WriteString(e.Job.String())
		b.WriteByte(0)
	}
	return b.String()
}

// forecastInput is what a forecast needs from the round: a copy of the
// snapshot the loop will not touch (job states change in the loop, and
// the snapshot shares their preemption times), run-time estimates, and
// the grace ends of victims being drained.
func (qf *forecaster) forecastInput(r *round, pol *policy.Policy, eng *engine.Engine, snap *engine.Snapshot) (forecast.Input, string) {
	s := *snap
	s.Allocs = slices.Clone(snap.Allocs)
	s.Waiting = slices.Clone(snap.Waiting)
	s.Earmarks = slices.Clone(snap.Earmarks)
	s.WaitingOrder = nil
	for i := range s.Allocs {
		s.Allocs[i].Job.Preemptions = slices.Clone(s.Allocs[i].Job.Preemptions)
	}
	for i := range s.Waiting {
		s.Waiting[i].Job.Preemptions = slices.Clone(s.Waiting[i].Job.Preemptions)
	}
	in := forecast.Input{Engine: eng, Snapshot: &s, Now: r.now, Estimates: map[engine.JobRef]forecast.Estimate{},
		DrainEnds: map[string]time.Time{}}
	going := qf.runsGoing(r.now)
	in.Arrivals, in.ArrivalsSince = qf.fc.arrivals.Window(r.now, qf.fc.history, going)
	counts := map[forecast.Source]int{}
	// Jobs whose run times are their class's: estimated together, so
	// that jobs of classes that rest on the same runs share their values
	// (forecast.History.EstimatesRunning).
	classOf := map[engine.JobRef]forecast.Class{}
	add := func(ref engine.JobRef, gpus int) {
		if _, ok := in.Estimates[ref]; ok {
			return
		}
		if _, ok := classOf[ref]; ok {
			return
		}
		job := r.obs.Jobs[jobKey{ref.Namespace, ref.ID}]
		if job == nil {
			return
		}
		if est, ok := ownEstimate(job); ok {
			in.Estimates[ref] = est
			counts[est.Source]++
			return
		}
		classOf[ref] = runClass(pol, job, gpus)
	}
	for _, a := range s.Allocs {
		add(a.Job.Ref, len(a.GPUIDs))
	}
	for _, d := range s.Waiting {
		add(d.Job.Ref, d.GPUsPerAlloc)
	}
	byClass := qf.fc.history.EstimatesRunning(slices.Collect(maps.Values(classOf)), going)
	for ref, c := range classOf {
		est := byClass[c]
		in.Estimates[ref] = est
		counts[est.Source]++
		if est.Source == forecast.FromSimilar && est.Borrowed {
			counts[borrowedRuns]++
		}
	}
	in.Done = qf.workDone(r.now, &s)
	for _, st := range qf.store.states() {
		for _, d := range st.Draining {
			if d.Finished || d.Deadline.IsZero() {
				continue
			}
			for _, id := range r.aliveOf(st.key(), d.Allocs) {
				in.DrainEnds[id] = d.Deadline
			}
		}
	}
	return in, basisNote(counts)
}

// workDone is the work each job of the snapshot has done and kept, for
// the jobs that kept some before their current run (JobState.Done): that,
// plus the current run's age unless the run is being drained (its
// preemption counted it already). Others are left out: the forecast
// takes their allocations' ages.
func (qf *forecaster) workDone(now time.Time, s *engine.Snapshot) map[engine.JobRef]time.Duration {
	done := map[engine.JobRef]time.Duration{}
	kept := func(ref engine.JobRef) *JobState {
		st := qf.store.states()[jobKey{ref.Namespace, ref.ID}]
		if st == nil || st.Done <= 0 {
			return nil
		}
		return st
	}
	for _, a := range s.Allocs {
		st := kept(a.Job.Ref)
		if st == nil {
			continue
		}
		d := st.Done
		if len(st.Draining) == 0 && !a.StartedAt.IsZero() {
			d += now.Sub(a.StartedAt)
		}
		done[a.Job.Ref] = max(done[a.Job.Ref], d)
	}
	for _, w := range s.Waiting {
		if st := kept(w.Job.Ref); st != nil {
			done[w.Job.Ref] = max(done[w.Job.Ref], st.Done)
		}
	}
	return done
}

// ranOf is how long the longest-running of the allocations ids has run:
// the work a preemption of them interrupts.
func (r *round) ranOf(ids []string) time.Duration {
	var ran time.Duration
	for _, a := range r.obs.Allocs {
		if a.StartedAt.IsZero() || !slices.ContainsFunc(ids, func(s string) bool { return sameID(s, a.ID) }) {
			continue
		}
		ran = max(ran, r.now.Sub(a.StartedAt))
	}
	return ran
}

// keepWork updates the work a job kept when a preemption interrupts a
// run of ran: added when the job was asked to checkpoint, lost when not.
// Nothing running, nothing changes.
func (s *JobState) keepWork(checkpointed bool, ran time.Duration) {
	switch {
	case ran <= 0:
	case checkpointed:
		s.Done += ran
	default:
		s.Done = 0
	}
}

// ownEstimate is how long a job runs in all by its own word: its
// steward.expected_runtime (a tenant's word about its own job, used for
// forecasts only, never for a decision), or, for a service (or system
// job) that says nothing, until it is stopped; false when it says
// nothing (what similar jobs took: runClass).
func ownEstimate(job *ObservedJob) (forecast.Estimate, bool) {
	if d, ok := forecast.ParseExpectedRuntime(job.Meta[forecast.ExpectedRuntimeMetaKey]); ok {
		return forecast.Estimate{Expected: d, Source: forecast.FromExpected}, true
	}
	if job.Type == "service" || job.Type == "system" {
		return forecast.Estimate{Forever: true, Source: "service"}, true
	}
	return forecast.Estimate{}, false
}

// runClass is the class of jobs like job, asking gpus GPUs an allocation,
// whose run times stand for its own.
func runClass(pol *policy.Policy, job *ObservedJob, gpus int) forecast.Class {
	set := pol.ResolveJob(job.Namespace, job.Meta)
	return forecast.ClassOf(set.Tenant.Name, set.Tier, gpus).WithFamily(forecast.JobFamily(job.ID))
}

// runsGoing is how long each allocation running now has run, by class:
// long runs the history of finished ones cannot show yet.
func (qf *forecaster) runsGoing(now time.Time) map[forecast.Class][]time.Duration {
	going := map[forecast.Class][]time.Duration{}
	for _, run := range qf.fc.runs {
		going[run.class] = append(going[run.class], now.Sub(run.started))
	}
	return going
}

// learnArrivals records the jobs that show for the first time, waiting or
// running, with what they ask for and their run-time class: the
// forecast's replays draw the work that arrives while a job waits from
// them (forecast.Arrivals), with their class's run times as the forecast
// reads them. Jobs there
// at the first round arrived before anyone watched, and count for
// nothing.
func (qf *forecaster) learnArrivals(r *round, pol *policy.Policy, snap *engine.Snapshot) {
	fc := qf.fc
	first := fc.arrivals == nil
	if first {
		fc.arrivals = forecast.NewArrivals(r.now)
	}
	demands := map[jobKey][]engine.Demand{}
	for _, d := range snap.Waiting {
		k := jobKey{d.Job.Ref.Namespace, d.Job.Ref.ID}
		if d.GPUsPerAlloc > 0 && d.Count > 0 && !fc.seen[k] {
			d.Job.Preemptions = nil
			demands[k] = append(demands[k], d)
		}
	}
	// A job that started at once shows running only: its allocations, by
	// group, are what it asked for.
	for _, a := range snap.Allocs {
		k := jobKey{a.Job.Ref.Namespace, a.Job.Ref.ID}
		if len(a.GPUIDs) == 0 || fc.seen[k] {
			continue
		}
		ds := demands[k]
		i := slices.IndexFunc(ds, func(d engine.Demand) bool { return d.Group == a.Group && d.GPUsPerAlloc == len(a.GPUIDs) })
		if i < 0 {
			job := a.Job
			job.Preemptions = nil
			ds = append(ds, engine.Demand{Job: job, Group: a.Group, GPUsPerAlloc: len(a.GPUIDs), Since: r.now})
			i = len(ds) - 1
		}
		ds[i].Count++
		demands[k] = ds
	}
	for k, ds := range demands {
		fc.seen[k] = true
		job := r.obs.Jobs[k]
		if first || job == nil {
			continue
		}
		slices.SortFunc(ds, func(a, b engine.Demand) int { return strings.Compare(a.Group, b.Group) })
		// Its own run time, or its class's: the history's estimate is
		// the forecast's to read (forecast.Arrivals keeps no copy per
		// arrival).
		own, _ := ownEstimate(job)
		fc.arrivals.Add(forecast.Arrival{At: r.now, Demands: ds, Estimate: own}, runClass(pol, job, ds[0].GPUsPerAlloc))
	}
	for k := range fc.seen {
		if r.obs.Jobs[k] == nil {
			delete(fc.seen, k)
		}
	}
}

// borrowedRuns counts, in basisNote's counts, the jobs of
// forecast.FromSimilar whose family has too few runs of its own: their
// run times are other families' (forecast.Estimate.Borrowed).
const borrowedRuns forecast.Source = "borrowed"

// basisNote says what the run times rest on: "run times:
// steward.expected_runtime of 3 jobs, 5 from similar jobs (2 on other
// families' runs: too few of their own), 1 the default".
func basisNote(counts map[forecast.Source]int) string {
	var parts []string
	if n := counts[forecast.FromExpected]; n > 0 {
		parts = append(parts, "steward.expected_runtime of "+plural(n, "job"))
	}
	if n := counts[forecast.FromSimilar]; n > 0 {
		part := strconv.Itoa(n) + " from similar jobs"
		if b := counts[borrowedRuns]; b > 0 {
			part += " (" + strconv.Itoa(b) + " on other families' runs: too few of their own)"
		}
		parts = append(parts, part)
	}
	if n := counts["service"]; n > 0 {
		parts = append(parts, plural(n, "service")+" run until stopped")
	}
	if n := counts[forecast.FromDefault]; n > 0 {
		parts = append(parts, strconv.Itoa(n)+" the default ("+shortDuration(forecast.DefaultRuntime)+", no history yet)")
	}
	if len(parts) == 0 {
		return "run times: none running"
	}
	return "run times: " + strings.Join(parts, ", ")
}

// learnRunTimes records how long each allocation that ended since the
// last round ran, by the class of its job, unless Steward stopped it
// (preempted, idle-stopped: that is no run time).
func (qf *forecaster) learnRunTimes(r *round, pol *policy.Policy) {
	fc := qf.fc
	for id, run := range fc.runs {
		if r.alive[id] {
			continue
		}
		delete(fc.runs, id)
		if st := qf.store.states()[run.job]; st != nil && (st.draining(id) != nil || st.holds(run.group)) {
			continue
		}
		if j := r.obs.Jobs[run.job]; j != nil && j.Stopped {
			// Stopped by a person (or gone): its time says little.
			continue
		}
		fc.history.Add(run.class, r.now.Sub(run.started))
	}
	for _, a := range r.obs.Allocs {
		if _, ok := fc.runs[a.ID]; ok || a.StartedAt.IsZero() || len(a.GPUIDs) == 0 {
			continue
		}
		k := jobKey{a.Namespace, a.JobID}
		job := r.obs.Jobs[k]
		if job == nil {
			continue
		}
		set := pol.ResolveJob(job.Namespace, job.Meta)
		fc.runs[a.ID] = seenRun{job: k, group: a.Group, class: forecast.ClassOf(set.Tenant.Name, set.Tier, len(a.GPUIDs)).WithFamily(forecast.JobFamily(k.ID)),
			started: a.StartedAt}
	}
}

// stabiliseQueue decides what waiting jobs' records show, so that a
// record is rewritten only when what it says moved materially, and not
// as time passes:
//   - a job's first place in the queue, and its first forecast, at once;
//   - in the first queueRecordsPerRound positions, its own position or a
//     queue's length moved by more than a tenth (movedMuch: any move of
//     positions 1 to 9), at most every queueRecordGap, so that those
//     records say what steward queue lists;
//   - anything else (a position further back, a forecast that moved by
//     more than forecastMoves, new unblock hints, another waiting-since)
//     at most every queueRecordEvery;
//   - by no more than queueRecordsPerRound jobs a round, from the head of
//     the queue.
//
// A smaller move (one job joining a queue of 20, position 15 becoming 14)
// is written within the minute, or with the job's next material change;
// the record's steward_position_at says as of when its figures are. Records are check-and-set variables: each write
// is a Raft write of the whole variable.
func (qf *forecaster) stabiliseQueue(r *round) {
	fc := qf.fc
	inQueue := map[jobKey]bool{}
	fc.latest = map[jobKey]*shownQueue{}
	writes := 0
	for i := range r.queue {
		q := &r.queue[i]
		if q.Rule == string(engine.RuleDraining) {
			// Served: it waits only for its victims' checkpoints, on GPUs
			// set aside for it, and the plans after the one that
			// preempted for it list it no more. A place in its record
			// would be written now and taken out a round later, for a
			// wait its reason already says.
			continue
		}
		k := jobKey{q.Namespace, q.ID}
		inQueue[k] = true
		now := shownQueue{
			position: strconv.Itoa(q.Position) + " of " + strconv.Itoa(q.QueueLength) + " in the cluster, " +
				strconv.Itoa(q.TenantPosition) + " of " + strconv.Itoa(q.TenantQueueLength) + " in tenant " + q.Tenant,
			pos: q.Position, of: q.QueueLength, tenantPos: q.TenantPosition, tenantOf: q.TenantQueueLength,
			unblock: strings.Join(q.Unblock, "; "), known: q.ForecastNote != "",
			p50: q.ForecastP50.Truncate(time.Minute), p90: q.ForecastP90.Truncate(time.Minute),
			since: q.WaitingSince.Truncate(time.Second), at: r.now,
		}
		fc.latest[k] = &now
		sh := fc.shown[k]
		if writes >= queueRecordsPerRound || (sh != nil && !sh.due(&now, r.now)) {
			continue
		}
		writes++
		fc.shown[k] = &now
	}
	for k := range fc.shown {
		if !inQueue[k] {
			delete(fc.shown, k)
		}
	}
}

// due reports whether a record showing sh is rewritten to show now (see
// stabiliseQueue).
func (sh *shownQueue) due(now *shownQueue, at time.Time) bool {
	if now.known && !sh.known {
		return true // its first forecast
	}
	since := at.Sub(sh.at)
	much := movedMuch(sh.pos, now.pos) || movedMuch(sh.tenantPos, now.tenantPos) || movedMuch(sh.of, now.of) || movedMuch(sh.tenantOf, now.tenantOf)
	if much && now.pos <= queueRecordsPerRound && since >= queueRecordGap {
		return true
	}
	if since < queueRecordEvery {
		return false
	}
	return sh.position != now.position || sh.unblock != now.unblock || !sh.since.Equal(now.since) || sh.known != now.known ||
		forecastMoves(sh.p50, now.p50, at) || forecastMoves(sh.p90, now.p90, at)
}

// listed reports whether the round's queue lists the job (stabiliseQueue),
// shown in its record yet or not.
func (qf *forecaster) listed(k jobKey) bool {
	return qf.fc != nil && qf.fc.latest[k] != nil
}

// forecastComing reports whether the job's record shows no forecast yet
// while one started at or after since, which includes the job if it
// waited then, is still running: its first forecast is on its way
// (recordplace.go).
func (qf *forecaster) forecastComing(k jobKey, since time.Time) bool {
	fc := qf.fc
	if fc == nil || (fc.shown[k] != nil && fc.shown[k].known) {
		return false
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.running && !fc.startedAt.Before(since)
}

// addQueueItems adds a waiting job's place in the queue and its forecast
// to its record's items, as stabiliseQueue settled them.
func (qf *forecaster) addQueueItems(k jobKey, items map[string]string) {
	if qf.fc == nil {
		return
	}
	if sh := qf.fc.shown[k]; sh != nil {
		queueItems(sh, items)
	}
}

// queueItems adds what sh shows of a waiting job's place to its record's
// items.
func queueItems(sh *shownQueue, items map[string]string) {
	items["steward_position"] = sh.position
	// The queue's figures as of then: steward queue has them live.
	items["steward_position_at"] = sh.at.UTC().Format(time.RFC3339)
	items["steward_waiting_since"] = sh.since.UTC().Format(time.RFC3339)
	if sh.unblock != "" {
		items["steward_unblock"] = sh.unblock
	}
	switch {
	case !sh.known:
		return // none made yet
	case sh.p50.IsZero():
		items["steward_forecast"] = "no forecast: it did not start within " + horizonText + " in most replays (see steward_unblock)"
		return
	}
	items["steward_forecast_p50"] = sh.p50.UTC().Format(time.RFC3339)
	line := "about " + forecast.Clock(sh.p50, sh.at) + " (P50)"
	if !sh.p90.IsZero() {
		items["steward_forecast_p90"] = sh.p90.UTC().Format(time.RFC3339)
		line += ", by " + forecast.Clock(sh.p90, sh.at) + " (P90)"
	} else {
		line += ", maybe not within " + horizonText + " (P90)"
	}
	items["steward_forecast"] = line
}
