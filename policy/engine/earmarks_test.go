package engine_test

import (
	"github.com/gpu-steward/steward/policy/engine"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// GPUs freed for a beneficiary are its own until it runs: neither other
// work ranked above it nor the victim may take them, whether they are
// still draining or already given back.
func TestEarmarks(t *testing.T) {
	bene := engine.JobRef{"b", "bene"}
	running := func(id, ns string, gpus int, draining bool, forJob *engine.JobRef) engine.Alloc {
		ids := []string{}
		for i := range gpus {
			ids = append(ids, id+"-gpu"+strconv.Itoa(i))
		}
		return engine.Alloc{ID: id, Job: engine.Job{Ref: engine.JobRef{ns, id}, Priority: 40}, Group: "main", NodeID: "n1",
			GPUIDs: ids, StartedAt: t0.Add(-2 * time.Hour), Draining: draining, For: forJob}
	}
	waiting := func(ns, id string, prio int, held, preempted bool) engine.Demand {
		return engine.Demand{Job: engine.Job{Ref: engine.JobRef{ns, id}, Priority: prio, Tier: map[int]string{40: "training", 60: "interactive"}[prio]},
			Group: "main", GPUsPerAlloc: 1, Count: 1, Since: t0.Add(-time.Hour), Held: held, Preempted: preempted}
	}
	// Tenant a is within its reserve (ranked first); b borrows.
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["a"] = tenant("a", 4, policy.Unlimited)
		p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
	})
	tests := []struct {
		name     string
		snap     engine.Snapshot
		wantBene string // the beneficiary's fate: "resume", "admitted" (queued, no action) or "hold"
		wantNot  string // a job that must get no resume
	}{
		{
			name: "draining GPUs are the beneficiary's, not the held victim's",
			snap: engine.Snapshot{
				Nodes:   []engine.Node{{ID: "n1", GPUs: 1}},
				Allocs:  []engine.Alloc{running("victim", "a", 1, true, &bene)},
				Waiting: []engine.Demand{waiting("a", "victim", 40, true, true), waiting("b", "bene", 40, true, false)},
			},
			wantBene: "resume", wantNot: "a/victim",
		},
		{
			name: "GPUs given back stay the beneficiary's until it runs",
			snap: engine.Snapshot{
				Nodes:    []engine.Node{{ID: "n1", GPUs: 1}},
				Earmarks: []engine.Earmark{{NodeID: "n1", GPUs: 1, For: bene, ForGroup: "main"}},
				Waiting:  []engine.Demand{waiting("a", "victim", 40, true, true), waiting("b", "bene", 40, false, false)},
			},
			wantBene: "admitted", wantNot: "a/victim",
		},
		{
			name: "a higher tier does not take GPUs freed for lower work either",
			snap: engine.Snapshot{
				Nodes:    []engine.Node{{ID: "n1", GPUs: 1}},
				Earmarks: []engine.Earmark{{NodeID: "n1", GPUs: 1, For: bene, ForGroup: "main"}},
				Waiting:  []engine.Demand{waiting("a", "urgent", 60, true, false), waiting("b", "bene", 40, false, false)},
			},
			wantBene: "admitted", wantNot: "a/urgent",
		},
		{
			name: "an earmark for work that no longer waits is free to all",
			snap: engine.Snapshot{
				Nodes:    []engine.Node{{ID: "n1", GPUs: 1}},
				Earmarks: []engine.Earmark{{NodeID: "n1", GPUs: 1, For: engine.JobRef{"b", "gone"}, ForGroup: "main"}},
				Waiting:  []engine.Demand{waiting("a", "victim", 40, true, true), waiting("b", "bene", 40, true, false)},
			},
			wantBene: "hold-or-wait",
		},
		{
			name: "an earmark beyond the node's free GPUs is cut to them",
			snap: engine.Snapshot{
				Nodes:    []engine.Node{{ID: "n1", GPUs: 2}},
				Allocs:   []engine.Alloc{running("other", "c", 1, false, nil)},
				Earmarks: []engine.Earmark{{NodeID: "n1", GPUs: 5, For: bene, ForGroup: "main"}},
				Waiting:  []engine.Demand{waiting("b", "bene", 40, true, false)},
			},
			wantBene: "resume",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := engine.New(pol).Plan(&tc.snap, t0)
			got := "hold-or-wait"
			for _, a := range plan.Actions {
				if a.Job == bene && a.Kind == engine.Resume {
					got = "resume"
				}
				if a.Kind == engine.Resume && a.Job.String() == tc.wantNot {
					t.Errorf("%s resumed into GPUs set aside for %s: %s", tc.wantNot, bene, a)
				}
			}
			if got == "hold-or-wait" {
				got = "admitted"
				for _, w := range plan.Waiting {
					if w.Job == bene {
						got = "hold-or-wait"
					}
				}
			}
			if got != tc.wantBene {
				var lines []string
				for _, a := range plan.Actions {
					lines = append(lines, a.String())
				}
				for _, w := range plan.Waiting {
					lines = append(lines, "waiting "+w.Job.String()+": "+w.Reason.String())
				}
				t.Errorf("beneficiary: %s, want %s\n%s", got, tc.wantBene, strings.Join(lines, "\n"))
			}
			if len(plan.Skipped) > 0 {
				t.Errorf("skipped: %v", plan.Skipped)
			}
		})
	}
}

