package forecast

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// replay is one run of the snapshot forward in virtual time.
type replay struct {
	in    *Input
	opt   Options
	rng   *rand.Rand
	now   time.Time
	start time.Time
	// stepStart is the previous plan's time: what this step places
	// starts no earlier (it did not fit then).
	stepStart time.Time

	nodes  []rnode
	nodeIx map[string]int
	allocs []ralloc
	// demands is waiting work, in no particular order.
	demands []rdemand
	marks   []rmark
	jobs    map[engine.JobRef]*rjob

	plans  int
	nextID int
	// byJob indexes demands by job, and drainFor counts the allocations
	// draining for each job (both rebuilt by index, kept by apply): a
	// plan has an action for most of a long queue.
	byJob    map[engine.JobRef][]int
	drainFor map[engine.JobRef]int
	allocIx  map[string]int // allocations by ID
	// freedBy: per node, the job whose run ended there in this step.
	freedBy map[int]string

	// arr draws the work that arrives meanwhile (arrivals.go), from its
	// own stream.
	arr    arrivalGen
	arrRng *rand.Rand
	// scale is how many nodes of the live cluster each of the replay's
	// stands for (1: the whole cluster is replayed).
	scale int
	// boot is this replay's draw of each run-time history's distribution
	// (bootstrap.go).
	boot bootstrap
	// fair is the tenants' decayed usage, accounted in virtual time
	// (fairshare.go).
	fair replayUsage
	// watch, when set (by tests), sees each plan and the snapshot it was
	// made on, before its actions are applied.
	watch func(*engine.Snapshot, *engine.Plan)
}

type rnode struct {
	n    engine.Node
	free []string // free GPU IDs, the latest freed first
	// freeAt is when each of free was freed, in the same order, and
	// freedWhy what freed it ("a/train ends", "a/train is preempted for
	// b/nb"; empty: free at the start), which names the cause of a start
	// on GPUs that work ahead of it did not all take.
	freeAt   []time.Time
	freedWhy []string
}

type ralloc struct {
	a        engine.Alloc
	node     int
	end      time.Time // when its run ends (its job's draw)
	drainEnd time.Time // while draining: when its grace ends
	// drainDecided: when the replay decided its drain (zero: a drain
	// of the snapshot), the time its eviction counts under until the
	// stop (stopEviction).
	drainDecided time.Time
	// drainIdle: the drain is an idle stop, not a preemption;
	// drainGone: its work is stopped for good, not held (an idle stop
	// without requeue). A drain in the snapshot is a preemption's.
	drainIdle, drainGone bool
	gone                 bool // stopped by this plan's actions
	// placed by the replay (not running at its start): the engine let it
	// start within its tenant's limit (succession.go).
	placed bool
}

type rdemand struct {
	d      engine.Demand
	ahead  bool
	parked bool          // resumed while victims still drain for it
	run    time.Duration // what it still has to run once placed; 0: draw
	// readyAt: it arrived, or was stopped, then (in this step); zero:
	// it waited since before it.
	readyAt time.Time
	// u is the quantile of its run time, its batch's (batches.go); 0:
	// drawn at random.
	u float64
}

type rmark struct {
	engine.Earmark
	until time.Time
}

// rjob is what a replay knows of a job across its allocations and demands.
type rjob struct {
	est         Estimate
	target      bool
	started     time.Time // targets: when nothing of it waits any more
	placed      time.Time // the latest start of its allocations placed
	cause       string
	preemptedBy []string // victims preempted for it in this replay
	preemptions []time.Time
	total       int // preemptions over its life (engine.Job.PreemptionsTotal)
	prio        int
	promoted    bool
	// arrived in the replay: its run time comes from the arrivals'
	// stream, so that arrivals leave the other jobs' draws alone.
	arrived bool
}

