package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// Issue 29, item 2: system and sysbatch GPU jobs are governed like any
// job, whole (systemjobs.go). Before, the controller left them out: their
// GPUs counted as free, never limited, preempted or idle-reclaimed.

const sysPolicyBase = `
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
}
preemption {
  min_runtime       = "0s"
  grace             = "2m"
  checkpoint_signal = "SIGUSR1"
}
`

func sysPolicy(t *testing.T, extra string) *policy.Policy {
	t.Helper()
	p, diags := policy.ParseBytes("test.hcl", []byte(sysPolicyBase+extra))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	return p
}

// apiSystemJob is a system (or sysbatch) job of tenant ns with one GPU
// group "work" of gpus per node: count 1, on every node.
func apiSystemJob(ns, id, typ string, priority, gpus int) *api.Job {
	j := apiJob(ns, id, "training", priority, 1, gpus)
	j.Type = &typ
	return j
}

// sysNodes: two nodes of 2 GPUs each; the system job's allocations, one
// per node, on the first GPU of each.
func sysNodes(cl *fakeCluster, j *api.Job, started time.Time) {
	cl.nodes = []*api.NodeListStub{apiNode("n1", 2), apiNode("n2", 2)}
	cl.jobs[*j.Namespace+"/"+*j.ID] = j
	cl.allocs = append(cl.allocs,
		apiAlloc("a-"+*j.ID+"-n1", j, "n1", []string{"n1-gpu0"}, started),
		apiAlloc("a-"+*j.ID+"-n2", j, "n2", []string{"n2-gpu0"}, started))
}

func TestSystemJobsGoverned(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy string
		typ    string
		prio   int
		setup  func(cl *fakeCluster)
		idle   bool // sweep the GPUs at 1% utilisation 20 minutes before
		want   []string
		after  func(t *testing.T, r *roundRunner)
	}{
		{
			name:   "limit holds a system job whole",
			policy: `tenant "a" { limit = 1 }`,
			typ:    api.JobTypeSystem, prio: 40,
			want: []string{
				"signal a a-sys-n1 SIGUSR1", "signal a a-sys-n2 SIGUSR1",
				"scale a/sys work 0: Steward preempts 2 allocations: tenant a holds 2 GPUs, limit 1: giving back 2",
			},
		},
		{
			name:   "a system job's priority is reset to its tier's",
			policy: `tenant "a" {}`,
			typ:    api.JobTypeSystem, prio: 100,
			want: []string{"priority a/sys 40"},
		},
		{
			name:   "a system job is preempted whole for another tenant's reserve",
			policy: `tenant "a" {}` + "\n" + `tenant "b" { reserve = 4 }`,
			typ:    api.JobTypeSystem, prio: 40,
			setup: func(cl *fakeCluster) {
				big := apiJob("b", "big", "training", 40, 2, 2)
				cl.jobs["b/big"] = big
				ev, sum := apiBlockedEval(big, 2, t0.Add(-time.Second))
				cl.evals, cl.summary["b/big"] = []*api.Evaluation{ev}, sum
			},
			want: []string{
				"signal a a-sys-n1 SIGUSR1", "signal a a-sys-n2 SIGUSR1",
				"scale a/sys work 0: Steward preempts 2 allocations:",
			},
			after: func(t *testing.T, r *roundRunner) {
				if n := r.running("b", "big"); n != 2 {
					t.Errorf("b/big runs %d allocations, want 2", n)
				}
				var h *Held
				if st := r.c.states()[jobKey{"a", "sys"}]; st != nil {
					h = st.Held["work"]
				}
				if h == nil || h.Count != 2 || h.Original != 2 {
					t.Errorf("a/sys held %+v, want both allocations held", h)
				}
			},
		},
		{
			name: "idle reclaim of a sysbatch job",
			policy: `tenant "a" {}
idle "daemons" {
  tiers     = ["training"]
  threshold = 10
  after     = "15m"
  mode      = "always"
}`,
			typ: api.JobTypeSysbatch, prio: 40, idle: true,
			want: []string{"scale a/sys work 0: Steward"},
			after: func(t *testing.T, r *roundRunner) {
				if n := r.running("a", "sys"); n != 0 {
					t.Errorf("a/sys still runs %d allocations", n)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cl := f.cl()
			sys := apiSystemJob("a", "sys", tc.typ, tc.prio, 1)
			sysNodes(cl, sys, t0.Add(-time.Hour))
			if tc.setup != nil {
				tc.setup(cl)
			}
			r := newRoundRunner(t, f)
			p := sysPolicy(t, tc.policy)
			r.c.pol, r.c.eng = p, engine.New(p)
			if tc.idle {
				cl.stats["n1"] = gpuStats([]string{"n1-gpu0", "n1-gpu1"}, 1)
				cl.stats["n2"] = gpuStats([]string{"n2-gpu0", "n2-gpu1"}, 1)
				if _, err := r.round(-20 * time.Minute); err != nil { // finds the nodes to sweep
					t.Fatal(err)
				}
				r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
				r.clock = t0
				r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
			}
			var all []string
			for _, at := range []time.Duration{0, signalDelay, signalDelay + 2*time.Minute, signalDelay + 2*time.Minute + time.Second,
				signalDelay + 2*time.Minute + 2*time.Second} {
				w, err := r.round(at)
				if err != nil {
					t.Fatalf("round at %s: %v", at, err)
				}
				all = append(all, w...)
			}
			for _, want := range tc.want {
				if !slices.ContainsFunc(all, func(w string) bool { return strings.HasPrefix(w, want) }) {
					t.Errorf("no write %q in\n%s", want, strings.Join(all, "\n"))
				}
			}
			if tc.after != nil {
				tc.after(t, r)
			}
		})
	}
}

