package controller

import "time"

// A round's publish phase runs after its actions, and new work that
// blocked while the round ran waits for it: at 250 simulated nodes on two
// loaded cores the largest part of a slow decision's own latency was a
// round already running when the work blocked (issue 33: 50-1,000 ms of
// 530-1,720 ms, 42 % in all, in two runs), and the publish phase took
// 60-550 ms of each round. Writing the jobs' records, the fair-share
// usage and the status can wait a round: each is rewritten whole from
// the states the next round publishes (recordDue, writeStatus), and none
// of it is read by a plan. What people hear (the outbox), the holds and
// placeholders and the states are written as before: a new leader and
// the next plan read them.

// publishDefer bounds how long the records and the status wait while
// new pressure keeps coming, so that a busy cluster's records still
// follow within seconds.
const publishDefer = 2 * time.Second

// deferPublish reports whether r leaves its records and status to the
// next round: new pressure waits for r's end, and they were written
// within publishDefer. It notes when they are written otherwise.
func (p *publisher) deferPublish(r *round) bool {
	now := time.Now()
	if r.pressed && now.Sub(p.published) < publishDefer {
		p.metrics.publishDeferred.Inc()
		return true
	}
	p.published = now
	return false
}
