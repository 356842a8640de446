package controller

import (
	"context"
	"fmt"
	"slices"
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
	p, diags := policy.ParseBytes("contract.hcl", []byte(contract.Policy))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	for _, tc := range contract.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			if !contract.Start.Equal(t0) {
				t.Fatalf("contract.Start %s is not the controller tests' t0 %s", contract.Start, t0)
			}
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
			var kinds []engine.Kind
			for i, after := range contract.Rounds {
				if _, err := r.round(after); err != nil {
					t.Fatalf("round at %s: %v", after, err)
				}
				// The round's plan: the engine is deterministic, so
				// planning again on the snapshot the round planned on
				// gives it.
				if base := r.c.lastCheck; base != nil && base.at.Equal(t0.Add(after)) {
					kinds = append(kinds, contract.Kinds(r.c.eng.Plan(base.snap, base.at))...)
					if got := contract.State(base.snap); contract.PlansOnNext(i) && !slices.Equal(got, tc.Next) {
						t.Errorf("state round %d plans on:\n got  %q\n want %q", i, got, tc.Next)
					}
				}
			}
			if !slices.Contains(kinds, tc.Kind) {
				t.Errorf("no %s in the plans: %v", tc.Kind, kinds)
			}
			capture, _, err := r.c.CaptureOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := contract.State(capture.Snapshot); !slices.Equal(got, tc.Want) {
				t.Errorf("state after the rounds:\n got  %q\n want %q", got, tc.Want)
			}
		})
	}
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
