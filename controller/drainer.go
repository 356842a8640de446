package controller

// drainer moves drains (preemptions, idle stops, pauses, node
// maintenance) on after the round that started them: it sends their
// checkpoint signals, finishes them once their grace is over or their
// checkpoints are written (polling the written files between rounds,
// written_poll.go), stops their victims and holds their groups, and stops
// victims Nomad still runs (act.go). It owns what only drains need: the
// checkpoint-written files found between rounds, and the allocations the
// last plan of the lead term saw (neverAdmitted). It acts through the
// actor (its store, metrics and decisions), given once both are made
// (giveDuties), and wakes the loop with poke; it has no controller.
type drainer struct {
	*actor
	poke func()
	// written passes drains' checkpoint-written files between the rounds
	// and their poll (written_poll.go).
	written writtenStore
	// planned holds the allocations the last round of this lead term
	// planned with (nil: none yet): one the limit stops before any plan
	// saw it was placed by Nomad over its tenant's limit, never admitted
	// (neverAdmitted).
	planned map[string]bool
}