// A preemption that counts on free GPUs beside its victims' sets them
// aside too (Plan.Earmarks): otherwise other work takes them during the
// grace and the victims are stopped for nothing.
func TestEarmarksBesideVictims(t *testing.T) {
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["a"] = tenant("a", 4, policy.Unlimited)
		p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
	})
	snap := engine.Snapshot{
		Nodes: []engine.Node{{ID: "n1", GPUs: 3}, {ID: "n2", GPUs: 1}},
		Allocs: []engine.Alloc{{ID: "v", Job: engine.Job{Ref: engine.JobRef{"b", "victim"}, Priority: 40, Tier: "training"}, Group: "main",
			NodeID: "n1", GPUIDs: []string{"g0"}, StartedAt: t0.Add(-2 * time.Hour)}},
		Waiting: []engine.Demand{{Job: engine.Job{Ref: engine.JobRef{"a", "bene"}, Priority: 40, Tier: "training"}, Group: "main",
			GPUsPerAlloc: 3, Count: 1, Since: t0.Add(-time.Minute), Held: true}},
	}
	plan := engine.New(pol).Plan(&snap, t0)
	want := []engine.Earmark{{NodeID: "n1", GPUs: 2, For: engine.JobRef{"a", "bene"}, ForGroup: "main"}}
	if !slices.Equal(plan.Earmarks, want) {
		var lines []string
		for _, a := range plan.Actions {
			lines = append(lines, a.String())
		}
		t.Errorf("earmarks %v, want %v\n%s", plan.Earmarks, want, strings.Join(lines, "\n"))
	}
}

// A beneficiary Nomad has queued (not held) would be placed on the first
// GPUs anyone frees while its victims checkpoint, GPUs freed for other work
// among them: it waits held (RuleDraining) and resumes as they stop. Work
// whose victims stop at once (an urgent tier's preempt_grace "0s", a victim
// that takes no checkpoint signal) is not held.
func TestBeneficiaryHeldWhileVictimsCheckpoint(t *testing.T) {
	tests := []struct {
		name        string
		tier        string // of the beneficiary, in tenant prod
		noSignal    bool   // the victim opts out of checkpoints
		wantActions []string
		wantReason  string
	}{
		{"victims checkpoint: held until they stop", "interactive", false,
			[]string{"preempt ml/train", "hold prod/serve"},
			"GPUs are being freed for it: 4 GPUs of ml/train checkpoint for up to 2m; held until they stop, so that no other work takes them"},
		{"preempt_grace 0s: not held", "inference", false, []string{"preempt ml/train"}, ""},
		{"a victim without checkpoints: not held", "interactive", true, []string{"preempt ml/train"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, urgentPolicy(nil))
			h.node("n1", "default", 4)
			h.submit("ml", "train", "training", 4, 1)
			if tt.noSignal {
				h.find("ml", "train").Job.Checkpoint = "none"
			}
			h.advance(time.Hour)
			h.submit("prod", "serve", tt.tier, 4, 1)
			plan := h.step()
			h.expect("actions", kinds(plan), tt.wantActions)
			if tt.wantReason == "" {
				return
			}
			hold := plan.Actions[1]
			if hold.Reason.Rule != engine.RuleDraining || hold.Reason.Message != tt.wantReason || hold.Count != 1 {
				t.Fatalf("hold %s: rule %s, count %d, message %q; want %s, 1, %q", hold, hold.Reason.Rule, hold.Count,
					hold.Reason.Message, engine.RuleDraining, tt.wantReason)
			}
			w := plan.Waiting
			if len(w) != 1 || w[0].Job != (engine.JobRef{"prod", "serve"}) || w[0].Reason != hold.Reason {
				t.Fatalf("waiting %v: want prod/serve with the hold's reason", w)
			}
		})
	}
}

