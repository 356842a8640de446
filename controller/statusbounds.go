package controller

import (
	"fmt"
	"slices"
)

// The status quotes what tenants chose (job IDs, meta values in warnings,
// reasons naming both): each is cut to quoteMax, and what still does not
// fit is dropped with a marker (Status.Trimmed), so that one tenant's
// value never keeps the status from being published (a status over 64 KiB
// is refused by Nomad, and `steward status` then shows an old one for
// ever).

// clipQuoted cuts every tenant-chosen value the status quotes to quoteMax.
func clipQuoted(s *Status) {
	// The lists may share their arrays with the round's (the queue):
	// cut copies.
	s.Held, s.Idle, s.Decisions = slices.Clone(s.Held), slices.Clone(s.Idle), slices.Clone(s.Decisions)
	s.Queue, s.Warnings, s.Tenants = slices.Clone(s.Queue), slices.Clone(s.Warnings), slices.Clone(s.Tenants)
	q := func(v *string) { *v = clip(*v, quoteMax) }
	// Reasons quote several such values with their numbers: four quotes' worth.
	reason := func(v *string) { *v = clip(*v, 4*quoteMax) }
	for i := range s.Held {
		h := &s.Held[i]
		q(&h.Job)
		q(&h.Group)
		reason(&h.Reason)
		reason(&h.Scaling)
	}
	for i := range s.Idle {
		q(&s.Idle[i].Job)
		reason(&s.Idle[i].Snoozed)
	}
	for i := range s.Decisions {
		d := &s.Decisions[i]
		q(&d.Job)
		q(&d.Group)
		reason(&d.Reason)
		reason(&d.Error)
	}
	for i := range s.Queue {
		e := &s.Queue[i]
		q(&e.Job)
		q(&e.ID)
		q(&e.Tier)
		reason(&e.Reason)
		reason(&e.ForecastNote)
		e.Unblock = slices.Clone(e.Unblock)
		for u := range e.Unblock {
			reason(&e.Unblock[u])
		}
	}
	for i := range s.Warnings {
		q(&s.Warnings[i].Job)
		reason(&s.Warnings[i].Problem)
	}
	for i := range s.Tenants {
		reason(&s.Tenants[i].Note)
	}
}

// trimmedMarker says what a status over its limit left out.
func trimmedMarker(limit, warnings int) string {
	return fmt.Sprintf("status over %d bytes: %d job warnings left out (steward job check, or each job's record, shows them)", limit, warnings)
}
