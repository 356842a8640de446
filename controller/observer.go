package controller

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// observer turns the cluster into each round's Observation: from the
// cache (cache.go), which a full read fills at the start and at every
// resync, and Nomad's event stream keeps current in between.
type observer struct {
	mu    sync.Mutex
	n     Nomad
	cache *clusterCache
	// resync is how often the cluster is read in full (Config.Resync);
	// lastFull is when it last was (or, behind, began to be).
	resync   time.Duration
	lastFull time.Time
	// behind: a resync of a cache the stream keeps is read behind the
	// rounds (resyncBehind), not in the round it fell due in; resyncing
	// while one runs; behindFailed when the last one failed, so that the
	// next round reads in full itself.
	behind, resyncing, behindFailed bool
	// blocked evaluations seen in an earlier observation (NewPressure).
	blocked map[string]bool
	// stats counts the reads, for the scale harness and metrics.
	stats *readStats
	// last is what the latest observe did (observeCost).
	last observeCost
}

// observeCost is what one observe did: how long it waited for another
// read of the cluster (a follower's warm-up read still running), whether
// it read the cluster in full, and the job specs and summaries it read
// one by one. A new leader's first rounds log it ("round phases"):
// issue 33's first-round observe took 1.0-1.75 s, and the phase's time
// alone did not say on what.
type observeCost struct {
	waited              time.Duration
	full                bool
	jobReads, summaries int
	// overtaken counts its summary reads an event about their job
	// overtook (observer.summary): each read again the next round.
	overtaken int
}

