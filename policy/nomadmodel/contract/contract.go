// Package contract is the table of cases that every model of Nomad under
// Steward must pass: package nomadmodel, and the controller's roundRunner
// over its fake Nomad (controller/contract_test.go), the truth, since it is
// what users run. Each case is a start state whose first plans hold an
// action of one engine.Kind, and the state the engine sees once the
// rounds in Rounds have carried it out (State).
//
// It holds data and the comparison only: each side builds the start state
// in its own terms and runs the rounds.
package contract

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// Policy is the policy every case runs under.
const Policy = `
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
  pools       = ["onprem", "cloud"]
}
tenant "ml" {}
tenant "capped" {
  limit = 2
}
pool "onprem" {
  node_pool = "onprem"
}
pool "cloud" {
  node_pool = "cloud"
}
idle "notebooks" {
  tiers     = ["interactive"]
  threshold = 10
  after     = "15m"
  mode      = "always"
  action    = "stop"
}
preemption {
  min_runtime       = "0s"
  grace             = "2m"
  checkpoint_signal = "SIGUSR1"
  promote {
    after_preemptions = 0
    after_wait        = "1h"
    boost             = 10
  }
}
`

// Start is the time of a case's first round.
var Start = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// SignalDelay is the controller's delay between deciding a preemption and
// its checkpoint signal (controller/act.go: signalDelay); a model's grace
// runs from the signal as the controller's does.
const SignalDelay = time.Second

// Rounds are the times of a case's rounds after Start: the plan, the
// checkpoint signal, the grace counted from the plan (the victims still
// drain: the grace runs from the signal), the grace's end and two more,
// in which what the drain freed is placed.
var Rounds = []time.Duration{0, SignalDelay, 2 * time.Minute, SignalDelay + 2*time.Minute,
	SignalDelay + 2*time.Minute + time.Second, SignalDelay + 2*time.Minute + 2*time.Second}

// PlansOnNext reports whether round i of Rounds plans on a case's Next:
// the second round, and the third, before which no drain may end (a
// model that ran the grace from the plan, not from the signal, stopped
// the victims a signal delay early).
func PlansOnNext(i int) bool { return i == 1 || i == 2 }

// Node is a node of GPUs in a node pool ("" : "default").
type Node struct {
	ID   string
	GPUs int
	Pool string
}

// Job is a job of one task group, "work", of Count allocations of GPUs
// each: one running on each node of Running (started RanFor before
// Start), the rest queued in Nomad since WaitedFor before Start.
type Job struct {
	Namespace, ID, Tier string
	Priority            int
	GPUs, Count         int
	Running             []string
	RanFor, WaitedFor   time.Duration
	Pool                string // its node pool ("": "default")
	// Idle: its running allocations used no GPU since they started.
	Idle bool
	// Gang: all its allocations are preempted and resumed together
	// (the job meta steward.gang).
	Gang bool
}

// Group is the name of every case job's task group.
const Group = "work"

// Case is one story: a start state, the kind of action its plans must
// hold, the state the second and third rounds plan on (Next: what the
// first round's actions made of the cluster; PlansOnNext) and the state
// once the rounds have run (Want).
type Case struct {
	Name  string
	Kind  engine.Kind
	Nodes []Node
	Jobs  []Job
	Next  []string
	Want  []string
}