func newReplay(in *Input, opt Options, seed uint64, scale int) *replay {
	r := &replay{in: in, opt: opt, rng: rand.New(rand.NewPCG(opt.Seed, seed)), now: in.Now, start: in.Now, stepStart: in.Now,
		nodeIx: map[string]int{}, jobs: map[engine.JobRef]*rjob{}, arrRng: arrivalRNG(opt.Seed, seed), scale: scale,
		boot: bootstrap{seed: opt.Seed, replay: seed}, fair: newReplayUsage(in)}
	s := in.Snapshot
	used := map[string]map[string]bool{}
	for _, a := range s.Allocs {
		if used[a.NodeID] == nil {
			used[a.NodeID] = map[string]bool{}
		}
		for _, g := range a.GPUIDs {
			used[a.NodeID][g] = true
		}
	}
	for i, n := range s.Nodes {
		r.nodeIx[n.ID] = i
		rn := rnode{n: n}
		// The free GPUs' IDs are not in the snapshot: name them, apart
		// from those allocations hold.
		held := len(used[n.ID])
		for k := 0; len(rn.free) < n.GPUs-held; k++ {
			id := "forecast-" + strconv.Itoa(k)
			if !used[n.ID][id] {
				rn.free = append(rn.free, id)
				rn.freeAt = append(rn.freeAt, in.Now)
				rn.freedWhy = append(rn.freedWhy, "")
			}
		}
		r.nodes = append(r.nodes, rn)
	}
	for _, a := range s.Allocs {
		n, ok := r.nodeIx[a.NodeID]
		if !ok || len(a.GPUIDs) == 0 {
			continue
		}
		j := r.job(a.Job.Ref, a.Job)
		ran := max(in.Now.Sub(a.StartedAt), in.Done[a.Job.Ref])
		ra := ralloc{a: a, node: n, end: in.Now.Add(j.remaining(r.rng, ran))}
		if a.Draining {
			ra.drainEnd = in.Now.Add(in.policyGrace())
			if t, ok := in.DrainEnds[a.ID]; ok {
				ra.drainEnd = t
			}
		}
		r.allocs = append(r.allocs, ra)
	}
	for _, d := range s.Waiting {
		if d.GPUsPerAlloc <= 0 || d.Count <= 0 {
			continue
		}
		j := r.job(d.Job.Ref, d.Job)
		j.target = true
		r.demands = append(r.demands, rdemand{d: d})
	}
	for _, m := range s.Earmarks {
		r.marks = append(r.marks, rmark{Earmark: m, until: in.Now.Add(markKeep + in.policyGrace())})
	}
	r.batchQuantiles()
	r.initArrivals()
	return r
}

// markKeep is how long GPUs given back for a beneficiary stay its own
// once its victims are gone, as the controller keeps them (about a minute
// after the last victim's grace).
const markKeep = time.Minute

func (r *replay) job(ref engine.JobRef, j engine.Job) *rjob {
	if rj := r.jobs[ref]; rj != nil {
		return rj
	}
	est, ok := r.in.Estimates[ref]
	if !ok {
		est = Estimate{Source: FromDefault}
	}
	rj := &rjob{est: r.boot.of(est), preemptions: j.Preemptions, total: j.PreemptionsTotal, prio: j.Priority, promoted: j.Promoted}
	r.jobs[ref] = rj
	return rj
}

func (j *rjob) remaining(rng *rand.Rand, ran time.Duration) time.Duration {
	if j.est.Forever {
		return forever
	}
	return j.est.remaining(rng, ran)
}

func (j *rjob) runTime(rng *rand.Rand) time.Duration {
	if j.est.Forever {
		return forever
	}
	return max(j.est.draw(rng), minRemaining)
}

// forever is the run time of work that does not end by itself (services
// that say nothing of their run time).
const forever = 100 * 365 * 24 * time.Hour