// lastCost returns what the latest observe did.
func (o *observer) lastCost() observeCost {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// readStats counts what the observer read.
type readStats struct {
	fullReads, summaryReads, jobReads int
	drift                             int
	// overtaken: summary reads an event about their job overtook.
	overtaken int
}

func newObserver(n Nomad, placeholders string) *observer {
	return &observer{n: n, cache: newClusterCache(placeholders), blocked: map[string]bool{},
		stats: &readStats{}}
}

// observe returns the cluster now. It reads the cluster in full first when
// the cache is not following events yet, when a resync is due, or when
// full is set; the drift a resync finds is returned in the stats.
func (o *observer) observe(ctx context.Context, now time.Time, full bool) (*Observation, error) {
	return o.observeAs(ctx, now, full, true)
}

// reobserve returns the cluster again within a round, after the round's
// own writes (the recover phase's): as observe, but a resync that fell
// due since the round's first read waits for the next round's. The read
// is there for the writes, which the stream brought (settle) or a full
// read fetches (full); a resync reads every node, job, allocation and
// evaluation, 0.9-4.9 s at 250 nodes under load, and held up the plan
// and the work that blocked meanwhile (issue 33: a 3.09 s second read,
// the resync fallen due during the round, the largest part of eight
// decisions of 1.1-1.7 s).
func (o *observer) reobserve(ctx context.Context, now time.Time, full bool) (*Observation, error) {
	return o.observeAs(ctx, now, full, false)
}

// observeAs is observe, with a due resync read (resync) or left for later.
func (o *observer) observeAs(ctx context.Context, now time.Time, full, resync bool) (*Observation, error) {
	// The loop and follow (at the start) observe: one at a time.
	asked := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	before := *o.stats
	defer func() {
		o.last = observeCost{waited: o.last.waited, full: o.stats.fullReads > before.fullReads,
			jobReads: o.stats.jobReads - before.jobReads, summaries: o.stats.summaryReads - before.summaryReads,
			overtaken: o.stats.overtaken - before.overtaken}
	}()
	o.last.waited = time.Since(asked)
	following := o.cache.follows()
	due := resync && o.resync > 0 && now.Sub(o.lastFull) >= o.resync
	if due && o.behind && !o.behindFailed && following && !full && o.cache.isReady() {
		due = false
		if !o.resyncing {
			o.resyncing, o.lastFull = true, now
			go o.resyncBehind(ctx)
		}
	}
	if full || !o.cache.isReady() || !following && o.cache.wasFollowed() || due {
		rd, err := o.readAll(ctx, full)
		if err != nil {
			return nil, err
		}
		o.stats.jobReads += rd.jobReads
		o.stats.drift += o.cache.replace(rd)
		o.stats.fullReads++
		o.lastFull, o.behindFailed = now, false
	}
	return o.build(ctx, now)
}

// resyncBehind reads the cluster in full while the rounds go on, and
// merges the read into the cache as a resync in a round does: the stream
// keeps the cache meanwhile, and the merge keeps the newer of each entity
// (replace). In the round it fell due in, the read (0.9-4.9 s at 250
// nodes under load, every 30 s) held up the plan, and every piece of
// work that blocked while it ran waited for it (issue 33: a round's
// 4.9 s observe, and decisions of 8-36 s in rounds after it). When the
// read fails, the next round reads in full itself, and fails as the
// read does: a Nomad that stopped answering still fails the rounds, and
// ends the term within about -resync + -round-timeout (stepdown.go), as
// the resync in the rounds did.
func (o *observer) resyncBehind(ctx context.Context) {
	rd, err := o.readAll(ctx, false)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mergeBehind(rd, err)
}

// mergeBehind ends a full read made without the observer's lock
// (resyncBehind, refresh): its read merged into the cache, or, when it
// failed, the next round told to read in full itself (o.mu held).
func (o *observer) mergeBehind(rd *clusterRead, err error) {
	o.resyncing = false
	if err != nil {
		o.behindFailed, o.lastFull = true, time.Time{}
		return
	}
	o.stats.jobReads += rd.jobReads
	o.stats.drift += o.cache.replace(rd)
	o.stats.fullReads++
}

// refresh reads the cluster in full now, as a resync does, and the
// summaries the next observe would read (warmSummaries): a follower
// whose leader's lease has stopped changing reads it while it waits out
// the lease (leaseLock.Acquire), so that its first round as leader plans
// on the followed cache without a resync of its own. A follower's cache
// is otherwise read in full only when it starts (follow), so at the
// takeover its resync was always due.
//
// The read is made as a resync behind the rounds is (resyncBehind):
// without the observer's lock, merged when it ends. It used to hold the
// lock throughout, and a new leader's first observe waited for it: at
// 1,000 nodes the read took 11.7 s on the loaded harness, and the first
// round's observe waited 7.2 s of its 7.6 (observe_waited, issue 33,
// 2026-11-30), most of the failover's time between the lease and the
// first completed round. Now the first round plans at once on the cache
// the event stream kept, as any round between resyncs does, while the
// read goes on; a round that starts while it runs does not read in full
// again (lastFull is when it began), and one after it failed does
// (behindFailed). Writes are fenced by modify indexes, so a plan made on
// a cache that the read would correct is refused, not misapplied.
// A refresh asked for while a read behind runs already is that read.
//
// The summaries are read twice: before the read, those the followed
// cache holds stale (an event about their job came since the follower's
// start), so that a first round that plans before the read ends does
// not read them one by one after the lease is taken; and after it, those
// the read did not bring (warmSummaries).
func (o *observer) refresh(ctx context.Context, now time.Time) (refreshCost, error) {
	o.mu.Lock()
	if o.resyncing {
		o.mu.Unlock()
		return refreshCost{joined: true}, nil
	}
	began := time.Now()
	summaries := o.stats.summaryReads
	if err := o.warmSummaries(ctx); err != nil {
		o.mu.Unlock()
		return refreshCost{}, err
	}
	o.resyncing, o.lastFull = true, now
	o.mu.Unlock()
	read := time.Now()
	rd, err := o.readAll(ctx, false)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mergeBehind(rd, err)
	if err != nil {
		return refreshCost{}, err
	}
	cost := refreshCost{read: time.Since(read)}
	err = o.warmSummaries(ctx)
	cost.summaries, cost.summariesTook = o.stats.summaryReads-summaries, time.Since(began)-cost.read
	return cost, err
}

// refreshCost is what a refresh took: the full read, and the summaries
// read after it (how many, how long). A new leader's first observe
// waits only for the summaries' part of a refresh still running
// (observe_waited), not for its read: the follower logs both.
type refreshCost struct {
	read, summariesTook time.Duration
	summaries           int
	// joined: a read behind the rounds was running already, and this
	// refresh read nothing of its own.
	joined bool
}

// warmSummaries reads the summaries of the jobs with blocked evaluations
// that the cache holds none of, or a stale one of, as the next observe
// would (queued): those the job list did not carry, or that an event
// marked stale since (takeListed). A full read marks every other summary
// stale (replace), and
// a follower builds no observation between its start and its first
// round, so without it a new leader's first observe read the summary of
// every blocked job, one call each, after the lease was taken (issue 33:
// its observe took 1.0-1.75 s at 250 nodes). A summary read here is
// used on the same terms as any cached one: until an event about its
// job (an evaluation, allocation or job of it) marks it stale, after
// which the round reads it afresh (observer.summary).
func (o *observer) warmSummaries(ctx context.Context) error {
	c := o.cache
	c.mu.Lock()
	due := map[jobKey]bool{}
	for _, ev := range c.blocked {
		k := jobKey{ev.ns, ev.job}
		if j := c.jobs[k]; j == nil || j.Stopped || c.isPlaceholder(ev.ns, ev.job) {
			continue
		}
		if s := c.summaries[k]; s == nil || s.stale {
			due[k] = true
		}
	}
	c.mu.Unlock()
	for k := range due {
		if _, err := o.summary(ctx, k); err != nil {
			return fmt.Errorf("read the summary of %s: %w", k, err)
		}
	}
	return nil
}

func (c *clusterCache) isReady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready
}

