package engine

import (
	"slices"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Deciding and explaining are split. While demands are served, the engine
// decides (which units go, which work resumes or waits, with the numbers
// that hold at that moment) and hands each decision to an explainer that
// writes it out as an Action: allocation IDs, signal, grace and the
// reason's text. Writing thousands of reasons reads names all over the
// snapshot, a fifth of a large plan's time; for a large plan the explainer
// therefore runs on a goroutine of its own while the next demands are
// decided. It reads only what deciding no longer changes (the snapshot,
// the policy, units' and tenants' fixed fields) and the numbers each
// decision carries, and writes the actions in the order they were decided,
// so the plan is the same whichever way it runs (TestExplainAsync).

// decisionKind is what a decision becomes.
type decisionKind uint8

const (
	decideVictims decisionKind = iota // Preempt or pressure IdleStop of one group of victims
	decideResume                      // Resume of held work
	decideHold                        // Hold of work Nomad queued
	decideReady                       // an action whose reason the deciding side wrote (ready)
)

// decision is one action decided, with the numbers its reason needs.
type decision struct {
	kind      decisionKind
	b         bene   // the beneficiary as it stood
	vs        [2]int // victims: batch.victims[vs[0]:vs[1]], one job, group and rule
	count     int    // allocations resumed or held
	use       int    // the tenant's GPUs with a resume
	fixed     int    // the tenant's non-preemptible GPUs with a resume
	preempted bool   // a resume whose GPUs are being freed (Action.AfterVictims)
	ahead     bool   // a resume onto GPUs set aside for it (Action.Ahead)
	why       Reason // a hold's reason
	ready     *Action
}

// batch is decisions handed over together, with their victims.
type batch struct {
	decisions []decision
	victims   []victim
}

// batchSize is how many decisions go to the explainer at a time: enough
// to make handing over cheap, few enough to keep it busy early.
const batchSize = 128

// explainAsyncFrom is the least number of waiting demands for which the
// explainer runs on its own goroutine; below it, handing over costs more
// than it saves. Tests set it to compare both ways.
var explainAsyncFrom = 256

// explainer turns decisions into actions.
type explainer struct {
	st   *state
	text msg // its own buffer: the deciding side writes reasons too
	out  []Action
	// moves are the Preempts in out whose victim may move (migration.go).
	moves []move

	// ids is the block preemptions' Allocs are carved from (carveFrom):
	// allocated one by one, 7,400 lists cost 2.5 M instructions of a
	// fleet plan.
	ids []string

	cur    *batch
	work   chan *batch // to the explainer goroutine; nil when explaining inline
	spare  chan *batch // explained batches, for reuse
	done   chan []Action
	closed bool
}

// startExplainer returns an explainer for the serve pass; async runs it on
// its own goroutine.
func (st *state) startExplainer(async bool) *explainer {
	x := &explainer{st: st, cur: &batch{}, out: st.out.Actions}
	if !async {
		return x
	}
	x.work = make(chan *batch, 8)
	x.spare = make(chan *batch, 8)
	x.done = make(chan []Action, 1)
	go func() {
		for bt := range x.work {
			x.explain(bt)
			select {
			case x.spare <- bt:
			default:
			}
		}
		x.done <- x.out
	}()
	return x
}

// add queues one decision.
func (x *explainer) add(d decision) {
	x.cur.decisions = append(x.cur.decisions, d)
	if len(x.cur.decisions) >= batchSize {
		x.handOver()
	}
}

// hold queues a hold of count allocations of b. Out of line: served
// writes three of them, and each decision written in place took some
// 300 bytes of code in the loop that serves every demand.
//
//go:noinline
func (x *explainer) hold(b *bene, count int, why Reason) {
	x.add(decision{kind: decideHold, b: *b, count: count, why: why})
}

// addVictims queues a group of victims of one job, group and rule.
func (x *explainer) addVictims(b *bene, vs []victim) {
	lo := len(x.cur.victims)
	x.cur.victims = append(x.cur.victims, vs...)
	x.add(decision{kind: decideVictims, b: *b, vs: [2]int{lo, len(x.cur.victims)}})
}

func (x *explainer) handOver() {
	if x.work == nil {
		x.explain(x.cur)
		return
	}
	x.work <- x.cur
	select {
	case x.cur = <-x.spare: // emptied by explain
	default:
		x.cur = &batch{}
	}
}

// finish explains what is left and returns every action, in order.
func (x *explainer) finish() []Action {
	if x.work == nil {
		x.explain(x.cur)
		return x.out
	}
	x.work <- x.cur
	close(x.work)
	x.closed = true
	return <-x.done
}

// stop ends the explainer goroutine if finish did not (a panic while
// serving), so that it does not wait for work for ever.
func (x *explainer) stop() {
	if x.work != nil && !x.closed {
		close(x.work)
		x.closed = true
	}
}

func (x *explainer) explain(bt *batch) {
	for i := range bt.decisions {
		d := &bt.decisions[i]
		dm := d.b.d
		switch d.kind {
		case decideVictims:
			vs := bt.victims[d.vs[0]:d.vs[1]]
			a := x.victimAction(&d.b, vs)
			if a.Kind == Preempt && len(vs) == 1 && x.st.units[vs[0].ui].gang < 0 {
				x.moves = append(x.moves, move{ui: vs[0].ui, action: len(x.out)})
			}
			x.out = appendAction(x.out, a)
		case decideResume:
			a := countAction(Resume, dm, d.count, x.st.admitReason(&x.text, &d.b, d.count, d.use, d.fixed, d.preempted))
			a.AfterVictims = d.preempted
			a.Ahead = d.ahead
			x.out = appendAction(x.out, a)
		case decideHold:
			x.out = appendAction(x.out, countAction(Hold, dm, d.count, d.why))
		case decideReady:
			x.out = appendAction(x.out, *d.ready)
		}
	}
	bt.decisions = bt.decisions[:0]
	bt.victims = bt.victims[:0]
}

// countAction builds a Resume or Hold of count allocations of a demand.
func countAction(kind Kind, d *Demand, count int, why Reason) Action {
	return Action{Kind: kind, Job: d.Job.Ref, Group: d.Group, Count: count, GPUs: count * d.GPUsPerAlloc, Reason: why}
}

// idsBlock is how many allocation IDs a block of Allocs lists holds.
const idsBlock = 1024

// victimAction builds the Preempt (or pressure IdleStop) for victims that
// share a job, group and rule.
func (x *explainer) victimAction(b *bene, vs []victim) Action {
	st := x.st
	u := &st.units[vs[0].ui]
	job := st.jobOf(u)
	a := Action{Kind: Preempt, Job: job.Ref, Group: st.groupOf(u), Requeue: true,
		For: &b.d.Job.Ref, ForGroup: b.d.Group}
	k := 0
	for _, v := range vs {
		if vu := &st.units[v.ui]; vu.gang < 0 {
			k++
		} else {
			k += len(st.gangs[vu.gang].allocs)
		}
	}
	a.Allocs = carveFrom(&x.ids, k, idsBlock) // as long as it is: an append reallocates
	for _, v := range vs {
		vu := &st.units[v.ui]
		a.GPUs += vu.gpus
		a.Allocs = st.appendAllocIDs(vu, a.Allocs)
	}
	slices.Sort(a.Allocs) // once, not after each victim
	var usual time.Duration
	if vs[0].rule == RuleIdle {
		a.Kind = IdleStop
		a.Requeue = st.e.idleRule(u).Action == policy.IdleActionRequeue
	} else {
		var grace time.Duration
		grace, usual = st.victimGrace(b, u, vs[0].rule)
		a.Signal, a.Grace = st.e.checkpoint(job, grace)
	}
	a.Reason = st.victimReason(&x.text, b, vs[0], a.GPUs)
	if a.Kind == Preempt {
		// Rare, so a second string here rather than a note threaded
		// through every branch of victimReason.
		if note := st.graceNote(b, job, a.Grace, usual); note != "" {
			a.Reason.Message += note
		}
	}
	return a
}