// A system job's GPUs count in its tenant's In Use (steward plan reads
// the same plan as the controller), per node it runs on.
func TestSystemJobInUse(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  string
		gpus int
		want int
	}{
		{"system job, 1 GPU on each of 2 nodes", api.JobTypeSystem, 1, 2},
		{"sysbatch job, 2 GPUs on each of 2 nodes", api.JobTypeSysbatch, 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cl := f.cl()
			j := apiSystemJob("a", "sys", tc.typ, 40, tc.gpus)
			cl.nodes = []*api.NodeListStub{apiNode("n1", 2), apiNode("n2", 2)}
			cl.jobs["a/sys"] = j
			cl.schedule(t0)
			r := newRoundRunner(t, f)
			p := sysPolicy(t, `tenant "a" {}`)
			r.c.pol, r.c.eng = p, engine.New(p)
			plan, err := r.c.PlanOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := -1
			for _, u := range plan.Tenants {
				if u.Tenant == "a" {
					got = u.InUse
				}
			}
			if got != tc.want {
				t.Fatalf("tenant a In Use %d, want %d (%+v)", got, tc.want, plan.Tenants)
			}
		})
	}
}

// job check plans a system job as Nomad would place it: its per-node
// count on every node it fits, as one gang.
func TestJobCheckSystemJob(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     string
		limit   string
		count   int
		verdict string
	}{
		{"system job over its tenant's limit waits", api.JobTypeSystem, "limit = 1", 2, VerdictWait},
		{"system job within its tenant's limit runs", api.JobTypeSystem, "limit = 2", 2, VerdictRun},
		{"sysbatch job over its tenant's limit waits", api.JobTypeSysbatch, "limit = 1", 2, VerdictWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := sysPolicy(t, fmt.Sprintf(`tenant "a" { %s }`, tc.limit))
			nodes := []ObservedNode{{ID: "n1", Name: "n1", NodePool: "default", GPUs: 2}, {ID: "n2", Name: "n2", NodePool: "default", GPUs: 2}}
			base := buildSnapshot(p, &Observation{At: t0, Nodes: nodes, Jobs: map[jobKey]*ObservedJob{}}, nil, nil)
			j := job("a", "sys", "training", 100, 1, 1)
			j.Type = tc.typ
			res := checkJob(p, engine.New(p), base, newDeviceMatcher(nodes), j, nil, t0)
			if len(res.Groups) != 1 {
				t.Fatalf("groups %+v", res.Groups)
			}
			g := res.Groups[0]
			if g.Count != tc.count || g.Verdict != tc.verdict || !res.Gang || res.Priority != 40 {
				t.Fatalf("check: count %d verdict %s (%s) gang %v priority %d; want count %d verdict %s, gang, priority 40",
					g.Count, g.Verdict, g.Reason, res.Gang, res.Priority, tc.count, tc.verdict)
			}
		})
	}
}