// A held beneficiary whose victims still checkpoint is resumed "after
// victims" when it goes on their GPUs (the controller releases it as they
// stop), and at once when GPUs free now elsewhere fit it: its victims'
// GPUs are then the next work's.
func TestResumeAfterVictims(t *testing.T) {
	bene := engine.JobRef{"b", "bene"}
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["a"] = tenant("a", 0, policy.Unlimited)
		p.Tenants["b"] = tenant("b", 4, policy.Unlimited)
	})
	draining := engine.Alloc{ID: "victim", Job: engine.Job{Ref: engine.JobRef{"a", "victim"}, Tier: "training", Priority: 40}, Group: "main",
		NodeID: "n1", GPUIDs: []string{"n1-g0", "n1-g1"}, StartedAt: t0.Add(-time.Hour), Draining: true, For: &bene, ForGroup: "main"}
	waiting := engine.Demand{Job: engine.Job{Ref: bene, Tier: "training", Priority: 40}, Group: "main", GPUsPerAlloc: 2, Count: 1,
		Since: t0.Add(-time.Minute), Held: true}
	tests := []struct {
		name      string
		n2Free    int // GPUs of node n2, all free
		wantAfter bool
	}{
		{"only its victims' GPUs fit it: after them", 0, true},
		{"free GPUs elsewhere fit it: at once", 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &engine.Snapshot{Nodes: []engine.Node{{ID: "n1", GPUs: 2}}, Allocs: []engine.Alloc{draining}, Waiting: []engine.Demand{waiting}}
			if tt.n2Free > 0 {
				// Marked GPUs are tried first: here the victim's one GPU
				// is too few for the demand, which goes to n2.
				s.Nodes = []engine.Node{{ID: "n1", GPUs: 1}, {ID: "n2", GPUs: tt.n2Free}}
				s.Allocs[0].GPUIDs = s.Allocs[0].GPUIDs[:1]
			}
			plan := engine.New(pol).Plan(s, t0)
			var resume *engine.Action
			for i := range plan.Actions {
				if plan.Actions[i].Kind == engine.Resume {
					resume = &plan.Actions[i]
				}
			}
			if resume == nil {
				t.Fatalf("no resume: %v", kinds(plan))
			}
			if resume.AfterVictims != tt.wantAfter {
				t.Fatalf("%s: AfterVictims %v, want %v", resume, resume.AfterVictims, tt.wantAfter)
			}
			if !resume.Ahead {
				t.Fatalf("%s: not ahead, though GPUs were set aside for it", resume)
			}
		})
	}
}

// A resume of work GPUs were set aside for goes ahead of Nomad's queue
// (Action.Ahead): else queued work of a higher priority, placed first on
// the fullest node, takes exactly those GPUs. Other resumes do not.
func TestResumeAhead(t *testing.T) {
	bene := engine.JobRef{"b", "bene"}
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["b"] = tenant("b", 4, policy.Unlimited)
	})
	waiting := engine.Demand{Job: engine.Job{Ref: bene, Tier: "training", Priority: 40}, Group: "main", GPUsPerAlloc: 2, Count: 1,
		Since: t0.Add(-time.Minute), Held: true}
	tests := []struct {
		name      string
		earmarks  []engine.Earmark
		wantAhead bool
	}{
		{"its victims gave their GPUs back", []engine.Earmark{{NodeID: "n1", GPUs: 2, For: bene, ForGroup: "main"}}, true},
		{"GPUs set aside for other work", []engine.Earmark{{NodeID: "n2", GPUs: 2, For: engine.JobRef{"b", "other"}, ForGroup: "main"}}, false},
		{"nothing set aside", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &engine.Snapshot{Nodes: []engine.Node{{ID: "n1", GPUs: 2}, {ID: "n2", GPUs: 2}}, Waiting: []engine.Demand{waiting}, Earmarks: tt.earmarks}
			plan := engine.New(pol).Plan(s, t0)
			if len(plan.Actions) != 1 || plan.Actions[0].Kind != engine.Resume {
				t.Fatalf("want one resume, got %v", kinds(plan))
			}
			if a := plan.Actions[0]; a.Ahead != tt.wantAhead {
				t.Fatalf("%s: Ahead %v, want %v", a, a.Ahead, tt.wantAhead)
			}
		})
	}
}