// Cases are the contract: at least one case per engine.Kind.
var Cases = []Case{
	{
		Name:  "preempt: a checkpoint grace, then the victim held and the beneficiary placed on its GPUs",
		Kind:  engine.Preempt,
		Nodes: []Node{{ID: "n1", GPUs: 4}},
		Jobs: []Job{
			{Namespace: "ml", ID: "train", Tier: "training", Priority: 40, GPUs: 4, Count: 1, Running: []string{"n1"}, RanFor: 2 * time.Hour},
			{Namespace: "ml", ID: "nb", Tier: "interactive", Priority: 60, GPUs: 2, Count: 1, WaitedFor: time.Second},
		},
		Next: []string{
			"job ml/nb priority=60",
			"job ml/train priority=40 preemptions=1",
			"run ml/train/work on n1 ×1 (4 GPUs) draining",
			"wait ml/nb/work ×1 (2 GPUs) held",
		},
		Want: []string{
			"job ml/nb priority=60",
			"job ml/train priority=40 preemptions=1",
			"run ml/nb/work on n1 ×1 (2 GPUs)",
			"wait ml/train/work ×1 (4 GPUs) held preempted",
		},
	},
	{
		Name:  "preempt a gang: all of its allocations drain, then the whole count is held",
		Kind:  engine.Preempt,
		Nodes: []Node{{ID: "n1", GPUs: 8}},
		Jobs: []Job{
			{Namespace: "ml", ID: "gang", Tier: "training", Priority: 40, GPUs: 4, Count: 2, Running: []string{"n1", "n1"}, RanFor: 2 * time.Hour, Gang: true},
			{Namespace: "ml", ID: "nb", Tier: "interactive", Priority: 60, GPUs: 4, Count: 1, WaitedFor: time.Second},
		},
		Next: []string{
			"job ml/gang priority=40 preemptions=1",
			"job ml/nb priority=60",
			"run ml/gang/work on n1 ×2 (4 GPUs) draining",
			"wait ml/nb/work ×1 (4 GPUs) held",
		},
		Want: []string{
			"job ml/gang priority=40 preemptions=1",
			"job ml/nb priority=60",
			"run ml/nb/work on n1 ×1 (4 GPUs)",
			"wait ml/gang/work ×2 (4 GPUs) held preempted",
		},
	},
	{
		Name:  "resume: the beneficiary held while its victim drains goes ahead of the queue once it stopped",
		Kind:  engine.Resume,
		Nodes: []Node{{ID: "n1", GPUs: 4}},
		Jobs: []Job{
			{Namespace: "ml", ID: "train", Tier: "training", Priority: 40, GPUs: 4, Count: 1, Running: []string{"n1"}, RanFor: 2 * time.Hour},
			{Namespace: "ml", ID: "nb", Tier: "interactive", Priority: 60, GPUs: 4, Count: 1, WaitedFor: time.Second},
		},
		Next: []string{
			"job ml/nb priority=60",
			"job ml/train priority=40 preemptions=1",
			"run ml/train/work on n1 ×1 (4 GPUs) draining",
			"wait ml/nb/work ×1 (4 GPUs) held",
		},
		Want: []string{
			"job ml/nb priority=60",
			"job ml/train priority=40 preemptions=1",
			"run ml/nb/work on n1 ×1 (4 GPUs)",
			"wait ml/train/work ×1 (4 GPUs) held preempted",
		},
	},
	{
		Name:  "idle-stop: an idle notebook stopped for good, its GPUs free",
		Kind:  engine.IdleStop,
		Nodes: []Node{{ID: "n1", GPUs: 4}},
		Jobs: []Job{
			{Namespace: "ml", ID: "nb", Tier: "interactive", Priority: 60, GPUs: 2, Count: 1, Running: []string{"n1"}, RanFor: 2 * time.Hour, Idle: true},
		},
		Want: nil,
	},
	{
		Name:  "hold: work beyond its tenant's limit held, not placed",
		Kind:  engine.Hold,
		Nodes: []Node{{ID: "n1", GPUs: 8}},
		Jobs: []Job{
			{Namespace: "capped", ID: "big", Tier: "training", Priority: 40, GPUs: 2, Count: 2, Running: []string{"n1"}, RanFor: time.Hour, WaitedFor: time.Minute},
		},
		Next: []string{
			"job capped/big priority=40",
			"run capped/big/work on n1 ×1 (2 GPUs)",
			"wait capped/big/work ×1 (2 GPUs) held",
		},
		Want: []string{
			"job capped/big priority=40",
			"run capped/big/work on n1 ×1 (2 GPUs)",
			"wait capped/big/work ×1 (2 GPUs) held",
		},
	},
	{
		Name:  "hold a whole job: a new job beyond its tenant's limit held, not placed",
		Kind:  engine.Hold,
		Nodes: []Node{{ID: "n1", GPUs: 8}},
		Jobs: []Job{
			{Namespace: "capped", ID: "first", Tier: "training", Priority: 40, GPUs: 2, Count: 1, Running: []string{"n1"}, RanFor: time.Hour},
			{Namespace: "capped", ID: "second", Tier: "training", Priority: 40, GPUs: 2, Count: 1, WaitedFor: time.Second},
		},
		Next: []string{
			"job capped/first priority=40",
			"job capped/second priority=40",
			"run capped/first/work on n1 ×1 (2 GPUs)",
			"wait capped/second/work ×1 (2 GPUs) held",
		},
		Want: []string{
			"job capped/first priority=40",
			"job capped/second priority=40",
			"run capped/first/work on n1 ×1 (2 GPUs)",
			"wait capped/second/work ×1 (2 GPUs) held",
		},
	},
	{
		Name:  "promote: work waiting past after_wait gets its tier's priority and the boost",
		Kind:  engine.Promote,
		Nodes: []Node{{ID: "n1", GPUs: 2}},
		Jobs: []Job{
			{Namespace: "ml", ID: "nb", Tier: "interactive", Priority: 60, GPUs: 2, Count: 1, Running: []string{"n1"}, RanFor: 3 * time.Hour},
			{Namespace: "ml", ID: "train", Tier: "training", Priority: 40, GPUs: 2, Count: 1, WaitedFor: 2 * time.Hour},
		},
		Next: []string{
			"job ml/nb priority=60",
			"job ml/train priority=50 promoted",
			"run ml/nb/work on n1 ×1 (2 GPUs)",
			"wait ml/train/work ×1 (2 GPUs) held",
		},
		Want: []string{
			"job ml/nb priority=60",
			"job ml/train priority=50 promoted",
			"run ml/nb/work on n1 ×1 (2 GPUs)",
			"wait ml/train/work ×1 (2 GPUs) held",
		},
	},
	{
		Name:  "set-priority: a job whose priority is not its tier's gets its tier's",
		Kind:  engine.SetPriority,
		Nodes: []Node{{ID: "n1", GPUs: 2}},
		Jobs: []Job{
			{Namespace: "ml", ID: "train", Tier: "training", Priority: 70, GPUs: 2, Count: 1, Running: []string{"n1"}, RanFor: time.Hour},
		},
		Next: []string{
			"job ml/train priority=40",
			"run ml/train/work on n1 ×1 (2 GPUs)",
		},
		Want: []string{
			"job ml/train priority=40",
			"run ml/train/work on n1 ×1 (2 GPUs)",
		},
	},
	{
		Name:  "move: waiting work goes to the next node pool of its precedence with room, and is placed there",
		Kind:  engine.Move,
		Nodes: []Node{{ID: "n1", GPUs: 2, Pool: "onprem"}, {ID: "c1", GPUs: 2, Pool: "cloud"}},
		Jobs: []Job{
			{Namespace: "ml", ID: "nb", Tier: "interactive", Priority: 60, GPUs: 2, Count: 1, Running: []string{"n1"}, RanFor: time.Hour, Pool: "onprem"},
			{Namespace: "ml", ID: "train", Tier: "training", Priority: 40, GPUs: 2, Count: 1, WaitedFor: time.Minute, Pool: "onprem"},
		},
		Next: []string{
			"job ml/nb priority=60",
			"job ml/train priority=40",
			"run ml/nb/work on n1 ×1 (2 GPUs)",
			"run ml/train/work on c1 ×1 (2 GPUs)",
		},
		Want: []string{
			"job ml/nb priority=60",
			"job ml/train priority=40",
			"run ml/nb/work on n1 ×1 (2 GPUs)",
			"run ml/train/work on c1 ×1 (2 GPUs)",
		},
	},
}

