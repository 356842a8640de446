package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

const checkPolicyText = `
tier "interactive" {
  priority = 60
}
tier "training" {
  priority = 40
}
tenant "ml" {
  reserve = 2
  limit   = 6
}
tenant "rnd" {
  reserve = 0
}
preemption {
  min_runtime       = "0s"
  grace             = "2m"
  checkpoint_signal = "SIGUSR1"
}
`

// TestCheckJob: `steward job check` plans the job as new waiting work on
// the latest snapshot and reports, per group, run, preempt whom, or wait
// and why; other tenants' victims are named by tenant and tier only.
func TestCheckJob(t *testing.T) {
	pol, diags := policy.ParseBytes("check.hcl", []byte(checkPolicyText))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	eng := engine.New(pol)
	alloc := func(id, ns, job, tier string, gpus ...string) engine.Alloc {
		return engine.Alloc{ID: id, Job: engine.Job{Ref: engine.JobRef{Namespace: ns, ID: job}, Tier: tier, Priority: pol.Tiers[tier].Priority},
			Group: "work", NodeID: "n1", GPUIDs: gpus, StartedAt: t0.Add(-time.Hour)}
	}
	base := &engine.Snapshot{
		Nodes: []engine.Node{{ID: "n1", NodePool: "default", GPUs: 8}},
		Allocs: []engine.Alloc{
			alloc("a1", "rnd", "train", "training", "g0", "g1", "g2", "g3"),
			alloc("a2", "ml", "serve", "interactive", "g4", "g5"),
		},
	}
	cases := []struct {
		name        string
		ns          string // default ml
		tier        string
		count, gpus int
		wantVerdict string
		wantReason  string
		wantVictim  *CheckVictim
		wantProblem string
	}{
		{name: "free GPUs fit it: runs", tier: "interactive", count: 1, gpus: 2, wantVerdict: VerdictRun},
		{name: "over its tenant's limit: waits", tier: "interactive", count: 1, gpus: 6, wantVerdict: VerdictWait,
			wantReason: "tenant ml holds 2 GPUs, limit 6: 6 more would exceed it"},
		{name: "needs GPUs of a lower tier over its reserve: preempts", tier: "interactive", count: 1, gpus: 4,
			wantVerdict: VerdictPreempt, wantVictim: &CheckVictim{Tenant: "rnd", Tier: "training", GPUs: 4, Kind: "preempt", Signal: "SIGUSR1", Grace: 2 * time.Minute}},
		{name: "larger than any node: waits", ns: "rnd", tier: "training", count: 1, gpus: 9, wantVerdict: VerdictWait,
			wantReason: "needs 9 GPUs on one node; the largest node has 8"},
		{name: "a typo'd tier is named and runs as the default", tier: "interactiv", count: 1, gpus: 1, wantVerdict: VerdictRun,
			wantProblem: `tier "interactiv" is not defined (did you mean interactive?): runs as training`},
		{name: "a group without GPUs is Nomad's", tier: "training", count: 1, gpus: 0, wantVerdict: VerdictNoGPUs},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.ns
			if ns == "" {
				ns = "ml"
			}
			j := job(ns, "new", tc.tier, 50, tc.count, tc.gpus)
			res := checkJob(pol, eng, base, newDeviceMatcher(nil), j, nil, t0)
			if len(res.Groups) != 1 {
				t.Fatalf("groups %+v", res.Groups)
			}
			g := res.Groups[0]
			if g.Verdict != tc.wantVerdict || !strings.Contains(g.Reason, tc.wantReason) {
				t.Errorf("verdict %s (%s), want %s (%s)", g.Verdict, g.Reason, tc.wantVerdict, tc.wantReason)
			}
			if tc.wantVictim != nil {
				if len(g.Victims) != 1 {
					t.Fatalf("victims %+v", g.Victims)
				}
				v := g.Victims[0]
				v.Reason = ""
				if v != *tc.wantVictim {
					t.Errorf("victim %+v, want %+v (another tenant's job is not named)", v, *tc.wantVictim)
				}
			}
			if tc.wantProblem != "" && (len(res.Problems) != 1 || res.Problems[0] != tc.wantProblem) {
				t.Errorf("problems %q, want %q", res.Problems, tc.wantProblem)
			}
			if res.Tenant != ns || res.SpecPriority != 50 || res.Priority != pol.Tiers[res.Tier].Priority {
				t.Errorf("result %+v", res)
			}
		})
	}
}