// GPUs being freed for a tenant's waiting work count toward its limit:
// otherwise its other work, ranked first, takes the limit's room while
// they drain, and the work they drain for finds itself over the limit (and
// preempts again).
func TestMarkedCountTowardLimit(t *testing.T) {
	nb := engine.JobRef{"ml", "nb"}
	pol := testPolicy(func(p *policy.Policy) { p.Tenants["ml"] = tenant("ml", 0, 2) })
	s := &engine.Snapshot{
		Nodes: []engine.Node{{ID: "n1", GPUs: 2}, {ID: "n2", GPUs: 1}},
		Allocs: []engine.Alloc{
			// a is of c's tier: c may not take its place either.
			{ID: "a", Job: engine.Job{Ref: engine.JobRef{"ml", "a"}, Tier: "interactive", Priority: 60}, Group: "main", NodeID: "n1",
				GPUIDs: []string{"n1-g0"}, StartedAt: t0.Add(-time.Hour)},
			{ID: "b", Job: engine.Job{Ref: engine.JobRef{"ml", "b"}, Tier: "training", Priority: 40}, Group: "main", NodeID: "n1",
				GPUIDs: []string{"n1-g1"}, StartedAt: t0.Add(-time.Hour), Draining: true, For: &nb, ForGroup: "main"},
		},
		Waiting: []engine.Demand{
			// c waited longer: it ranks before nb in their tier.
			{Job: engine.Job{Ref: engine.JobRef{"ml", "c"}, Tier: "interactive", Priority: 60}, Group: "main", GPUsPerAlloc: 1, Count: 1,
				Since: t0.Add(-30 * time.Minute), Held: true},
			{Job: engine.Job{Ref: nb, Tier: "interactive", Priority: 60}, Group: "main", GPUsPerAlloc: 1, Count: 1,
				Since: t0.Add(-time.Minute), Held: true},
		},
	}
	plan := engine.New(pol).Plan(s, t0)
	if got, want := kinds(plan), []string{"resume ml/nb"}; !slices.Equal(got, want) {
		t.Fatalf("actions %q, want %q (ml/c must not take the limit's room on n2)", got, want)
	}
	for _, w := range plan.Waiting {
		if w.Job.ID == "c" {
			mustContain(t, w.Reason.Message, "tenant ml holds 1 GPUs and 1 being freed for its waiting work, limit 2: 1 more would exceed it")
		}
	}
}

// A gang that preempts on one node and goes on free GPUs on another counts
// on those too: they are set aside with the GPUs beside its victims, or
// other work takes them during the grace and the gang never runs.
func TestEarmarksOfAGangOnFreeNodes(t *testing.T) {
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["a"] = tenant("a", 4, policy.Unlimited)
		p.Tenants["b"] = tenant("b", 0, policy.Unlimited)
	})
	bene := engine.JobRef{"a", "gang"}
	snap := engine.Snapshot{
		Nodes: []engine.Node{{ID: "n1", GPUs: 2}, {ID: "n2", GPUs: 2}},
		Allocs: []engine.Alloc{{ID: "v", Job: engine.Job{Ref: engine.JobRef{"b", "victim"}, Priority: 40, Tier: "training"}, Group: "main",
			NodeID: "n1", GPUIDs: []string{"g0", "g1"}, StartedAt: t0.Add(-2 * time.Hour)}},
		Waiting: []engine.Demand{{Job: engine.Job{Ref: bene, Priority: 40, Tier: "training", Gang: true}, Group: "main",
			GPUsPerAlloc: 2, Count: 2, Since: t0.Add(-time.Minute), Held: true}},
	}
	plan := engine.New(pol).Plan(&snap, t0)
	want := []engine.Earmark{{NodeID: "n2", GPUs: 2, For: bene, ForGroup: "main"}}
	if !slices.Equal(plan.Earmarks, want) {
		t.Errorf("earmarks %v, want %v; actions %q", plan.Earmarks, want, kinds(plan))
	}
}

