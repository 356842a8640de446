package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The controller follows the cluster rather than reading it in full each
// round. It reads everything once (stale, paginated: reads.go), keeps what
// it needs in an index (clusterCache), follows Nomad's event stream into it
// from the index of that read (watch.go), and builds each round's
// Observation from it. Only two things are still read per round: the
// summary of a job with a blocked evaluation, when an event about that job
// came since it was last read (its queued counts), and specs of jobs
// whose event did not carry one. Every Resync the cluster is read in full
// again and compared with the cache: what differs is counted
// (steward_cache_drift_total) and the fresh read wins. Events are
// state, not deltas (each carries the whole object as of its index), so
// an event applied twice, or one already in a full read, changes nothing.

// cachedNode is a node as the cache keeps it: usable only when ready,
// eligible, not draining and with a healthy GPU.
type cachedNode struct {
	node   ObservedNode
	usable bool
	// draining: an operator drains the node in Nomad (node maintenance,
	// maintenance.go); drain its deadline and whether it was forced, known
	// from the node's events only (a list shows neither): keepDrains
	// carries them over full reads.
	draining bool
	drain    DrainingNode
}

// blockedEval is a blocked evaluation: the job it is for, when Nomad
// created and last modified it, and its groups' placement failures.
type blockedEval struct {
	ns, job  string
	created  time.Time
	modified time.Time
	failed   map[string]*api.AllocationMetric
	// applied is when the event stream first brought it blocked (this
	// controller's clock; zero: a full read brought it): the blocking's
	// delivery to the controller, a decision's stream lag (split.go).
	applied time.Time
}

// cachedSummary is a job's queued allocations per group, and whether an
// event about the job came since it was read.
type cachedSummary struct {
	sum   *api.JobSummary
	stale bool
}

// clusterCache is the cluster as the controller last knew it.
type clusterCache struct {
	mu sync.Mutex
	// placeholders is Steward's namespace, where placeholder jobs live.
	placeholders string
	// ready: a full read filled it; index is the newest Nomad index it
	// reflects, readIndex that of the last full read (events at or below
	// it are in that read: they change nothing new). Events above it are
	// applied entity by entity (seen): Nomad sends one index's changes in
	// several batches when they were several transactions (a job
	// registered, then its evaluation), so an event at index is not
	// stale for having the index the cache is at.
	ready     bool
	index     uint64
	readIndex uint64
	// following: the event stream is subscribed and feeding the cache.
	following bool
	// followed: the stream fed the cache at some point (so that its
	// absence now means a gap, not a test without events).
	followed bool
	nodes    map[string]cachedNode
	jobs     map[jobKey]*ObservedJob
	// skipped are the jobs skipJobType leaves out of jobs, kept only
	// while the controller guards node pools (cache_skipped.go).
	skipped map[jobKey]*ObservedJob
	// guarded are the controller's node pools (Config.ControllerPools).
	guarded map[string]bool
	allocs  map[string]ObservedAlloc
	blocked map[string]blockedEval
	// blockedAt: the earliest evaluation the batch being applied newly
	// blocked (apply).
	blockedAt time.Time
	summaries map[jobKey]*cachedSummary
	// touched is, per job, the index of the newest event about it (the
	// job, an allocation or an evaluation of it) that marked its
	// summary stale: a summary listed at an older index is not taken
	// (replace).
	touched map[jobKey]uint64
	// purged are the jobs the batch being applied purged (dropPurged).
	purged []jobKey
	// seen is, per entity ("a/<alloc>", "j/<ns>/<job>", "n/<node>",
	// "e/<eval>"), the newest Nomad index the cache reflects for it: an
	// event no newer (one the last full read already holds, arriving
	// after it) must not take the entity back.
	seen map[string]uint64
	// changed is closed and replaced when the index advances.
	changed chan struct{}
}

func newClusterCache(placeholders string) *clusterCache {
	return &clusterCache{placeholders: placeholders, nodes: map[string]cachedNode{}, jobs: map[jobKey]*ObservedJob{},
		skipped: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{}, blocked: map[string]blockedEval{}, summaries: map[jobKey]*cachedSummary{},
		touched: map[jobKey]uint64{}, seen: map[string]uint64{}, changed: make(chan struct{})}
}