// readAll reads nodes, jobs, allocations and blocked evaluations in full;
// fresh asks the leader, else any server answers. The index it returns is
// the oldest of the lists': events after it are applied on top.
func (o *observer) readAll(ctx context.Context, fresh bool) (*clusterRead, error) {
	rd := &clusterRead{nodes: map[string]cachedNode{}, jobs: map[jobKey]*ObservedJob{}, skipped: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{},
		blocked: map[string]blockedEval{}, seen: map[string]uint64{}, summaries: map[jobKey]*api.JobSummary{}}
	index := func(i uint64) {
		if rd.index == 0 || i < rd.index {
			rd.index = i
		}
	}
	nodes, i, err := o.n.ListNodes(ctx, fresh)
	if err != nil {
		return nil, err
	}
	index(i)
	for _, n := range nodes {
		rd.nodes[n.ID] = nodeFromStub(n)
		rd.seen["n/"+n.ID] = n.ModifyIndex
	}

	i, err = o.readJobs(ctx, rd, fresh)
	if err != nil {
		return nil, err
	}
	index(i)

	allocs, i, err := o.n.ListAllocs(ctx, fresh)
	if err != nil {
		return nil, err
	}
	index(i)
	for _, a := range allocs {
		rd.seen["a/"+a.ID] = a.ModifyIndex
		if oa := toObservedAlloc(a); cacheAlloc(oa, rd.jobs[jobKey{a.Namespace, a.JobID}]) {
			rd.allocs[a.ID] = oa
		}
	}

	evals, i, err := o.n.ListBlockedEvals(ctx, fresh)
	if err != nil {
		return nil, err
	}
	index(i)
	for _, ev := range evals {
		rd.blocked[ev.ID] = blockedFrom(ev)
		rd.seen["e/"+ev.ID] = ev.ModifyIndex
	}
	return rd, nil
}