// GPUs set aside for a demand counted toward its tenant's limit while they
// were: it takes them even when work placed since has put its tenant at
// its limit, and the newest work, which put it there, is given back,
// rather than more of the tenant's own work swapped out while those GPUs
// stay idle (which wasted the preemption that freed them). Work at the
// eviction cap is not given back: the next newest is.
func TestMarksTakenAtTheLimit(t *testing.T) {
	bene := engine.JobRef{"ml", "nb"}
	pol := testPolicy(func(p *policy.Policy) {
		p.Tenants["ml"] = tenant("ml", 0, 4)
		p.Preemption.MaxPerJobPerHour = 2
	})
	running := func(id, node string, gpus int, started time.Duration) engine.Alloc {
		ids := make([]string, gpus)
		for i := range ids {
			ids[i] = node + "-" + id + "-" + strconv.Itoa(i)
		}
		return engine.Alloc{ID: id, Job: engine.Job{Ref: engine.JobRef{"ml", id}, Tier: "training", Priority: 40}, Group: "main", NodeID: node,
			GPUIDs: ids, StartedAt: t0.Add(-started)}
	}
	for _, tt := range []struct {
		name   string
		capped bool // ml/c, placed last, is at the eviction cap
		want   []string
	}{
		{"the newest work is given back", false, []string{
			"preempt ml/c/main allocs=1 gpus=1: tenant ml would hold 5 GPUs with ml/nb/main on the GPUs set aside for it, limit 4: giving back 1",
			"resume ml/nb/main gpus=2 count=1 ahead: GPUs are free and tenant ml stays within its limit of 4 (4 GPUs with these 2): resuming 1 allocation"}},
		{"the newest work at the eviction cap: the next newest", true, []string{
			"preempt ml/a/main allocs=1 gpus=2: tenant ml would hold 5 GPUs with ml/nb/main on the GPUs set aside for it, limit 4: giving back 2",
			"resume ml/nb/main gpus=2 count=1 ahead: GPUs are free and tenant ml stays within its limit of 4 (3 GPUs with these 2): resuming 1 allocation"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := running("c", "n2", 1, time.Minute) // placed by Nomad since the preemption
			if tt.capped {
				c.Job.Preemptions = []time.Time{t0.Add(-30 * time.Minute), t0.Add(-20 * time.Minute)}
			}
			s := &engine.Snapshot{
				Nodes:  []engine.Node{{ID: "n1", GPUs: 2}, {ID: "n2", GPUs: 2}, {ID: "n3", GPUs: 2}},
				Allocs: []engine.Alloc{running("a", "n1", 2, 2*time.Hour), c},
				Waiting: []engine.Demand{{Job: engine.Job{Ref: bene, Tier: "interactive", Priority: 60}, Group: "main", GPUsPerAlloc: 2, Count: 1,
					Since: t0.Add(-3 * time.Minute), Held: true}},
				// What ml's own training gave back for nb.
				Earmarks: []engine.Earmark{{NodeID: "n3", GPUs: 2, For: bene, ForGroup: "main"}},
			}
			plan := engine.New(pol).Plan(s, t0)
			var got []string
			for _, a := range plan.Actions {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("actions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// GPUs freed for a job that neither waits nor runs in the snapshot stay
// set aside: Nomad is placing it (between dequeuing its evaluation and
// applying the plan, a job is in no list Nomad answers). Resumed into
// them, the victim took back the GPUs it had just been preempted for
// (TestDeterminedPartialPreemption caught this on a real agent). Once the
// job runs, what is left is free.
func TestGPUsKeptWhileBeneficiaryIsPlaced(t *testing.T) {
	urgent := engine.JobRef{"ml", "urgent"}
	pol := testPolicy(func(p *policy.Policy) { p.Tenants["ml"] = tenant("ml", 0, policy.Unlimited) })
	victim := engine.Demand{Job: engine.Job{Ref: engine.JobRef{"ml", "experiment"}, Tier: "training", Priority: 40}, Group: "main", GPUsPerAlloc: 1,
		Count: 4, Since: t0.Add(-time.Second), Held: true}
	for _, tt := range []struct {
		name       string
		draining   bool // the victims still stop (else: given back, marked)
		urgentRuns bool
		wantResume bool
	}{
		{"victims stopping, urgent being placed", true, false, false},
		{"victims gone, urgent being placed", false, false, false},
		{"urgent placed elsewhere: free", false, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &engine.Snapshot{Nodes: []engine.Node{{ID: "n1", GPUs: 4}, {ID: "n2", GPUs: 4}}, Waiting: []engine.Demand{victim}}
			if tt.draining {
				for i := range 4 {
					s.Allocs = append(s.Allocs, engine.Alloc{ID: "v" + strconv.Itoa(i), Job: victim.Job, Group: "main", NodeID: "n1",
						GPUIDs: []string{"n1-g" + strconv.Itoa(i)}, StartedAt: t0.Add(-time.Hour), Draining: true, For: &urgent, ForGroup: "main"})
				}
			} else {
				s.Earmarks = []engine.Earmark{{NodeID: "n1", GPUs: 4, For: urgent, ForGroup: "main"}}
			}
			s.Allocs = append(s.Allocs, engine.Alloc{ID: "other", Job: engine.Job{Ref: engine.JobRef{"ml", "other"}, Tier: "training", Priority: 40},
				Group: "main", NodeID: "n2", GPUIDs: []string{"n2-g0", "n2-g1", "n2-g2", "n2-g3"}, StartedAt: t0.Add(-time.Hour)})
			if tt.urgentRuns {
				s.Nodes = append(s.Nodes, engine.Node{ID: "n3", GPUs: 4})
				s.Allocs = append(s.Allocs, engine.Alloc{ID: "u", Job: engine.Job{Ref: urgent, Tier: "interactive", Priority: 60}, Group: "main",
					NodeID: "n3", GPUIDs: []string{"n3-g0", "n3-g1", "n3-g2", "n3-g3"}, StartedAt: t0})
			}
			plan := engine.New(pol).Plan(s, t0)
			resumed := false
			for _, a := range plan.Actions {
				resumed = resumed || (a.Kind == engine.Resume && a.Job == victim.Job.Ref)
			}
			if resumed != tt.wantResume {
				t.Fatalf("victim resumed %v, want %v: %v", resumed, tt.wantResume, kinds(plan))
			}
		})
	}
}

// Work of an urgent tier (preempt_grace below preemption.grace) for which
// nothing is free and nothing may be preempted takes GPUs free now that
// are set aside for work of a lower tier, and the plan says so
// (Plan.Unmarked); GPUs still draining, GPUs set aside for its own tier,
// and GPUs it could free by preempting are left alone.
func TestUrgentTierTakesMarksBelow(t *testing.T) {
	bene := engine.JobRef{"b", "bene"}
	urgent := engine.JobRef{"a", "urgent"}
	at := func(id, ns string, prio int, draining bool, forJob *engine.JobRef) engine.Alloc {
		return engine.Alloc{ID: id, Job: engine.Job{Ref: engine.JobRef{ns, id}, Priority: prio}, Group: "main", NodeID: "n1",
			GPUIDs: []string{id + "-gpu"}, StartedAt: t0.Add(-2 * time.Hour), Draining: draining, For: forJob}
	}
	demand := func(ref engine.JobRef, tier string, prio int) engine.Demand {
		return engine.Demand{Job: engine.Job{Ref: ref, Priority: prio, Tier: tier}, Group: "main", GPUsPerAlloc: 1, Count: 1,
			Since: t0.Add(-time.Minute), Held: true}
	}
	zero := time.Duration(0)
	tests := []struct {
		name       string
		graceCut   bool // interactive sets preempt_grace = "0s"
		benefTier  string
		allocs     []engine.Alloc
		marks      int // GPUs given back for bene on n1
		wantTaken  bool
		wantVictim bool   // the urgent demand preempts c's borrower
		wantAction string // the urgent demand's action kind, "" for none (it stays held)
	}{
		{name: "an urgent tier takes GPUs given back for a lower tier", graceCut: true, benefTier: "training",
			allocs: []engine.Alloc{at("own", "b", 40, false, nil)}, marks: 1, wantTaken: true, wantAction: "resume"},
		{name: "a tier that is not urgent waits", graceCut: false, benefTier: "training",
			allocs: []engine.Alloc{at("own", "b", 40, false, nil)}, marks: 1},
		{name: "GPUs still draining are not taken", graceCut: true, benefTier: "training",
			allocs: []engine.Alloc{at("v", "c", 40, true, &bene)}, marks: 0},
		{name: "GPUs set aside for the same tier are not taken", graceCut: true, benefTier: "interactive",
			allocs: []engine.Alloc{at("own", "b", 40, false, nil)}, marks: 1},
		{name: "a victim that may be preempted is preempted instead", graceCut: true, benefTier: "training",
			allocs: []engine.Alloc{at("borrower", "c", 40, false, nil)}, marks: 1, wantVictim: true, wantAction: "resume"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol := testPolicy(func(p *policy.Policy) {
				// b's own work is within its reserve: nothing may be
				// preempted for a; c borrows.
				p.Tenants["a"] = tenant("a", 0, policy.Unlimited)
				p.Tenants["b"] = tenant("b", 1, policy.Unlimited)
				p.Tenants["c"] = tenant("c", 0, policy.Unlimited)
				if tc.graceCut {
					tier := *p.Tiers["interactive"]
					tier.PreemptGrace = &zero
					p.Tiers["interactive"] = &tier
				}
			})
			snap := engine.Snapshot{
				Nodes:   []engine.Node{{ID: "n1", GPUs: 1 + tc.marks}},
				Allocs:  tc.allocs,
				Waiting: []engine.Demand{demand(urgent, "interactive", 60), demand(bene, tc.benefTier, 40)},
			}
			if tc.marks > 0 {
				snap.Earmarks = []engine.Earmark{{NodeID: "n1", GPUs: tc.marks, For: bene, ForGroup: "main"}}
			}
			plan := engine.New(pol).Plan(&snap, t0)
			var lines []string
			got := ""
			preempted := false
			for _, a := range plan.Actions {
				lines = append(lines, a.String())
				if a.Job == urgent {
					got = string(a.Kind)
				}
				preempted = preempted || (a.Kind == engine.Preempt && a.For != nil && *a.For == urgent)
				if a.Job == bene && a.Kind == engine.Resume && tc.wantTaken {
					t.Errorf("beneficiary resumed: %s", a)
				}
			}
			for _, w := range plan.Waiting {
				lines = append(lines, "waiting "+w.Job.String()+": "+w.Reason.String())
			}
			if got != tc.wantAction || preempted != tc.wantVictim {
				t.Errorf("urgent: %q, preempts %v; want %q, %v\n%s", got, preempted, tc.wantAction, tc.wantVictim, strings.Join(lines, "\n"))
			}
			if !tc.wantTaken {
				if len(plan.Unmarked) > 0 {
					t.Errorf("unmarked %+v, want none", plan.Unmarked)
				}
				return
			}
			want := []engine.Unmark{{Earmark: engine.Earmark{NodeID: "n1", GPUs: 1, For: bene, ForGroup: "main"}, To: urgent,
				Reason: engine.Reason{engine.RulePriority, "tier interactive (priority 60) of a/urgent/main takes 1 GPU on n1 set aside for b/bene/main, " +
					"tier training (priority 40): nothing else is free or may be preempted for it"}}}
			if !slices.Equal(plan.Unmarked, want) {
				t.Errorf("unmarked:\n got %+v\nwant %+v", plan.Unmarked, want)
			}
			for _, a := range plan.Actions {
				if a.Job == urgent && (!a.Ahead || !strings.HasPrefix(a.Reason.Message, "GPUs set aside for work of a lower tier are free")) {
					t.Errorf("urgent resume: %s; want ahead, with GPUs set aside for work of a lower tier", a)
				}
			}
		})
	}
}