func (c *clusterCache) isPlaceholder(ns, id string) bool {
	return ns == c.placeholders && strings.HasPrefix(id, placeholderPrefix)
}

// clusterRead is one full read, as the cache keeps it.
type clusterRead struct {
	index   uint64
	nodes   map[string]cachedNode
	jobs    map[jobKey]*ObservedJob
	skipped map[jobKey]*ObservedJob
	allocs  map[string]ObservedAlloc
	blocked map[string]blockedEval
	seen    map[string]uint64
	// summaries are the jobs' summaries as the job list showed them, at
	// jobsIndex: Nomad's list carries each job's summary.
	summaries map[jobKey]*api.JobSummary
	jobsIndex uint64
	// jobReads counts the specs the read fetched one by one: its reader
	// adds them to the observer's stats (a resync behind the rounds
	// reads without the observer's lock).
	jobReads int
}

// replace merges a full read into the cache, entity by entity: the newer
// of the two wins (a stale read from a server a little behind must not
// take back what events already brought), an entity the read lacks is
// gone unless an event newer than the read brought it. It returns how many
// entities the read corrected: changes the events had missed (0 for the
// first read).
func (c *clusterCache) replace(rd *clusterRead) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	drift := 0
	seen := rd.seen
	// The read holds an entity as of its modify index, or its absence as
	// of the read's index.
	mergeInto := func(key string, inRead bool) (readWins bool) {
		asOf := rd.index
		if inRead {
			asOf = seen[key]
		}
		if cached, ok := c.seen[key]; ok && cached > asOf {
			seen[key] = cached
			return false
		}
		return true
	}
	drift += c.mergeRead(rd, mergeInto)
	if !c.ready {
		drift = 0
	}
	keepDrains(c.nodes, rd.nodes)
	keepStopRequests(c.allocs, rd.allocs)
	keepApplied(c.blocked, rd.blocked)
	c.nodes, c.jobs, c.skipped, c.allocs, c.blocked, c.seen = rd.nodes, rd.jobs, rd.skipped, rd.allocs, rd.blocked, seen
	for k, s := range c.summaries {
		if _, ok := c.jobs[k]; !ok {
			delete(c.summaries, k)
		} else {
			s.stale = true // a full read re-reads summaries too: from its job list (takeListed), or one by one
		}
	}
	c.takeListed(rd)
	c.index = max(c.index, rd.index)
	c.readIndex = max(c.readIndex, rd.index)
	c.ready = true
	c.advanced()
	return drift
}

// takeListed takes the summaries the job list showed (c.mu held): the
// list's own, so that a full read needs no read per blocked job (at 250
// nodes a new leader's first round read 252 summaries one by one, 1.9 s,
// issue 33). One is taken only where no event about its job newer than
// the list came (touched): the list may be older than what the events
// already said, and such a job's summary stays stale, read on its own
// when a round needs it (observer.summary).
func (c *clusterCache) takeListed(rd *clusterRead) {
	for k, sum := range rd.summaries {
		if _, ok := c.jobs[k]; !ok || sum == nil || c.touched[k] > rd.jobsIndex {
			continue
		}
		c.summaries[k] = &cachedSummary{sum: sum}
	}
	for k := range c.touched {
		if _, ok := c.jobs[k]; !ok {
			delete(c.touched, k)
		}
	}
}

// touch marks a job's summary stale for an event at index about it.
func (c *clusterCache) touch(k jobKey, index uint64) {
	c.touched[k] = max(c.touched[k], index)
	if s := c.summaries[k]; s != nil {
		s.stale = true
	}
}

// rebuild makes the cache a fresh full read (observer.rebuild): every
// entity as the read has it, indexes included, even where they went back.
// It returns how many entities the read changed, and how many of them it
// shows older than the cache held them (Nomad's state went back).
func (c *clusterCache) rebuild(rd *clusterRead) (drift, regressed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ready {
		for key, cached := range c.seen {
			if asOf, ok := rd.seen[key]; ok && asOf < cached {
				regressed++
			}
		}
		drift += c.mergeRead(rd, func(string, bool) bool { return true })
	}
	if rd.skipped == nil {
		rd.skipped = map[jobKey]*ObservedJob{}
	}
	keepDrains(c.nodes, rd.nodes)
	keepStopRequests(c.allocs, rd.allocs)
	keepApplied(c.blocked, rd.blocked)
	c.nodes, c.jobs, c.skipped, c.allocs, c.blocked, c.seen = rd.nodes, rd.jobs, rd.skipped, rd.allocs, rd.blocked, rd.seen
	c.summaries = map[jobKey]*cachedSummary{}
	// The read's index, even below the cache's: events above it apply.
	c.index, c.readIndex = rd.index, rd.index
	c.ready = true
	c.advanced()
	return drift, regressed
}

