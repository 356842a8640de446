package sim

import (
	"container/heap"
	"time"
)

// eventKind is what happens at an event's time.
type eventKind uint8

const (
	evComplete eventKind = iota // a run finishes its work
	evIdle                      // a run's GPUs go idle (its idle tail begins)
	evGraceEnd                  // a preempted job's checkpoint grace is over: stop it
	evWake                      // a time-based engine rule may now fire: plan again
	// evCheck: a preemption's beneficiary should be running by now
	// (grace + one plan interval); checked after the instant settles.
	evCheck
)

// wakeKind says which time-based rule a wake-up is for, so that stale
// ones (the job has moved on) cost no plan.
type wakeKind uint8

const (
	wakeMinRuntime wakeKind = iota // a run passes min_runtime: it may become a victim
	wakeIdle                       // a run has been idle for its idle rule's "after"
	wakePromote                    // waiting work reaches promote.after_wait
	wakeCap                        // a preemption leaves the eviction cap's hour
	wakeDeferred                   // a plan put off by Config.PlanInterval is due
	wakeFair                       // decayed usages cross (fairwake.go)
)

// event is one scheduled happening. gen must match the job's generation
// for run events: a run that was stopped meanwhile makes them stale.
type event struct {
	at   time.Duration
	seq  uint64 // insertion order: ties are handled first come, first served
	kind eventKind
	job  int32
	gen  uint32
	wake eventWake
	// check indexes simulator.checks (evCheck).
	check int32
}

// eventWake is what a wake-up is for.
type eventWake struct {
	kind wakeKind
	// always marks a wake-up for an idle rule of mode "always", which acts
	// even when nothing waits.
	always bool
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (s *simulator) schedule(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.events, e)
}
