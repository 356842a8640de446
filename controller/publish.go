package controller

import (
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// publisher writes what a round leaves for people to read: each job's
// record (record.go), the status and its namespace views (status.go,
// status_views.go), the notifications' outbox (outbox.go) and the
// queue's forecasts (forecast.go). It owns what it last published, so
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
	// client is the Nomad API client, whose address the messages link to
	// without a UI address (uiBase); nil in tests.
	client *api.Client
	// engineNow is the policy in force, for redacting messages sent
	// between rounds; poke asks for a round once a forecast is made.
	engineNow func() (*policy.Policy, *engine.Engine)
	poke      func()

	records   map[jobKey]string // JSON last written to each job's record
	recordErr map[jobKey]string // last error writing each job's record, logged once
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
	// notifier sends webhook messages (notify.go); nil in a dry run.
	notifier *notifier
	// fc forecasts the waiting jobs' starts (forecast.go).
	fc *queueForecaster
}

// newPublisher gives the publisher c's wiring, stores and outcomes; c's
// state store, meta checker and sampler are made before it (giveDuties).
func newPublisher(c *Controller) *publisher {
	p := &publisher{wiring: wiringOf(c), outcomes: outcomesOf(c), store: c.stateStore, meta: c.metaChecker,
		sampler: c.sampler, metrics: c.metrics, client: c.client, engineNow: c.engineNow, poke: c.poke}
	p.forgetRecords()
	return p
}

// forgetRecords forgets what was written to the jobs' records: a new
// lead term writes them afresh.
func (p *publisher) forgetRecords() {
	p.records = map[jobKey]string{}
	p.recordErr = map[jobKey]string{}
}

// outcomes are what the rounds leave on the controller, outside any one
// round, that the status and the records quote: the latest decisions
// (Controller.remember), the GPUs' samples, and the address where checks
// are answered (set by the endpoints, under the controller's mu). Like
// the wiring they point at the controller's fields, so that what is set
// on it later (a test's usage) holds, and give no way back to it.
type outcomes struct {
	decisionsp *[]Decision
	usagep     **usageStore
	mu         *sync.Mutex // guards *checkAddrp
	checkAddrp *string
}

func outcomesOf(c *Controller) outcomes {
	return outcomes{decisionsp: &c.decisions, usagep: &c.usage, mu: &c.mu, checkAddrp: &c.checkAddr}
}

func (o outcomes) decisions() []Decision { return *o.decisionsp }
func (o outcomes) usage() *usageStore    { return *o.usagep }

func (o outcomes) checkAddr() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return *o.checkAddrp
}