// mergeRead merges the cache into a full read, entity kind by entity kind
// (merge), readWins deciding for each entity which of the two stands; it
// returns how many entities the read changed.
func (c *clusterCache) mergeRead(rd *clusterRead, readWins func(key string, inRead bool) bool) int {
	drift := merge(c.nodes, rd.nodes, func(id string) string { return "n/" + id }, readWins,
		func(a, b cachedNode) bool {
			return a.usable == b.usable && a.draining == b.draining && a.node.GPUs == b.node.GPUs
		})
	drift += merge(c.jobs, rd.jobs, func(k jobKey) string { return "j/" + k.String() }, readWins,
		func(a, b *ObservedJob) bool { return a.ModifyIndex == b.ModifyIndex && a.Stopped == b.Stopped })
	drift += c.mergeSkipped(rd, readWins)
	drift += merge(c.allocs, rd.allocs, func(id string) string { return "a/" + id }, readWins,
		func(a, b ObservedAlloc) bool {
			return a.ClientStatus == b.ClientStatus && a.NodeID == b.NodeID && len(a.GPUIDs) == len(b.GPUIDs)
		})
	drift += merge(c.blocked, rd.blocked, func(id string) string { return "e/" + id }, readWins,
		func(a, b blockedEval) bool { return true })
	return drift
}

// merge folds what the cache holds (cached) into a full read (read), per
// entity: the cache's version stays where an event newer than the read
// brought it (readWins false), including entities the read lacks that
// appeared after it (index). It returns how many entities the read
// changed.
func merge[K comparable, V any](cached, read map[K]V, key func(K) string, readWins func(string, bool) bool,
	same func(a, b V) bool) int {
	drift := 0
	for k, v := range cached {
		r, inRead := read[k]
		switch {
		case !readWins(key(k), inRead):
			read[k] = v // an event newer than the read brought it
		case !inRead || !same(v, r):
			drift++
		}
	}
	for k := range read {
		if _, ok := cached[k]; ok {
			continue
		}
		if readWins(key(k), true) {
			drift++
		} else {
			delete(read, k) // gone by an event newer than the read
		}
	}
	return drift
}

// advanced wakes whoever waits for the cache to move (settle).
func (c *clusterCache) advanced() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// apply takes a batch of events (one Nomad index) into the cache and
// reports whether any of it can change a plan, and when Nomad blocked the
// earliest evaluation the batch newly blocks (zero: none). An evaluation
// already blocked is not new pressure when an event carries it again
// (Nomad re-sends it, with its old times, when it unblocks and places it).
func (c *clusterCache) apply(es *api.Events) (relevant bool, blockedAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.blockedAt = time.Time{}
	for i := range es.Events {
		if c.applyOne(&es.Events[i]) {
			relevant = true
		}
	}
	c.dropPurged()
	if es.Index > c.index {
		c.index = es.Index
	}
	c.advanced()
	return relevant, c.blockedAt
}

// dropPurged drops the allocations of the jobs the batch purged: one
// pass over the allocations, however many jobs it purged.
func (c *clusterCache) dropPurged() {
	if len(c.purged) == 0 {
		return
	}
	purged := make(map[jobKey]bool, len(c.purged))
	for _, k := range c.purged {
		purged[k] = true
	}
	c.purged = c.purged[:0]
	for id, a := range c.allocs {
		if purged[jobKey{a.Namespace, a.JobID}] {
			delete(c.allocs, id)
		}
	}
}

// newer reports whether an event is newer than what the cache holds of
// the entity it is about, and then notes it.
func (c *clusterCache) newer(key string, e *api.Event) bool {
	index := max(e.Index, 1)
	if index <= c.seen[key] {
		return false
	}
	c.seen[key] = index
	return true
}