// State is what a case compares of a snapshot: each job's priority,
// promotion and preemptions, its running allocations by node, and its
// waiting work; sorted. Allocation IDs, GPU IDs and times are left out:
// each side names them its own way.
func State(s *engine.Snapshot) []string {
	var out []string
	jobs := map[engine.JobRef]engine.Job{}
	run := map[string]int{}
	for _, a := range s.Allocs {
		jobs[a.Job.Ref] = a.Job
		k := fmt.Sprintf("run %s/%s on %s ×%%d (%d GPUs)", a.Job.Ref, a.Group, a.NodeID, len(a.GPUIDs))
		if a.Draining {
			k += " draining"
		}
		run[k]++
	}
	for k, n := range run {
		out = append(out, fmt.Sprintf(k, n))
	}
	for _, d := range s.Waiting {
		jobs[d.Job.Ref] = d.Job
		var b strings.Builder
		fmt.Fprintf(&b, "wait %s/%s ×%d (%d GPUs)", d.Job.Ref, d.Group, d.Count, d.GPUsPerAlloc)
		if p := d.NodePool; p != "" && p != "default" {
			fmt.Fprintf(&b, " pool=%s", p)
		}
		for _, f := range []struct {
			on   bool
			name string
		}{{d.Held, "held"}, {d.Requeued, "requeued"}, {d.OwnerResumed, "owner-resumed"}, {d.Preempted, "preempted"}} {
			if f.on {
				b.WriteString(" " + f.name)
			}
		}
		out = append(out, b.String())
	}
	for ref, j := range jobs {
		line := fmt.Sprintf("job %s priority=%d", ref, j.Priority)
		if j.Promoted {
			line += " promoted"
		}
		if n := max(len(j.Preemptions), j.PreemptionsTotal); n > 0 {
			line += fmt.Sprintf(" preemptions=%d", n)
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}

// Kinds lists the kinds of a plan's actions.
func Kinds(p *engine.Plan) []engine.Kind {
	var out []engine.Kind
	for _, a := range p.Actions {
		out = append(out, a.Kind)
	}
	return out
}
