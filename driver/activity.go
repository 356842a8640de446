package driver

import "time"

// transition is a change in a task's GPU activity worth an event.
type transition int

const (
	noTransition transition = iota
	becameIdle
	becameBusy
)

// activityMonitor turns GPU utilisation samples into idle/busy
// transitions, at most one event per transition: idle after idleAfter
// under the idle threshold, busy again only after busyAfter at or over the
// (higher) busy threshold, so a job hovering at the threshold does not
// flap. A task starts as busy (no event for the first busy sample); Nomad
// keeps only 10 events per task.
type activityMonitor struct {
	idleThreshold, busyThreshold float64
	idleAfter, busyAfter         time.Duration

	idle       bool
	belowSince time.Time // start of the current run under idleThreshold
	aboveSince time.Time // start of the current run at or over busyThreshold
}

func newActivityMonitor(cfg Config) *activityMonitor {
	return &activityMonitor{
		idleThreshold: cfg.IdleThreshold,
		busyThreshold: cfg.BusyThreshold,
		idleAfter:     cfg.IdleAfter,
		busyAfter:     cfg.BusyAfter,
	}
}

// observe records one sample and returns the transition it completes.
func (m *activityMonitor) observe(now time.Time, util float64) transition {
	if util < m.idleThreshold {
		m.aboveSince = time.Time{}
		if m.belowSince.IsZero() {
			m.belowSince = now
		}
		if !m.idle && now.Sub(m.belowSince) >= m.idleAfter {
			m.idle = true
			return becameIdle
		}
		return noTransition
	}
	m.belowSince = time.Time{}
	if util < m.busyThreshold {
		// Between the thresholds: neither idle nor busy again.
		m.aboveSince = time.Time{}
		return noTransition
	}
	if m.aboveSince.IsZero() {
		m.aboveSince = now
	}
	if m.idle && now.Sub(m.aboveSince) >= m.busyAfter {
		m.idle = false
		return becameBusy
	}
	return noTransition
}

// idleFor is how long utilisation has been under the idle threshold.
func (m *activityMonitor) idleFor(now time.Time) time.Duration {
	if m.belowSince.IsZero() {
		return 0
	}
	return now.Sub(m.belowSince)
}
