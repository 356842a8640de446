package nomadmodel

import (
	"fmt"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// What an engine action does to Nomad is decided here, once (Carry), and
// carried out by whatever holds Nomad's state (State): the model's
// Cluster, the simulator's jobs and GPU owners, and the forecast replay's
// allocations and demands. The three keep their own data structures,
// since the simulator's and the replay's are indexed for runs of tens of
// thousands of jobs where the model's lists would be scanned per action,
// but none of them decides on its own when a preemption's victims stop,
// whether stopped work is held or gone, or what a resume waits for.

// State is Nomad's state as one side holds it: it carries out each
// effect on its own structures, and says, by an error, an action it
// cannot (a job or allocation it does not know, a kind it does not
// model).
type State interface {
	// SetPriority gives every group of the job the priority; promoted
	// says a promotion (engine.Job.Promoted) rather than a return to
	// its tier's priority.
	SetPriority(a *engine.Action, priority int, promoted bool) error
	// Hold takes back from Nomad up to h.Count of what it has not
	// placed of the group: a hold never stops running work.
	Hold(a *engine.Action, h Hold) error
	// Resume gives Nomad back up to r.Count held allocations; while
	// r.Wait, victims still drain for the job and the resume waits for
	// the last of them to stop.
	Resume(a *engine.Action, r Resume) error
	// Move sends the job's groups to a node pool.
	Move(a *engine.Action, pool string) error
	// Stop stops the action's allocations (engine.Action.Allocs), now
	// or at the end of a drain.
	Stop(a *engine.Action, s Stop) error
}

// Hold is a hold's effect.
type Hold struct {
	// Count is at most how many of the group's unplaced allocations are
	// taken back (an action's negative count is none).
	Count int
	// Draining: held while its victims checkpoint (engine.RuleDraining);
	// the plan that stops them resumes it, ahead of Nomad's queue.
	Draining bool
}

// Resume is a resume's effect.
type Resume struct {
	Count int
	// Ahead: evaluated ahead of Nomad's queue (engine.Action.Ahead).
	Ahead bool
	// Wait: the resume waits while victims drain for the job
	// (engine.Action.AfterVictims), as the controller leaves it held
	// (controller/act.go actResume); released when they have stopped.
	// A side that knows victims drain for the job checks; the others
	// release at once.
	Wait bool
}

// Stop is a preemption's or an idle stop's effect.
type Stop struct {
	// Decided is when the plan decided it.
	Decided time.Time
	// Drain: the victims run on, draining, until End: the checkpoint
	// signal goes out at SignalAt (SignalDelay after the decision) and
	// the grace runs from it. Without, End is Decided and SignalAt is
	// zero: they stop in the round that decided it.
	Drain    bool
	SignalAt time.Time
	End      time.Time
	Grace    time.Duration
	// Requeue: the stopped work is held, for Steward to resume (always
	// for a preemption); false: an idle stop that lowers the count for
	// good.
	Requeue bool
	// Preempted: a preemption (engine.Demand.Preempted once held);
	// false: an idle stop (engine.Demand.Requeued once held).
	Preempted bool
	// For is the work the GPUs are freed for: they stay set aside for it
	// while it waits (earmarks).
	For      *engine.JobRef
	ForGroup string
}

// StopOf is the effect of a preemption or idle stop decided at now.
func StopOf(a *engine.Action, now time.Time) Stop {
	s := Stop{Decided: now, End: now, Requeue: a.Requeue || a.Kind == engine.Preempt,
		Preempted: a.Kind == engine.Preempt, For: a.For, ForGroup: a.ForGroup}
	if d := DrainTime(a); d > 0 {
		s.Drain, s.SignalAt, s.End, s.Grace = true, now.Add(SignalDelay), now.Add(d), a.Grace
	}
	return s
}

// Carry carries out one action decided at now on st, as the controller
// makes Nomad do it (controller/act.go).
func Carry(st State, a *engine.Action, now time.Time) error {
	switch a.Kind {
	case engine.Preempt, engine.IdleStop:
		return st.Stop(a, StopOf(a, now))
	case engine.Hold:
		return st.Hold(a, Hold{Count: max(a.Count, 0), Draining: a.Reason.Rule == engine.RuleDraining})
	case engine.Resume:
		return st.Resume(a, Resume{Count: max(a.Count, 0), Ahead: a.Ahead, Wait: a.AfterVictims})
	case engine.Move:
		return st.Move(a, a.NodePool)
	case engine.Promote, engine.SetPriority:
		// As the controller records it (actPriority): a priority set
		// back to its tier's is no promotion any more.
		return st.SetPriority(a, a.Priority, a.Kind == engine.Promote)
	}
	return fmt.Errorf("nomadmodel: action of unknown kind: %s", a)
}