func (c *clusterCache) applyOne(e *api.Event) bool {
	if e.Index != 0 && e.Index <= c.readIndex {
		return false // the last full read holds it already
	}
	switch e.Topic {
	case api.TopicNode:
		n, err := nodeOfEvent(e)
		if err != nil || n == nil || !c.newer("n/"+n.ID, e) {
			return false
		}
		if e.Type == "NodeDeregistration" {
			delete(c.nodes, n.ID)
			return true
		}
		c.nodes[n.ID] = nodeFromAPI(n)
		return true
	case api.TopicJob:
		return c.applyJob(e)
	case api.TopicAllocation:
		return c.applyAlloc(e)
	case api.TopicEvaluation:
		return c.applyEval(e)
	}
	return false
}

// applyJob applies a job's event: registered, changed or deleted.
func (c *clusterCache) applyJob(e *api.Event) bool {
	body, err := decodeEvent(e)
	if err != nil || body.Job == nil {
		return false
	}
	j, deleted := body.Job, body.Deleted
	k := jobKey{deref(j.Namespace), deref(j.ID)}
	if !c.newer("j/"+k.String(), e) {
		return false
	}
	c.touch(k, e.Index)
	if deleted {
		delete(c.jobs, k)
		delete(c.skipped, k)
		delete(c.summaries, k)
		// A purge deletes the job's allocations in the same
		// transaction (Nomad's deleteAllocsForJobTxn), and a deleted
		// allocation has no event of its own: kept, they held their
		// GPUs in every snapshot until the next full read, and work
		// waiting for those GPUs was held as if none were free.
		// Dropped once the batch is applied (dropPurged): Nomad's job
		// GC purges many jobs in one transaction.
		c.purged = append(c.purged, k)
		return true
	}
	if skipJobType(deref(j.Type), deref(j.ParentID), j.Periodic != nil && j.Periodic.Enabled != nil && *j.Periodic.Enabled) {
		return c.keepSkipped(k, j)
	}
	delete(c.skipped, k)
	c.jobs[k] = toObservedJob(j)
	return true
}

// applyAlloc applies an allocation's event: kept while meant to run (or
// finished work a batch job counts), dropped otherwise.
func (c *clusterCache) applyAlloc(e *api.Event) bool {
	body, err := decodeEvent(e)
	if err != nil || body.Allocation == nil || !c.newer("a/"+body.Allocation.ID, e) {
		return false
	}
	a := body.Allocation
	c.touch(jobKey{a.Namespace, a.JobID}, e.Index)
	oa := toObservedAlloc(stubOf(a))
	oa.StopRequested = a.DesiredTransition.Migrate != nil && *a.DesiredTransition.Migrate
	oa.JobVersion = c.allocVersion(a)
	if !cacheAlloc(oa, c.jobs[jobKey{a.Namespace, a.JobID}]) {
		_, had := c.allocs[a.ID]
		delete(c.allocs, a.ID)
		return had
	}
	c.allocs[a.ID] = oa
	return true
}

// applyEval applies an evaluation's event: the blocked ones are kept.
func (c *clusterCache) applyEval(e *api.Event) bool {
	body, err := decodeEvent(e)
	if err != nil || body.Evaluation == nil || !c.newer("e/"+body.Evaluation.ID, e) {
		return false
	}
	ev := body.Evaluation
	c.touch(jobKey{ev.Namespace, ev.JobID}, e.Index)
	old, had := c.blocked[ev.ID]
	if ev.Status != "blocked" {
		delete(c.blocked, ev.ID)
		return had
	}
	b := blockedFrom(ev)
	b.applied = old.applied
	if !had {
		b.applied = time.Now()
	}
	c.blocked[ev.ID] = b
	if !had && !c.isPlaceholder(ev.Namespace, ev.JobID) && (c.blockedAt.IsZero() || b.modified.Before(c.blockedAt)) {
		c.blockedAt = b.modified
	}
	return true
}

