package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel/contract"
)

// TestContract runs the contract of every model of Nomad
// (policy/nomadmodel/contract) against the controller: whole rounds over
// the fake Nomad, at the contract's times, and the state the engine then
// sees. The model (policy/nomadmodel) runs the same table.
func TestContract(t *testing.T) {
	if signalDelay != contract.SignalDelay {
		t.Fatalf("contract.SignalDelay is %s, the controller's signalDelay %s", contract.SignalDelay, signalDelay)
	}
	if !contract.Start.Equal(t0) {
		t.Fatalf("contract.Start %s is not the controller tests' t0 %s", contract.Start, t0)
	}
	contract.Run(t, func(t *testing.T, p *policy.Policy, tc contract.Case) (contract.Side, string) {
		f := newFakeNomad()
		ids := contractCluster(f, tc)
		r := newRoundRunner(t, f)
		r.c.pol, r.c.eng = p, engine.New(p)
		for _, j := range tc.Jobs {
			if !j.Idle {
				continue
			}
			for _, id := range ids[j.Namespace+"/"+j.ID] {
				r.c.usage.add(id, engine.Sample{At: t0.Add(-j.RanFor), Util: 0})
				r.c.usage.add(id, engine.Sample{At: t0, Util: 0})
			}
		}
		return controllerSide{r}, ""
	})
}

// controllerSide is the controller under the contract: whole rounds over
// the fake Nomad.
type controllerSide struct{ r *roundRunner }

func (cs controllerSide) Round(t *testing.T, i int) (planned []string, kinds []engine.Kind) {
	after := contract.Rounds[i]
	if _, err := cs.r.round(after); err != nil {
		t.Fatalf("round at %s: %v", after, err)
	}
	// The round's plan: the engine is deterministic, so planning again on
	// the snapshot the round planned on gives it.
	base := cs.r.c.lastCheck
	if base == nil || !base.at.Equal(t0.Add(after)) {
		return nil, nil
	}
	return contract.State(base.snap), contract.Kinds(cs.r.c.eng.Plan(base.snap, base.at))
}

func (cs controllerSide) End(t *testing.T) []string {
	capture, _, err := cs.r.c.CaptureOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return contract.State(capture.Snapshot)
}

// contractCluster is a case's start state in the fake Nomad; it returns
// the running allocations' IDs by job ("ns/id").
func contractCluster(f *fakeNomad, tc contract.Case) map[string][]string {
	cl := f.cl()
	used := map[string]int{} // node: GPUs taken
	for _, n := range tc.Nodes {
		node := apiNode(n.ID, n.GPUs)
		if n.Pool != "" {
			node.NodePool = n.Pool
		}
		cl.nodes = append(cl.nodes, node)
	}
	ids := map[string][]string{}
	for _, j := range tc.Jobs {
		job := apiJob(j.Namespace, j.ID, j.Tier, j.Priority, j.Count, j.GPUs)
		if j.Pool != "" {
			job.NodePool = ptr(j.Pool)
		}
		if j.Gang {
			job.Meta[policy.DefaultGangMetaKey] = "true"
		}
		k := j.Namespace + "/" + j.ID
		cl.jobs[k] = job
		for i, n := range j.Running {
			var gpus []string
			for g := range j.GPUs {
				gpus = append(gpus, fmt.Sprintf("%s-gpu%d", n, used[n]+g))
			}
			used[n] += j.GPUs
			id := fmt.Sprintf("a-%s-%d", j.ID, i)
			a := apiAlloc(id, job, n, gpus, t0.Add(-j.RanFor))
			a.Name = fmt.Sprintf("%s.%s[%d]", j.ID, contract.Group, i)
			cl.allocs = append(cl.allocs, a)
			ids[k] = append(ids[k], id)
		}
		if queued := j.Count - len(j.Running); queued > 0 {
			ev, sum := apiBlockedEval(job, queued, t0.Add(-j.WaitedFor))
			cl.evals = append(cl.evals, ev)
			cl.summary[k] = sum
		}
	}
	return ids
}
