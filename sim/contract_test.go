package sim

import (
	"container/heap"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel/contract"
)

// TestContract runs the contract of the one model of Nomad
// (policy/nomadmodel/contract) against the simulator's way of carrying
// out plans (settleSteward, apply, the grace ends and placeQueued): each
// case's start state built as simulator jobs, the simulator's own event
// loop between the contract's rounds, and a plan at each round (the
// controller plans every round). What the simulator cannot express is
// passed over with its reason logged; every other case must end where the
// controller's roundRunner over its fake Nomad ends (controller
// TestContract).
func TestContract(t *testing.T) {
	ran := contract.Run(t, func(t *testing.T, p *policy.Policy, tc contract.Case) (contract.Side, string) {
		if why := simCannot(tc); why != "" {
			return nil, why
		}
		cs := buildContract(t, p, tc)
		cs.s.watch = func(a engine.Action) { cs.kinds = append(cs.kinds, a.Kind) }
		return cs, ""
	})
	// At least one case per kind the simulator carries out: a case passed
	// over for the wrong reason must not empty the test.
	if ran < len(contract.Cases)-2 {
		t.Errorf("%d of %d contract cases ran against the simulator", ran, len(contract.Cases))
	}
}

// simCannot says why the simulator cannot express a case, or "".
func simCannot(tc contract.Case) string {
	for _, n := range tc.Nodes {
		if n.Pool != "" {
			return "the simulator's nodes are all in one node pool: it has no Move (the model's TestContract and TestPlace cover pools)"
		}
	}
	for _, j := range tc.Jobs {
		if len(j.Running) > 0 && len(j.Running) < j.Count {
			return "the simulator runs a job's allocations all or none: a group partly placed is not a simulator state"
		}
		if j.Count > 1 && !j.Gang {
			return "the simulator's jobs of more than one allocation are gangs"
		}
	}
	return ""
}

// contractSim is a contract case's start state in the simulator: the
// contract's Start is virtual time start.
type contractSim struct {
	s     *simulator
	start time.Duration
	// node is the contract's node ID of each simulator node.
	node map[string]string
	// kinds are the kinds of the actions planned in the current round.
	kinds []engine.Kind
}

// Round runs the simulator's own event loop up to round i, then plans
// there (the controller plans every round).
func (cs *contractSim) Round(t *testing.T, i int) (planned []string, kinds []engine.Kind) {
	cs.kinds = nil
	cs.runTo(t, cs.start+contract.Rounds[i])
	planned = cs.state()
	cs.round(t)
	return planned, cs.kinds
}

func (cs *contractSim) End(*testing.T) []string { return cs.state() }

func buildContract(t *testing.T, p *policy.Policy, tc contract.Case) *contractSim {
	t.Helper()
	// Virtual time starts before the longest history of a case's jobs.
	var start time.Duration
	for _, j := range tc.Jobs {
		start = max(start, j.RanFor, j.WaitedFor)
	}
	start += time.Hour
	cfg := Config{Policy: p}
	nodeIx := map[string]int{}
	for i, n := range tc.Nodes {
		cfg.NodeGPUs = append(cfg.NodeGPUs, n.GPUs)
		nodeIx[n.ID] = i
	}
	// The simulator takes its jobs in submission order: those running
	// from when they started, the waiting ones from when they queued.
	type setup struct {
		at  time.Duration
		job contract.Job
	}
	var order []setup
	for _, j := range tc.Jobs {
		at := start - j.WaitedFor
		if len(j.Running) > 0 {
			at = start - j.RanFor
		}
		order = append(order, setup{at, j})
	}
	sort.SliceStable(order, func(a, b int) bool { return order[a].at < order[b].at })
	var jobs []Job
	for _, o := range order {
		idle := NeverIdle
		if o.job.Idle {
			idle = 0
		}
		jobs = append(jobs, Job{ID: o.job.ID, Tenant: o.job.Namespace, Tier: o.job.Tier, Submit: o.at,
			GPUs: o.job.GPUs, Allocs: o.job.Count, RunTime: 1000 * time.Hour, IdleAfter: idle})
	}
	s, err := newSimulator(jobs, cfg, Steward)
	if err != nil {
		t.Fatal(err)
	}
	cs := &contractSim{s: s, start: start, node: map[string]string{}}
	for id, n := range nodeIx {
		cs.node[s.cl.nodeIDs[n]] = id
	}
	for i, o := range order {
		ji := int32(i)
		s.m.advance(s.now, o.at)
		s.now = o.at
		s.jobs[ji].priority = o.job.Priority // as the job was submitted
		if len(o.job.Running) == 0 {
			s.arrive(ji)
			continue
		}
		// Placed before the contract's rounds: it runs where the case
		// says.
		var nodes []int
		for _, n := range o.job.Running {
			nodes = append(nodes, nodeIx[n])
		}
		s.jobs[ji].waitSince = s.now
		s.setState(ji, queued)
		s.start(ji, nodes)
	}
	s.nextArrival = len(s.jobs)
	s.arrived = s.arrived[:0]
	return cs
}

// runTo runs the simulator's own event loop up to to (grace ends,
// completions, wake-ups), reacting at each instant from the contract's
// start on as the simulator does; before it, the case's history only
// passes.
func (cs *contractSim) runTo(t *testing.T, to time.Duration) {
	t.Helper()
	s := cs.s
	for len(s.events) > 0 && s.events[0].at <= to {
		at := s.events[0].at
		if at > s.now {
			s.m.advance(s.now, at)
			s.now = at
		}
		for len(s.events) > 0 && s.events[0].at == at {
			s.handle(heap.Pop(&s.events).(event))
		}
		if at >= cs.start {
			if err := s.settle(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.m.advance(s.now, to)
	s.now = to
}

// round is one controller round at now: the engine plans whatever
// waits (the controller plans every round).
func (cs *contractSim) round(t *testing.T) {
	t.Helper()
	cs.s.wantPlan, cs.s.forcePlan = true, true
	if err := cs.s.settle(); err != nil {
		t.Fatal(err)
	}
}

// state is contract.State of the simulator's snapshot, its nodes and
// groups named as the case names them.
func (cs *contractSim) state() []string {
	snap := *cs.s.snapshot()
	snap.Allocs = slices.Clone(snap.Allocs)
	for i := range snap.Allocs {
		snap.Allocs[i].NodeID = cs.node[snap.Allocs[i].NodeID]
		snap.Allocs[i].Group = contract.Group
	}
	snap.Waiting = slices.Clone(snap.Waiting)
	for i := range snap.Waiting {
		snap.Waiting[i].Group = contract.Group
	}
	return contract.State(&snap)
}
