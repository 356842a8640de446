package controller

import (
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// publisher writes what a round leaves for people to read: each job's
// record (record.go) and the status and its namespace views (status.go,
// status_views.go), with the queue's places and forecasts (the
// forecaster's, forecast.go); the notifications' outbox is a type of its
// own (outbox.go). It owns what it last published, so
// that an unchanged record or status is never written again. What a
// round decided it is handed with the round (r, its plan and queue, the
// snapshot); what the rounds leave outside any one round it reads through
// the stores and the outcomes it is given (newPublisher), not the
// controller.
type publisher struct {
	wiring
	outcomes
	// store holds the jobs' states, which the records, the outbox and the
	// forecasts read, and through which the outbox's changes are saved.
	store *stateStore
	// meta and sampler say what the records and the status warn of: the
	// meta Steward refused, and the GPUs whose activity it cannot judge.
	meta    *metaChecker
	sampler *sampler
	metrics *metrics
	// engineNow is the policy in force, for the namespaces' views.
	engineNow func() (*policy.Policy, *engine.Engine)

	records   map[jobKey]string // JSON last written to each job's record
	recordErr map[jobKey]string // last error writing each job's record, logged once
	// placeHeld: records held back for the job's first place in the
	// queue, by the round that held them (recordplace.go).
	placeHeld map[jobKey]time.Time
	// statusOut is the status last published, statusIndex its
	// variable's modify index (check-and-set) once statusKnown.
	statusOut   string
	statusIndex uint64
	statusKnown bool
	// statusStable and statusAt are the last published status without
	// its drifting figures (stableStatus), and when it was published.
	statusStable string
	statusAt     time.Time
	// views are the namespaces' views of the status last published
	// (status_views.go).
	views statusViews
	// nsRound and nsSet: the namespaces known in round nsRound, to
	// redact tenants' records (redact.go).
	nsRound *round
	nsSet   map[string]bool
	// queue works out the queue and forecasts the waiting jobs' starts
	// (forecast.go); the records show what it settled.
	queue *forecaster
	// published is when a round last wrote the records and the status:
	// a round that new pressure waits for leaves them to the next, for
	// publishDefer at most (publishdefer.go).
	published time.Time
}

// newPublisher gives the publisher c's wiring, stores and outcomes; c's
// state store, meta checker and sampler are made before it (giveDuties).
func newPublisher(c *Controller) *publisher {
	p := &publisher{wiring: c.wiring, outcomes: outcomes{recent: c.decisions, samples: c.usage, address: c.checkAddr}, store: c.stateStore, meta: c.metaChecker,
		sampler: c.sampler, metrics: c.metrics, engineNow: c.engineNow, queue: &forecaster{wiring: c.wiring, store: c.stateStore, poke: c.trigger.poke}}
	p.forgetRecords()
	return p
}

// forgetRecords forgets what was written to the jobs' records: a new
// lead term writes them afresh.
func (p *publisher) forgetRecords() {
	p.records = map[jobKey]string{}
	p.recordErr = map[jobKey]string{}
	p.placeHeld = map[jobKey]time.Time{}
}

// outcomes are what the rounds leave outside any one round that the
// status and the records quote: the latest decisions, the GPUs' samples,
// and the address where checks are answered. Each is an owner type of its
// own, made by the controller's constructor and shared with whoever
// writes it (the actor, the sampler, the endpoints); none is a way back
// to the controller.
type outcomes struct {
	recent  *recentDecisions
	samples *usageStore
	address *checkAddress
}

func (o outcomes) decisions() []Decision { return o.recent.list() }
func (o outcomes) usage() *usageStore    { return o.samples }
func (o outcomes) checkAddr() string     { return o.address.get() }