// readJobs lists the jobs into rd, reading the spec of each that changed
// since the cache read it, and returns the list's index.
func (o *observer) readJobs(ctx context.Context, rd *clusterRead, fresh bool) (uint64, error) {
	stubs, i, err := o.n.ListJobs(ctx, fresh)
	if err != nil {
		return 0, err
	}
	rd.jobsIndex = i
	// Specs the cache holds, by the modify index the list shows: a full
	// read fetches only jobs that changed. (A copy: events write the
	// cache's map meanwhile; the specs themselves are never changed.)
	o.cache.mu.Lock()
	known := maps.Clone(o.cache.jobs)
	knownSkipped := maps.Clone(o.cache.skipped)
	o.cache.mu.Unlock()
	for _, s := range stubs {
		if skipJobType(s.Type, s.ParentID, s.Periodic) {
			// Kept apart for the pool guard (cache_skipped.go).
			j, err := o.readSkipped(ctx, rd, s, knownSkipped, fresh)
			if err != nil {
				return 0, err
			}
			if j != nil {
				k := jobKey{s.Namespace, s.ID}
				rd.skipped[k] = j
				rd.seen["j/"+k.String()] = s.ModifyIndex
			}
			continue
		}
		k := jobKey{s.Namespace, s.ID}
		rd.seen["j/"+k.String()] = s.ModifyIndex
		if s.JobSummary != nil && !o.cache.isPlaceholder(s.Namespace, s.ID) {
			rd.summaries[k] = s.JobSummary
		}
		j := known[k]
		if j == nil || j.ModifyIndex != s.JobModifyIndex || j.Stopped != s.Stop {
			if o.cache.isPlaceholder(s.Namespace, s.ID) {
				// Its spec does not matter: whether it is stopped does.
				j = &ObservedJob{Namespace: s.Namespace, ID: s.ID, Type: s.Type, Stopped: s.Stop, ModifyIndex: s.JobModifyIndex}
			} else {
				full, err := o.n.ReadJob(ctx, s.Namespace, s.ID, fresh)
				rd.jobReads++
				if err != nil {
					return 0, err
				}
				if full == nil {
					continue // purged between the list and this read: gone
				}
				j = toObservedJob(full)
			}
		}
		rd.jobs[k] = j
	}
	return i, nil
}

// build makes the round's Observation from the cache, reading the
// summaries of blocked jobs it does not hold yet or that changed since.
func (o *observer) build(ctx context.Context, now time.Time) (*Observation, error) {
	obs := &Observation{At: now, Jobs: map[jobKey]*ObservedJob{}, Skipped: map[jobKey]*ObservedJob{}, PoolNodes: map[string][]string{}, Queued: map[jobKey]map[string]QueuedGroup{},
		Placeholders: map[string]Placeholder{}, Done: map[jobKey]map[string]int{}, Ended: map[string]jobKey{}}
	blocked, evals := o.cache.fill(obs)
	sort.Slice(obs.Nodes, func(i, k int) bool { return obs.Nodes[i].ID < obs.Nodes[k].ID })
	for _, names := range obs.PoolNodes {
		sort.Strings(names)
	}
	sort.Slice(obs.Allocs, func(i, k int) bool { return obs.Allocs[i].ID < obs.Allocs[k].ID })
	sort.Strings(blocked)
	if err := o.queued(ctx, obs, now, blocked, evals); err != nil {
		return nil, err
	}
	systemCounts(obs)
	return obs, nil
}

// fill copies the cache into an observation, under its lock: usable and
// draining nodes, skipped jobs, guarded pools' nodes, jobs and
// placeholders, allocations; and returns the blocked evaluations, by ID.
func (c *clusterCache) fill(obs *Observation) (blocked []string, evals map[string]blockedEval) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.usable {
			obs.Nodes = append(obs.Nodes, n.node)
		}
		if n.draining {
			if obs.Draining == nil {
				obs.Draining = map[string]DrainingNode{}
			}
			obs.Draining[n.node.ID] = n.drain
		}
	}
	for k, j := range c.skipped {
		if !c.isPlaceholder(k.Namespace, k.ID) {
			obs.Skipped[k] = j
		}
	}
	if len(c.guarded) > 0 {
		for _, n := range c.nodes {
			if c.guarded[n.node.NodePool] {
				obs.PoolNodes[n.node.NodePool] = append(obs.PoolNodes[n.node.NodePool], n.node.Name)
			}
		}
	}
	for k, j := range c.jobs {
		if c.isPlaceholder(k.Namespace, k.ID) {
			if !j.Stopped {
				obs.Placeholders[k.ID] = Placeholder{ID: k.ID}
			}
			continue
		}
		obs.Jobs[k] = j
	}
	c.fillAllocs(obs)
	blocked = make([]string, 0, len(c.blocked))
	for id := range c.blocked {
		blocked = append(blocked, id)
	}
	evals = make(map[string]blockedEval, len(c.blocked))
	for id, ev := range c.blocked {
		evals[id] = ev
	}
	return blocked, evals
}

