package controller

import "time"

// publisher writes what a round leaves for people to read: each job's
// record (record.go), the status and its namespace views (status.go,
// status_views.go), the notifications' outbox (outbox.go) and the
// queue's forecasts (forecast.go). It owns what it last published, so
// that an unchanged record or status is never written again; what a
// round decided (the job states, the decisions) it reads from the
// controller it publishes for.
type publisher struct {
	// c stays whole: a publisher reads the round's every outcome (states,
	// decisions, store errors, meta and activity warnings, usage, check
	// address), which is the controller itself.
	c *Controller

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

func newPublisher(c *Controller) *publisher {
	p := &publisher{c: c}
	p.forgetRecords()
	return p
}

// forgetRecords forgets what was written to the jobs' records: a new
// lead term writes them afresh.
func (p *publisher) forgetRecords() {
	p.records = map[jobKey]string{}
	p.recordErr = map[jobKey]string{}
}