// allocVersion is the version of its job an allocation event's allocation
// is at. Nomad leaves the job out of allocation events: an allocation the
// server wrote (placed, or updated in place to the job's latest version,
// as Nomad does with every live allocation when a scale makes a new
// version) since the job last changed is at the job's current version;
// otherwise it is where the cache had it, or, new to the cache, older.
func (c *clusterCache) allocVersion(a *api.Allocation) uint64 {
	prev, had := c.allocs[a.ID]
	j := c.jobs[jobKey{a.Namespace, a.JobID}]
	switch {
	case j != nil && a.AllocModifyIndex >= j.ModifyIndex:
		return j.Version
	case had:
		return prev.JobVersion
	case j != nil && j.Version > 0:
		return j.Version - 1
	}
	return 0
}

// skipJobType reports whether the controller leaves a job out: periodic
// children. System and sysbatch jobs are governed like any job, whole
// (systemjobs.go): left out, their GPUs counted as free and they escaped
// every limit, preemption and idle rule (issue 29).
func skipJobType(typ, parentID string, periodic bool) bool {
	return parentID != "" && periodic
}

// keepsDone reports whether a job's completed allocations are completed
// work (Observation.Done): batch and sysbatch jobs'.
func keepsDone(typ string) bool {
	return typ == api.JobTypeBatch || typ == api.JobTypeSysbatch
}

// keepAlloc reports whether an allocation holds or will hold resources.
func keepAlloc(client, desired string) bool {
	return client != "complete" && client != "failed" && client != "lost" && desired == "run"
}

// finished reports whether an allocation finished by itself: its tasks
// completed, and nobody (Steward's preemption, a scale down, its owner)
// stopped it. A batch job's finished allocation is completed work
// (Observation.Done). A failed one is not: Nomad's reschedule policy
// decides whether it runs again, as it would without Steward.
func finished(client, desired string) bool {
	return client == "complete" && desired == "run"
}

// cacheAlloc reports whether the cache keeps an allocation of job (nil:
// one it does not know): one that holds or will hold GPUs, or one of a
// batch job that finished (of any group: a scale of one group makes a new
// version of the whole job, Observation.Done). What allocFilter asks the
// list for, less the live allocations of groups without GPUs and the
// finished ones of other jobs (services, periodic children, system jobs).
func cacheAlloc(a ObservedAlloc, job *ObservedJob) bool {
	if finished(a.ClientStatus, a.DesiredStatus) {
		return job != nil && keepsDone(job.Type)
	}
	return keepAlloc(a.ClientStatus, a.DesiredStatus) && len(a.GPUIDs) > 0
}

// keepApplied keeps, for the blocked evaluations a full read shows, when
// the stream first brought them: a resync does not make a blocking new.
func keepApplied(cached, read map[string]blockedEval) {
	for id, b := range read {
		if old, ok := cached[id]; ok && b.applied.IsZero() {
			b.applied = old.applied
			read[id] = b
		}
	}
}

func blockedFrom(ev *api.Evaluation) blockedEval {
	// At the stream's precision, whichever path brought it: a blocking
	// is known by its start (decisionLatency), and a resync must not
	// move it (streamNanos).
	return blockedEval{ns: ev.Namespace, job: ev.JobID, created: time.Unix(0, streamNanos(ev.CreateTime)),
		modified: time.Unix(0, streamNanos(ev.ModifyTime)),
		failed:   ev.FailedTGAllocs}
}

// eventBody is an event's payload, as decodeEvent reads it.
type eventBody struct {
	Allocation *api.Allocation
	Evaluation *api.Evaluation
	Job        *api.Job
	Deleted    bool
	Node       *api.Node
}

// decodeEvent decodes an event's payload through JSON, as the HTTP API
// reads the same objects. The api package's own decoder (mapstructure)
// goes by field names and mapstructure tags, not JSON names, and so drops
// every field whose tag differs from its JSON name: a job's NodePool and
// ParentID ("node_pool", "parent_id"), every device attribute's value
// (JSON "Int", field IntVal). Jobs and nodes updated by events lost them:
// the pool precedence saw no node pool, device constraints no memory.
func decodeEvent(e *api.Event) (*eventBody, error) {
	b, err := json.Marshal(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s event payload: %w", e.Topic, err)
	}
	var out eventBody
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decode %s event payload: %w", e.Topic, err)
	}
	return &out, nil
}

// nodeOfEvent is a node event's node (decodeEvent).
func nodeOfEvent(e *api.Event) (*api.Node, error) {
	body, err := decodeEvent(e)
	if err != nil {
		return nil, err
	}
	return body.Node, nil
}