// fillAllocs copies the allocations meant to run (Steward's placeholders'
// into their placeholders), and counts finished ones (c.mu held).
func (c *clusterCache) fillAllocs(obs *Observation) {
	obs.Allocs = make([]ObservedAlloc, 0, len(c.allocs))
	for _, a := range c.allocs {
		if !keepAlloc(a.ClientStatus, a.DesiredStatus) {
			// Finished: completed work of a batch job's current version
			// counts (Observation.Done); the rest is history.
			k := jobKey{a.Namespace, a.JobID}
			if j := obs.Jobs[k]; j != nil && j.Type == api.JobTypeBatch && finished(a.ClientStatus, a.DesiredStatus) {
				obs.Ended[a.ID] = k
			}
			if j := obs.Jobs[k]; j != nil && keepsDone(j.Type) && a.JobVersion == j.Version {
				if obs.Done[k] == nil {
					obs.Done[k] = map[string]int{}
				}
				obs.Done[k][a.Group]++
			}
			continue
		}
		if c.isPlaceholder(a.Namespace, a.JobID) {
			if p, ok := obs.Placeholders[a.JobID]; ok {
				p.Node, p.GPUs = a.NodeID, len(a.GPUIDs)
				obs.Placeholders[a.JobID] = p
			}
			continue
		}
		obs.Allocs = append(obs.Allocs, a)
	}
}

// queued reads which GPU groups of the jobs with blocked evaluations wait
// for GPUs, and since when pressure is new (an evaluation not seen
// blocked before).
func (o *observer) queued(ctx context.Context, obs *Observation, now time.Time, blocked []string, evals map[string]blockedEval) error {
	c := o.cache
	seen := map[string]bool{}
	for _, id := range blocked {
		ev := evals[id]
		if c.isPlaceholder(ev.ns, ev.job) {
			continue // Steward's own: no work waits there
		}
		seen[id] = true
		if !o.blocked[id] {
			at := ev.modified
			if at.UnixNano() == 0 || at.After(now) {
				at = now
			}
			if obs.NewPressure.IsZero() || at.Before(obs.NewPressure) {
				obs.NewPressure = at
			}
		}
		k := jobKey{ev.ns, ev.job}
		j := obs.Jobs[k]
		if j == nil || j.Stopped {
			continue
		}
		if _, done := obs.Queued[k]; done {
			continue
		}
		sum, err := o.summary(ctx, k)
		if err != nil {
			return err
		}
		if sum == nil {
			continue // purged since it was listed
		}
		groups := map[string]QueuedGroup{}
		for g, s := range sum.Summary {
			if s.Queued > 0 && j.Groups[g].GPUsPerAlloc > 0 && lacksGPUs(ev.failed[g]) {
				groups[g] = QueuedGroup{Count: s.Queued, Since: ev.created, Seen: ev.applied}
			}
		}
		obs.Queued[k] = groups
	}
	o.blocked = seen
	return nil
}

// summary returns a job's summary: the cached one while no event about
// the job came since it was read, else a fresh read.
func (o *observer) summary(ctx context.Context, k jobKey) (*api.JobSummary, error) {
	c := o.cache
	c.mu.Lock()
	s := c.summaries[k]
	touched := c.touched[k]
	c.mu.Unlock()
	if s != nil && !s.stale {
		return s.sum, nil
	}
	sum, err := o.n.JobSummary(ctx, k.Namespace, k.ID, false)
	o.stats.summaryReads++
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if sum == nil {
		delete(c.summaries, k)
	} else {
		// An event about the job applied while the read was out may say
		// what the answer does not (Nomad counts a blocked group's queued
		// allocations when it completes the evaluation that failed, a
		// moment after blocking it): it marked the entry this one
		// replaces stale, so this one stays stale too, and the round it
		// poked reads the summary again. Stored fresh, the answer hid the
		// work until the next event about its job or the next resync:
		// at 250 nodes, work a round first saw queued in a resync's round
		// had waited up to 27 s (seen_after, issue 33).
		overtaken := c.touched[k] > touched
		if overtaken {
			o.stats.overtaken++
		}
		c.summaries[k] = &cachedSummary{sum: sum, stale: overtaken}
	}
	c.mu.Unlock()
	return sum, nil
}