// run replays until every target started, the horizon or the plan
// budget.
func (r *replay) run() {
	horizon := r.start.Add(r.opt.Horizon)
	r.settle(true)
	for r.waitingTargets() {
		next, ok := r.nextEvent()
		if !ok || r.plans >= r.opt.MaxPlans {
			return
		}
		// Steps grow with the distance ahead: a start 10 hours away
		// needs no 30-second resolution (and the plans stay bounded).
		step := max(r.opt.MinStep, time.Duration(float64(r.now.Sub(r.start))*r.opt.stepGrowth))
		next = maxTime(next, r.now.Add(step))
		if !r.now.Before(horizon) {
			return
		}
		// The last step ends at the horizon: a step of half the time
		// ahead past it would end the replay up to a third of the
		// horizon early (after 4 or 5 days of 7), the starts between
		// then and the horizon counted as beyond it.
		if next.After(horizon) {
			next = horizon
		}
		r.stepStart, r.now = r.now, next
		r.settle(false)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// settle applies what happened up to now, then lets Nomad place, the
// engine plan, and Nomad place again, as one controller round.
func (r *replay) settle(first bool) {
	r.freedBy = map[int]string{}
	r.index()
	if !first {
		r.endRuns()
		r.arrive()
	}
	r.index()
	r.unpark()
	r.dropMarks()
	if !first {
		// Nomad placed what fits as runs ended and work arrived, between
		// two plans. Not before the first: the snapshot is the one the
		// controller's round plans on, and Nomad places the round's
		// queue after its actions (a job over its tenant's limit is held,
		// not placed and then preempted; the contract's hold cases).
		r.placeQueued()
	}
	snap := r.snapshot()
	plan := r.in.Engine.Plan(snap, r.now)
	if r.watch != nil {
		r.watch(snap, plan)
	}
	r.plans++
	r.fair.hold(plan.Tenants)
	r.index()
	for i := range plan.Actions {
		r.apply(&plan.Actions[i])
	}
	r.dropGone()
	for _, m := range plan.Earmarks {
		r.marks = append(r.marks, rmark{Earmark: m, until: r.now.Add(nomadmodel.SignalDelay + r.in.policyGrace() + markKeep)})
	}
	for _, u := range plan.Unmarked {
		for i := range r.marks {
			if m := &r.marks[i]; m.NodeID == u.NodeID && m.For == u.For {
				m.GPUs = max(0, m.GPUs-u.GPUs)
			}
		}
	}
	r.index()
	r.unpark()
	r.placeQueued()
	r.index()
	r.succeed(plan)
	r.noteStarts()
}

// index rebuilds byJob and drainFor.
func (r *replay) index() {
	r.byJob = make(map[engine.JobRef][]int, len(r.demands))
	for i := range r.demands {
		ref := r.demands[i].d.Job.Ref
		r.byJob[ref] = append(r.byJob[ref], i)
	}
	r.drainFor = map[engine.JobRef]int{}
	r.allocIx = make(map[string]int, len(r.allocs))
	for i := range r.allocs {
		r.allocIx[r.allocs[i].a.ID] = i
		if a := &r.allocs[i]; !a.drainEnd.IsZero() && a.a.For != nil {
			r.drainFor[*a.a.For]++
		}
	}
}

// endRuns ends the runs and graces due by now.
func (r *replay) endRuns() {
	var ended []endedDrain
	kept := r.allocs[:0]
	for _, a := range r.allocs {
		switch {
		case !a.drainEnd.IsZero() && !a.drainEnd.After(r.now) && a.end.After(a.drainEnd):
			// Its grace is over: stopped, held, to resume later with
			// what it still had to run (its checkpoint keeps the rest).
			ended = append(ended, endedDrain{a, true})
			r.free(a, a.drainEnd, stopCause(a.a.Job.Ref, a.a.For))
			if a.a.For != nil && r.waits(*a.a.For) {
				r.marks = append(r.marks, rmark{Earmark: engine.Earmark{NodeID: a.a.NodeID, GPUs: len(a.a.GPUIDs),
					For: *a.a.For, ForGroup: a.a.ForGroup}, until: r.now.Add(markKeep)})
			}
			if !a.drainGone {
				r.requeue(a, a.end.Sub(a.drainEnd), a.drainIdle, a.drainEnd)
			}
		case !a.end.After(r.now):
			if !a.drainDecided.IsZero() {
				ended = append(ended, endedDrain{a, false})
			}
			r.free(a, a.end, a.a.Job.Ref.String()+" ends")
			r.freedBy[a.node] = a.a.Job.Ref.String()
		default:
			kept = append(kept, a)
		}
	}
	r.allocs = kept
	r.stopEvictions(ended)
}

// free gives an allocation's GPUs back, freed at t: the free list stays
// latest first, so that placements take the GPUs free the longest (from
// its end) and start when they were free (startOf).
func (r *replay) free(a ralloc, t time.Time, by string) {
	n := &r.nodes[a.node]
	for _, id := range a.a.GPUIDs {
		k := 0
		for k < len(n.freeAt) && !n.freeAt[k].Before(t) {
			k++
		}
		n.free = slices.Insert(n.free, k, id)
		n.freeAt = slices.Insert(n.freeAt, k, t)
		n.freedWhy = slices.Insert(n.freedWhy, k, by)
	}
}

// stopCause says what freed a stopped allocation's GPUs: its job
// preempted for another, or stopped (an idle stop, a limit's give-back).
func stopCause(job engine.JobRef, forJob *engine.JobRef) string {
	if forJob != nil {
		return job.String() + " is preempted for " + forJob.String()
	}
	return job.String() + " stops"
}

// freedFor names what freed GPUs a start took, when neither a run ending
// in its step nor its own victims did: work ahead of it took GPUs a
// preemption for that work freed, and it took the rest (the ones free the
// longest first); empty when they were free from the start.
func freedFor(by []string) string {
	for i := len(by) - 1; i >= 0; i-- {
		if by[i] != "" {
			return by[i]
		}
	}
	return ""
}

// requeue holds a stopped allocation's work as a demand of its group.
func (r *replay) requeue(a ralloc, left time.Duration, idle bool, at time.Time) {
	for _, i := range r.byJob[a.a.Job.Ref] {
		d := &r.demands[i]
		if d.d.Group == a.a.Group && d.d.GPUsPerAlloc == len(a.a.GPUIDs) {
			d.d.Count++
			d.d.Held = true
			d.run = max(d.run, left)
			d.readyAt = maxTime(d.readyAt, at)
			return
		}
	}
	n := &r.nodes[a.node].n
	job := a.a.Job
	j := r.jobs[job.Ref]
	job.Priority, job.Promoted, job.Preemptions, job.PreemptionsTotal = j.prio, j.promoted, j.preemptions, j.total
	if r.byJob != nil {
		r.byJob[job.Ref] = append(r.byJob[job.Ref], len(r.demands))
	}
	r.demands = append(r.demands, rdemand{run: max(left, minRemaining), readyAt: at, d: engine.Demand{
		Job: job, Group: a.a.Group, GPUsPerAlloc: len(a.a.GPUIDs), Count: 1, Since: r.now,
		// What it asked for is not in the snapshot: the node pool and
		// GPU class it ran on.
		NodePool: n.NodePool, Devices: []string{n.Device}, Asks: n.Model,
		Held: true, Requeued: idle, Preempted: !idle,
	}})
}

func (r *replay) waits(ref engine.JobRef) bool {
	for _, i := range r.byJob[ref] {
		if r.demands[i].d.Count > 0 {
			return true
		}
	}
	return false
}

func (r *replay) waitingTargets() bool {
	for i := range r.demands {
		if d := &r.demands[i]; d.d.Count > 0 && r.jobs[d.d.Job.Ref].target {
			return true
		}
	}
	return false
}

// unpark releases resumed work once no victim drains for it any more.
func (r *replay) unpark() {
	for i := range r.demands {
		d := &r.demands[i]
		if d.parked && !r.drainingFor(d.d.Job.Ref) {
			d.parked, d.d.Held = false, false
		}
	}
}

func (r *replay) drainingFor(ref engine.JobRef) bool { return r.drainFor[ref] > 0 }

func (r *replay) dropMarks() {
	r.marks = slices.DeleteFunc(r.marks, func(m rmark) bool {
		return m.GPUs <= 0 || r.now.After(m.until) || !r.waits(m.For)
	})
}

// snapshot is the replay's cluster as the controller would read it.
func (r *replay) snapshot() *engine.Snapshot {
	s := &engine.Snapshot{Nodes: r.in.Snapshot.Nodes, Usage: r.in.Snapshot.Usage}
	if r.fair.usage != nil {
		// The tenants' decayed usage as of now (fairshare.go); the
		// engine reads it only, and the plan is made before it changes.
		s.Usage = r.fair.advance(r.now)
	}
	s.Allocs = make([]engine.Alloc, 0, len(r.allocs))
	for i := range r.allocs {
		a := r.allocs[i].a
		j := r.jobs[a.Job.Ref]
		a.Job.Priority, a.Job.Promoted, a.Job.Preemptions, a.Job.PreemptionsTotal = j.prio, j.promoted, j.preemptions, j.total
		s.Allocs = append(s.Allocs, a)
	}
	for i := range r.demands {
		if d := r.demands[i].d; d.Count > 0 {
			j := r.jobs[d.Job.Ref]
			d.Job.Priority, d.Job.Promoted, d.Job.Preemptions, d.Job.PreemptionsTotal = j.prio, j.promoted, j.preemptions, j.total
			s.Waiting = append(s.Waiting, d)
		}
	}
	for _, m := range r.marks {
		s.Earmarks = append(s.Earmarks, m.Earmark)
	}
	return s
}

// apply carries out one action as the controller would: what it does is
// the one model of Nomad's (nomadmodel.Carry), carried out on the
// replay's allocations and demands (replayNomad). An action the replay
// cannot carry out (one of a job it does not know, of a kind it does not
// know) is left out: a forecast goes on without it.
func (r *replay) apply(a *engine.Action) {
	_ = nomadmodel.Carry((*replayNomad)(r), a, r.now)
}

// replayNomad is the replay as the state Nomad is in (nomadmodel.State).
// A hold, resume or move applies to every demand of the group (of the
// job, for a whole-job action): the replay keeps a group's waiting work
// as one demand, held or not as a whole.
type replayNomad replay

func (n *replayNomad) forGroup(a *engine.Action, fn func(d *rdemand)) {
	r := (*replay)(n)
	for _, i := range r.byJob[a.Job] {
		if d := &r.demands[i]; a.Group == "" || d.d.Group == a.Group {
			fn(d)
		}
	}
}

func (n *replayNomad) SetPriority(a *engine.Action, priority int, promoted bool) error {
	if j := n.jobs[a.Job]; j != nil {
		j.prio, j.promoted = priority, promoted
	}
	return nil
}

func (n *replayNomad) Hold(a *engine.Action, _ nomadmodel.Hold) error {
	if n.jobs[a.Job] != nil {
		n.forGroup(a, func(d *rdemand) { d.d.Held = true })
	}
	return nil
}

func (n *replayNomad) Resume(a *engine.Action, rs nomadmodel.Resume) error {
	r := (*replay)(n)
	if r.jobs[a.Job] == nil {
		return nil
	}
	n.forGroup(a, func(d *rdemand) {
		d.ahead = rs.Ahead
		// Resumed while its victims still drain, it stays held, as the
		// controller leaves it (actResume): the step that stops them
		// releases it (unpark).
		d.parked = rs.Wait && r.drainingFor(a.Job)
		d.d.Held = d.parked
	})
	return nil
}

func (n *replayNomad) Move(a *engine.Action, pool string) error {
	if n.jobs[a.Job] != nil {
		n.forGroup(a, func(d *rdemand) { d.d.NodePool = pool })
	}
	return nil
}

func (n *replayNomad) Stop(a *engine.Action, st nomadmodel.Stop) error {
	r := (*replay)(n)
	j := r.jobs[a.Job]
	if j == nil {
		return nil
	}
	j.total = max(j.total, len(j.preemptions)) + 1
	j.preemptions = append(slices.Clip(j.preemptions), st.Decided)
	if st.For != nil {
		if b := r.jobs[*st.For]; b != nil {
			b.preemptedBy = append(b.preemptedBy, a.Job.String())
		}
	}
	for _, id := range a.Allocs {
		ix, ok := r.allocIx[id]
		if !ok || r.allocs[ix].gone {
			continue
		}
		ra := &r.allocs[ix]
		if st.Drain {
			// It runs on, draining, until the grace after the signal is
			// over (endRuns).
			ra.a.Draining, ra.a.For, ra.a.ForGroup = true, st.For, st.ForGroup
			ra.drainEnd = st.End
			if st.Preempted || st.Requeue {
				ra.drainDecided = st.Decided
			}
			ra.drainIdle, ra.drainGone = !st.Preempted, !st.Requeue
			if st.For != nil {
				r.drainFor[*st.For]++
			}
			continue
		}
		// Stopped now; taken out of the list after the plan's actions
		// (dropGone), so that indices hold meanwhile.
		ra.gone = true
		r.free(*ra, st.End, stopCause(ra.a.Job.Ref, st.For))
		if st.For != nil {
			r.marks = append(r.marks, rmark{Earmark: engine.Earmark{NodeID: ra.a.NodeID, GPUs: len(ra.a.GPUIDs),
				For: *st.For, ForGroup: st.ForGroup}, until: st.End.Add(markKeep)})
		}
		if st.Requeue {
			r.requeue(*ra, ra.end.Sub(st.End), !st.Preempted, st.End)
		}
	}
	return nil
}

// dropGone takes the allocations the plan stopped out of the list.
func (r *replay) dropGone() {
	r.allocs = slices.DeleteFunc(r.allocs, func(a ralloc) bool { return a.gone })
}

// placeQueued is Nomad placing its queue without preemption: work asked
// ahead first, then by priority and time waiting; each allocation on the
// fullest node that fits it (binpack), in its node pool and on GPUs its
// request accepts; a gang all or nothing.
func (r *replay) placeQueued() {
	order := make([]int, 0, len(r.demands))
	for i := range r.demands {
		if d := &r.demands[i]; d.d.Count > 0 && !d.d.Held && !d.parked {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(x, y int) int {
		a, b := &r.demands[x], &r.demands[y]
		if a.ahead != b.ahead {
			if a.ahead {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(r.jobs[b.d.Job.Ref].prio, r.jobs[a.d.Job.Ref].prio); c != 0 {
			return c
		}
		if c := a.d.Since.Compare(b.d.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.d.Job.Ref.String()+"/"+a.d.Group, b.d.Job.Ref.String()+"/"+b.d.Group)
	})
	// Room per node for work no GPUs there are set aside for; a demand
	// adds back its own marks.
	room := make([]int, len(r.nodes))
	most := 0
	for i := range r.nodes {
		room[i] = len(r.nodes[i].free)
	}
	for _, m := range r.marks {
		if n, ok := r.nodeIx[m.NodeID]; ok {
			room[n] = max(0, room[n]-m.GPUs)
		}
	}
	for _, v := range room {
		most = max(most, v)
	}
	marked := map[engine.JobRef][]int{}
	for i, m := range r.marks {
		marked[m.For] = append(marked[m.For], i)
	}
	for _, i := range order {
		d := &r.demands[i]
		own := marked[d.d.Job.Ref]
		if d.d.GPUsPerAlloc > most && own == nil {
			continue // fits nowhere (the usual case in a full cluster)
		}
		if r.place(d, room, own, most) {
			most = 0
			for _, v := range room {
				most = max(most, v)
			}
		}
	}
	r.demands = slices.DeleteFunc(r.demands, func(d rdemand) bool { return d.d.Count <= 0 })
}

// place puts as much of one demand on nodes as fits (a gang: all or
// nothing).
func (r *replay) place(d *rdemand, shared []int, marks []int, most int) bool {
	// Its own marks are room for it alone, beside the shared room: the
	// nodes they are on are tried first, and the rest only when some node
	// has shared room enough (a full scan of a large cluster per
	// beneficiary would cost more than the plan).
	extra := map[int]int{}
	var marked []int
	for _, i := range marks {
		m := &r.marks[i]
		if n, ok := r.nodeIx[m.NodeID]; ok && m.GPUs > 0 {
			if _, seen := extra[n]; !seen {
				marked = append(marked, n)
			}
			extra[n] += m.GPUs
		}
	}
	g := d.d.GPUsPerAlloc
	taken := map[int][2]int{} // node: from extra, from shared
	// Room is bounded by the node's free GPUs less what this demand took
	// there already: its marks may name more GPUs than are free yet (their
	// victims still run), and a second allocation on the node must not
	// count the free GPUs the first took (it did: slice bounds out of
	// range, which ended both controllers in the soak).
	roomOf := func(n int) int {
		t := taken[n]
		return min(shared[n]+extra[n], len(r.nodes[n].free)-t[0]-t[1])
	}
	var nodes []int
	for range d.d.Count {
		best := -1
		consider := func(n int) {
			if roomOf(n) >= g && r.fits(&d.d, &r.nodes[n].n) && (best < 0 || roomOf(n) < roomOf(best)) {
				best = n
			}
		}
		for _, n := range marked {
			consider(n)
		}
		if most >= g {
			for n := range r.nodes {
				consider(n)
			}
		}
		if best < 0 {
			break
		}
		fromExtra := min(extra[best], g)
		extra[best] -= fromExtra
		shared[best] -= g - fromExtra
		t := taken[best]
		taken[best] = [2]int{t[0] + fromExtra, t[1] + g - fromExtra}
		nodes = append(nodes, best)
	}
	if d.d.Job.Gang && len(nodes) < d.d.Count {
		for n, t := range taken {
			shared[n] += t[1] // all or nothing: give back
		}
		return false
	}
	j := r.jobs[d.d.Job.Ref]
	start := r.startOf(d, nodes)
	freed := "" // what freed the GPUs it took, for its cause
	for _, n := range nodes {
		run := r.runOf(d, j)
		rn := &r.nodes[n]
		k := len(rn.free) - d.d.GPUsPerAlloc
		ids := slices.Clone(rn.free[k:])
		if by := freedFor(rn.freedWhy[k:]); freed == "" {
			freed = by
		}
		rn.free, rn.freeAt, rn.freedWhy = rn.free[:k], rn.freeAt[:k], rn.freedWhy[:k]
		r.nextID++
		job := d.d.Job
		r.allocs = append(r.allocs, ralloc{node: n, end: start.Add(run), placed: true, a: engine.Alloc{
			ID: "forecast-alloc-" + strconv.Itoa(r.nextID), Job: job, Group: d.d.Group, NodeID: rn.n.ID,
			GPUIDs: ids, StartedAt: start,
		}})
		for _, i := range marks {
			if m := &r.marks[i]; m.NodeID == rn.n.ID {
				m.GPUs = max(0, m.GPUs-d.d.GPUsPerAlloc)
			}
		}
		if j.target && j.cause == "" {
			if by, ok := r.freedBy[n]; ok {
				j.cause = "when " + by + " ends"
			} else if len(j.preemptedBy) > 0 {
				j.cause = "when " + joinShort(j.preemptedBy) + " is preempted for it"
			}
		}
	}
	if j.target && j.cause == "" && freed != "" {
		j.cause = "when " + freed
	}
	if len(nodes) > 0 {
		j.placed = maxTime(j.placed, start)
	}
	d.d.Count -= len(nodes)
	return len(nodes) > 0
}

// runOf is how long one allocation of d placed now runs: what it still
// had to run, or a draw.
func (r *replay) runOf(d *rdemand, j *rjob) time.Duration {
	if d.run != 0 {
		return d.run
	}
	rng := r.rng
	if j.arrived {
		rng = r.arrRng
	}
	run := j.runTime(rng)
	done := r.in.Done[d.d.Job.Ref]
	switch {
	case j.est.Forever:
	case d.u > 0 && j.est.drawAt(rng, d.u) > done:
		run = max(j.est.drawAt(rng, d.u)-done, minRemaining)
	case done > 0:
		// Work done before it waited again: what is left of a
		// run time longer than that.
		run = j.est.remaining(rng, done)
	}
	return run
}

// startOf is when work placed now on nodes (one allocation each) started:
// as soon as the GPUs it takes were free, no earlier than it was ready
// and than the last plan (it did not fit then). A step leaves the GPUs
// that runs free between two plans idle until the next plan, and steps
// grow to half the time ahead: placing at the plan alone put starts days
// late, and left the cluster's throughput a few days ahead far below its
// own (most of Philly's waiting jobs got no P50). Placing between plans
// (tried) made the simulator's measurement 30 times slower; backdating
// the start costs nothing and is right to within what freed in the step.
func (r *replay) startOf(d *rdemand, nodes []int) time.Time {
	start := maxTime(r.stepStart, d.readyAt)
	taken := map[int]int{}
	for _, n := range nodes {
		taken[n] += d.d.GPUsPerAlloc
		rn := &r.nodes[n]
		if k := len(rn.freeAt) - taken[n]; k >= 0 {
			start = maxTime(start, rn.freeAt[k])
		}
	}
	if start.After(r.now) {
		return r.now
	}
	return start
}

// fits reports whether a demand may run on a node: Nomad's rule, the one
// model of it (nomadmodel.Fits: node pool, device class, pinned nodes).
func (r *replay) fits(d *engine.Demand, n *engine.Node) bool { return nomadmodel.Fits(d, n) }

// noteStarts records when each target has nothing waiting any more.
func (r *replay) noteStarts() {
	waiting := map[engine.JobRef]bool{}
	for i := range r.demands {
		if r.demands[i].d.Count > 0 {
			waiting[r.demands[i].d.Job.Ref] = true
		}
	}
	for ref, j := range r.jobs {
		if j.target && j.started.IsZero() && !waiting[ref] {
			j.started = r.now
			if !j.placed.IsZero() {
				j.started = j.placed
			}
		}
	}
}

// nextEvent is the next moment something happens or a time-based rule
// can change a plan: a run or a grace ends, a run passes min_runtime, an
// idle stretch reaches its rule's after, waiting work reaches
// promote.after_wait, a preemption leaves the eviction cap's hour.
func (r *replay) nextEvent() (time.Time, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(r.now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	p := r.in.Engine.Policy()
	for i := range r.allocs {
		a := &r.allocs[i]
		// A run placed in this step with its start backdated (startOf)
		// may have ended already: it ends at the next step.
		consider(maxTime(a.end, r.now.Add(time.Nanosecond)))
		if !a.drainEnd.IsZero() {
			consider(a.drainEnd)
			continue
		}
		if p.Preemption.MinRuntime > 0 {
			consider(a.a.StartedAt.Add(p.Preemption.MinRuntime))
		}
		for _, rule := range p.Idle {
			if since, ok := engine.IdleSince(a.a.Usage, rule.Threshold); ok {
				consider(since.Add(rule.After))
			}
		}
		if p.Preemption.MaxPerJobPerHour > 0 {
			for _, t := range r.jobs[a.a.Job.Ref].preemptions {
				consider(t.Add(time.Hour + time.Second))
			}
		}
	}
	if pr := p.Preemption.Promote; pr.Boost > 0 && pr.AfterWait > 0 {
		for i := range r.demands {
			consider(r.demands[i].d.Since.Add(pr.AfterWait))
		}
	}
	for _, m := range r.marks {
		consider(m.until.Add(time.Second))
	}
	return next, !next.IsZero()
}

// joinShort names up to two jobs: "a/x", "a/x and b/y", "a/x and 2 more".
func joinShort(names []string) string {
	names = slices.Compact(slices.Clone(names))
	switch len(names) {
	case 1:
		return names[0]
	case 2:
		return names[0] + " and " + names[1]
	}
	return names[0] + " and " + strconv.Itoa(len(names)-1) + " more"
}