// nodeFromAPI is a node from an event (the list's stub, in full).
func nodeFromAPI(n *api.Node) cachedNode {
	cn := nodeFromStub(&api.NodeListStub{ID: n.ID, Name: n.Name, NodePool: n.NodePool, Status: n.Status,
		SchedulingEligibility: n.SchedulingEligibility, Drain: n.DrainStrategy != nil, Drivers: n.Drivers,
		NodeResources: n.NodeResources})
	if d := n.DrainStrategy; d != nil {
		cn.drain.Deadline = d.ForceDeadline
		cn.drain.Forced = d.Deadline < 0
	}
	return cn
}

// keepDrains carries what events said of a drain (its deadline, whether
// it was forced) over a full read, whose list shows only that a node
// drains.
func keepDrains(cached, read map[string]cachedNode) {
	for id, n := range read {
		if old, ok := cached[id]; ok && n.draining && old.draining && n.drain.Deadline.IsZero() && !n.drain.Forced {
			n.drain.Deadline, n.drain.Forced = old.drain.Deadline, old.drain.Forced
			read[id] = n
		}
	}
}

// keepStopRequests carries over a full read (a resync, a follower's read
// while it waits out the lease, the rebuild after a resubscription) the
// stops Nomad was asked for and has not carried out yet (StopRequested:
// events alone say so, the list does not). Nomad ends such a request only
// by stopping the allocation, which then leaves the read: an allocation the
// read still shows meant to run on the same node is still to be stopped.
// Forgotten, a leader saw every victim whose stop waits in Nomad's
// evaluation queue as a straggler and asked Nomad again (one more write
// and evaluation each, on a server already behind: issue 33), and a new
// leader whose wait ended in such a read started with all of them.
func keepStopRequests(cached, read map[string]ObservedAlloc) {
	for id, a := range read {
		if old, ok := cached[id]; ok && old.StopRequested && !a.StopRequested && old.NodeID == a.NodeID {
			a.StopRequested = true
			read[id] = a
		}
	}
}

func nodeFromStub(n *api.NodeListStub) cachedNode {
	gpus := 0
	var groups []GPUGroup
	if n.NodeResources != nil {
		groups = gpuGroups(n.NodeResources.Devices)
		for _, g := range groups {
			gpus += g.Healthy
		}
	}
	var drivers []string
	for name, d := range n.Drivers {
		if d != nil && d.Detected && d.Healthy {
			drivers = append(drivers, name)
		}
	}
	sort.Strings(drivers)
	return cachedNode{
		node:     ObservedNode{ID: n.ID, Name: n.Name, NodePool: n.NodePool, GPUs: gpus, Drivers: drivers, GPUGroups: groups},
		usable:   n.Status == api.NodeStatusReady && n.SchedulingEligibility == api.NodeSchedulingEligible && !n.Drain && gpus > 0,
		draining: n.Drain,
		drain:    DrainingNode{Name: n.Name},
	}
}

// stubOf is the part of an allocation the list would have returned.
func stubOf(a *api.Allocation) *api.AllocationListStub {
	return &api.AllocationListStub{ID: a.ID, Name: a.Name, Namespace: a.Namespace, JobID: a.JobID, TaskGroup: a.TaskGroup,
		NodeID: a.NodeID, ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus, CreateTime: a.CreateTime,
		AllocatedResources: a.AllocatedResources, TaskStates: a.TaskStates}
}

// at is the newest Nomad index the cache reflects.
func (c *clusterCache) at() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.index
}

func (c *clusterCache) setFollowing(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.following = on
	c.followed = c.followed || on
}

// follows reports whether events keep the cache current.
func (c *clusterCache) follows() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.following
}

// wasFollowed reports whether the event stream ever fed the cache.
func (c *clusterCache) wasFollowed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.followed
}

// settle waits, after the controller's own writes, until the cache holds
// them: until it reflects index, the newest their calls returned (a stop's
// as well as a scale's); at most timeout. It reports whether it got there.
// What Nomad does next with them (a victim's replacement, the scale's
// stops) arrives as events later: buildSnapshot reads it for what it is
// (leaving).
func (c *clusterCache) settle(ctx context.Context, index uint64, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		done, ch := c.index >= index, c.changed
		c.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
