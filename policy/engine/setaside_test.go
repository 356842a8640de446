package engine_test

import (
	"fmt"
	"github.com/gpu-steward/steward/policy/engine"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestFairShareSetAside: tenant b fills two 8-GPU nodes with 1-GPU jobs
// and queues sixteen more; tenant a, borrowing nothing, waits for one 8-GPU
// allocation. b's jobs end one at a time, from either node in turn. Without
// a node set aside, each GPU that frees goes to b's next job (it fits; a's
// does not), and a never runs while b has work queued: the tenant that
// borrows most keeps borrowing. With it, the node with the most GPUs free
// is kept for a, and a runs once a node is empty. (The harness places
// first fit, as Nomad does not: a job of b resumed for n1 may land on n0,
// so a's node is empty only after the last end.)
func TestFairShareSetAside(t *testing.T) {
	cases := []struct {
		name string
		mod  func(p *policy.Policy)
		// aHolds: a already runs this many GPUs on a third node.
		aHolds int
		// runsAt: the end of b's job after which a runs (1-based); 0:
		// a waits through all sixteen.
		runsAt int
		// reason: a's waiting reason after the first end.
		reason string
	}{
		{
			name: "an 8-GPU demand gets the node the small jobs leave", runsAt: 16,
			reason: "capacity: needs 8 GPUs on one node in any node; none free, and nothing may be preempted for tier training " +
				"(priority 40) of tenant a (holds 0, reserve 0); set aside for it, as it ranks ahead of tenants that borrow as much " +
				"per unit of weight as its tenant would with it: n0 (1 of 8 GPUs free)",
		},
		{
			// a ranks first (it borrows 9, b 15), but with its 8 more it
			// would borrow more than b: holding GPUs idle for it would
			// only make a the one that borrows more.
			name:   "a tenant that would then borrow more than the other gets no node set aside",
			aHolds: 9,
			reason: "capacity: needs 8 GPUs on one node in any node; none free, and nothing may be preempted for tier training " +
				"(priority 40) of tenant a (holds 9, reserve 0)",
		},
		{
			name: "off without fair share over time",
			mod:  func(p *policy.Policy) { p.Preemption.FairShareHalfLife = 0 },
			reason: "capacity: needs 8 GPUs on one node in any node; none free, and nothing may be preempted for tier training " +
				"(priority 40) of tenant a (holds 0, reserve 0)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testPolicy(func(p *policy.Policy) {
				p.Tenants["a"] = tenant("a", 0, policy.Unlimited)
				p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
				p.Preemption.Promote.AfterWait = 0 // a waits for GPUs to free, not for a promotion
				p.Preemption.FairShareHalfLife = 24 * time.Hour
				if tc.mod != nil {
					tc.mod(p)
				}
			}))
			h.node("n0", "default", 8)
			h.node("n1", "default", 8)
			if tc.aHolds > 0 {
				h.node("n2", "default", tc.aHolds)
				h.submit("a", "held", "training", tc.aHolds, 1)
			}
			for i := range 16 {
				h.submit("b", fmt.Sprintf("run%d", i), "training", 1, 1) // first fit: run0-7 on n0, run8-15 on n1
			}
			for i := range 16 {
				h.submit("b", fmt.Sprintf("queued%d", i), "training", 1, 1)
			}
			h.submit("a", "big", "training", 8, 1)
			h.step()
			runsAt := 0
			for i := range 16 {
				// n0 and n1 in turn: run0, run8, run1, run9, ...
				h.finish("b", fmt.Sprintf("run%d", i/2+8*(i%2)))
				h.advance(10 * time.Minute)
				plan := h.step()
				if i == 0 {
					why := ""
					for _, w := range plan.Waiting {
						if w.Job == (engine.JobRef{"a", "big"}) {
							why = w.Reason.String()
						}
					}
					if why != tc.reason {
						t.Fatalf("a/big waits:\n got  %q\n want %q", why, tc.reason)
					}
				}
				if runsAt == 0 && slices.Contains(h.running(), "a/big×1") {
					runsAt = i + 1
				}
			}
			if runsAt != tc.runsAt {
				t.Fatalf("a/big runs after end %d, want %d (running %v)", runsAt, tc.runsAt, h.running())
			}
		})
	}
}

// TestSetAsideOwnWork: tenant b borrows two full nodes; tenant a, below its
// share, waits with a 2×8 gang and then smaller work. When a third node
// empties, it is set aside for the gang (it ranks first), which still
// waits for a second node. a's own later allocation as large runs there
// rather than the GPUs sitting idle for a (on pressured Philly with
// docs/sim/four-teams-fair.hcl, 38 hours for team-a's gang while its 1×8
// job waited); a smaller one does not nibble the node, and b's work,
// ranked after a, stays off it as before.
func TestSetAsideOwnWork(t *testing.T) {
	cases := []struct {
		name      string
		ns, id    string // the later work
		gpus      int
		runs      bool
		gangWaits string // the tail of the gang's waiting reason
	}{
		{name: "its tenant's own 8-GPU job takes the node set aside for its gang", ns: "a", id: "one", gpus: 8, runs: true,
			gangWaits: "n0 (8 of 8 GPUs free); then a/one/main of the same tenant took 8 GPUs of them on n0, an allocation as large"},
		{name: "its tenant's smaller job does not nibble it", ns: "a", id: "small", gpus: 4,
			gangWaits: "n0 (8 of 8 GPUs free)"},
		{name: "another tenant's job ranked after stays off it", ns: "b", id: "more", gpus: 8,
			gangWaits: "n0 (8 of 8 GPUs free)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testPolicy(func(p *policy.Policy) {
				p.Tenants["a"] = tenant("a", 0, policy.Unlimited)
				p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
				p.Preemption.Promote.AfterWait = 0
				p.Preemption.FairShareHalfLife = 24 * time.Hour
			}))
			for _, n := range []string{"n0", "n1", "n2"} {
				h.node(n, "default", 8)
			}
			for _, n := range []string{"n0", "n1", "n2"} {
				h.submit("b", "on-"+n, "training", 8, 1) // first fit: one a node
			}
			h.submit("a", "gang", "training", 8, 2, gang())
			h.advance(time.Minute)
			h.submit(tc.ns, tc.id, "training", tc.gpus, 1)
			h.step()
			h.finish("b", "on-n0")
			h.advance(10 * time.Minute)
			plan := h.step()
			ran := slices.Contains(h.running(), tc.ns+"/"+tc.id+"×1")
			if ran != tc.runs {
				t.Errorf("%s/%s runs: %v, want %v (running %v)", tc.ns, tc.id, ran, tc.runs, h.running())
			}
			why := ""
			for _, w := range plan.Waiting {
				if w.Job == (engine.JobRef{Namespace: "a", ID: "gang"}) {
					why = w.Reason.String()
				}
			}
			if !strings.HasSuffix(why, tc.gangWaits) {
				t.Errorf("a/gang waits:\n got  %q\n want it to end %q", why, tc.gangWaits)
			}
		})
	}
}
