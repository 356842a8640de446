package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestPlaceholders: a placeholder holds the free GPUs a preemption counted
// on while its beneficiary is held, on a node with a driver to run it, and
// is purged once the beneficiary is resumed or the marks lapse. GPUs a
// victim gave back are held too while the beneficiary stays held (it waits
// for other victims still draining for it), or Nomad places other work
// there.
func TestPlaceholders(t *testing.T) {
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	id := placeholderID(nb, "work", "n1")
	beside := Mark{Node: "n1", GPUs: 3, For: "ml/nb", Group: "work", Until: t0.Add(time.Minute), Beside: true}
	tests := []struct {
		name     string
		marks    []Mark
		held     bool // Steward holds ml/nb's group
		resumed  bool // this round resumes it
		drivers  []string
		existing bool   // the placeholder is registered already (3 GPUs)
		busy     int    // GPUs of the node's 4 that allocations hold
		want     string // the call on the fake, "" for none
	}{
		{"free GPUs beside a victim: registered", []Mark{beside}, true, false, []string{"raw_exec"}, false, 1,
			"register steward/" + id + " gpus=3"},
		{"no more than are free now (the rest still drains)", []Mark{beside}, true, false, []string{"raw_exec"}, false, 2,
			"register steward/" + id + " gpus=2"},
		{"none free now: none", []Mark{beside}, true, false, []string{"raw_exec"}, false, 4, ""},
		{"already there: nothing to do", []Mark{beside}, true, false, []string{"raw_exec"}, true, 1, ""},
		{"resumed in this round: purged", []Mark{beside}, true, true, []string{"raw_exec"}, true, 1, "purge steward/" + id},
		{"no longer held: purged", []Mark{beside}, false, false, []string{"raw_exec"}, true, 1, "purge steward/" + id},
		{"lapsed: purged", []Mark{{Node: "n1", GPUs: 3, For: "ml/nb", Group: "work", Until: t0, Beside: true}}, true, false,
			[]string{"raw_exec"}, true, 1, "purge steward/" + id},
		{"GPUs a victim gave back, others still draining: registered", []Mark{{Node: "n1", GPUs: 1, For: "ml/nb", Group: "work", Until: t0.Add(time.Minute)}},
			true, false, []string{"raw_exec"}, false, 1, "register steward/" + id + " gpus=1"},
		{"GPUs a victim gave back, resumed in this round: none", []Mark{{Node: "n1", GPUs: 1, For: "ml/nb", Group: "work", Until: t0.Add(time.Minute)}},
			true, true, []string{"raw_exec"}, false, 1, ""},
		{"a node that runs containers alone: registered (under docker)", []Mark{beside}, true, false, []string{"docker"}, false, 1,
			"register steward/" + id + " gpus=3"},
		{"no driver to run it on the node: none", []Mark{beside}, true, false, []string{"exec", "java"}, false, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			c.state(jobKey{"ml", "train"}).Marks = tt.marks
			if tt.held {
				c.state(jobKey{"ml", "nb"}).hold("work", 1, 1, string(engine.RuleDraining), t0, 10)
			}
			var allocs []ObservedAlloc
			for i := range tt.busy {
				allocs = append(allocs, alloc(fmt.Sprint("a", i), "train"))
			}
			r := roundWith(nil, allocs)
			r.obs.Nodes = []ObservedNode{{ID: "n1", Name: "gpu-1", GPUs: 4, Drivers: tt.drivers}}
			r.obs.Placeholders = map[string]Placeholder{}
			if tt.existing {
				r.obs.Placeholders[id] = Placeholder{ID: id, Node: "n1", GPUs: 3}
			}
			if tt.resumed {
				r.resumed[jobKey{"ml", "nb"}] = map[string]bool{"work": true}
			}
			c.syncPlaceholders(context.Background(), r)
			var want []string
			if tt.want != "" {
				want = []string{tt.want}
			}
			if got := f.calls; !slices.Equal(got, want) {
				t.Fatalf("calls %q, want %q", got, want)
			}
		})
	}
}

// The placeholder job: pinned to its node, in Steward's namespace, the
// GPUs and little else, never restarted, a sleep that outlives the marks
// by a second at most, and under steward-exec a user of its own.
func TestPlaceholderJob(t *testing.T) {
	c := testController(t, newFakeNomad())
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	w := placeholderWant{id: placeholderID(nb, "work", "n1"), node: ObservedNode{ID: "n1", Name: "gpu-1", NodePool: "gpus",
		GPUs: 8, Drivers: []string{"raw_exec", "steward-exec"}}, gpus: 3, bene: nb, group: "work", until: t0.Add(130 * time.Second)}
	j := c.placeholderJob(w, t0)
	task := j.TaskGroups[0].Tasks[0]
	switch {
	case *j.Namespace != "steward" || *j.ID != w.id || *j.NodePool != "gpus" || *j.Type != "batch":
		t.Errorf("job %s/%s in pool %s, type %s", *j.Namespace, *j.ID, *j.NodePool, *j.Type)
	case len(j.Constraints) != 1 || j.Constraints[0].LTarget != "${node.unique.id}" || j.Constraints[0].RTarget != "n1":
		t.Errorf("constraints %v: want pinned to n1", j.Constraints)
	case task.Driver != "steward-exec" || task.User != "" || task.Config["checkpoint_signal"] != "none":
		t.Errorf("task driver %s, user %q, config %v", task.Driver, task.User, task.Config)
	case !slices.Equal(task.Config["args"].([]string), []string{"131"}):
		t.Errorf("sleeps %v, want 131 s", task.Config["args"])
	case *task.Resources.Devices[0].Count != 3 || task.Resources.Devices[0].Name != "gpu":
		t.Errorf("devices %+v", task.Resources.Devices[0])
	case *j.TaskGroups[0].RestartPolicy.Attempts != 0 || *j.TaskGroups[0].ReschedulePolicy.Attempts != 0:
		t.Errorf("restarts or reschedules")
	case j.Meta["steward.placeholder_for"] != "ml/nb":
		t.Errorf("meta %v", j.Meta)
	}
}

// GPUs the plan gives to urgent work (Plan.Unmarked) are no longer set
// aside: the marks shrink (saved, so a restarted controller keeps them
// small), the placeholder holding them is purged in the same round so that
// Nomad can place the urgent work, and the next round holds what is still
// set aside.
func TestUnmarkFreesPlaceholder(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	id := placeholderID(nb, "work", "n1")
	c.state(jobKey{"ml", "train"}).Marks = []Mark{{Node: "n1", GPUs: 3, For: "ml/nb", Group: "work", Until: t0.Add(time.Minute), Beside: true}}
	c.state(jobKey{"ml", "nb"}).hold("work", 1, 1, string(engine.RuleDraining), t0, 10)
	if err := c.save(context.Background(), c.state(jobKey{"ml", "train"})); err != nil {
		t.Fatal(err)
	}
	r := roundWith(nil, []ObservedAlloc{alloc("a0", "train")})
	r.obs.Nodes = []ObservedNode{{ID: "n1", Name: "gpu-1", GPUs: 4, Drivers: []string{"raw_exec"}}}
	r.obs.Placeholders = map[string]Placeholder{id: {ID: id, Node: "n1", GPUs: 3}}
	urgent := engine.JobRef{Namespace: "serve", ID: "api"}
	why := engine.Reason{Rule: engine.RulePriority, Message: "tier inference takes 1 GPU on n1 set aside for ml/nb/work"}
	ds := c.unmark(context.Background(), r, []engine.Unmark{{Earmark: engine.Earmark{NodeID: "n1", GPUs: 1, For: nb, ForGroup: "work"},
		To: urgent, Reason: why}})
	if len(ds) != 1 || ds[0].Job != "serve/api" || ds[0].Reason != why.Message || ds[0].GPUs != 1 {
		t.Errorf("decisions %+v", ds)
	}
	f.calls = nil
	c.syncPlaceholders(context.Background(), r)
	if want := []string{"purge steward/" + id}; !slices.Equal(f.calls, want) {
		t.Fatalf("calls %q, want %q", f.calls, want)
	}

	c2 := testController(t, f)
	if err := c2.loadStates(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m := c2.state(jobKey{"ml", "train"}).Marks; len(m) != 1 || m[0].GPUs != 2 {
		t.Fatalf("saved marks %+v, want 2 GPUs; vars %v", m, f.vars)
	}
	c2.state(jobKey{"ml", "nb"}).hold("work", 1, 1, string(engine.RuleDraining), t0, 10)
	f.calls = nil
	// Nomad placed the urgent work on the GPU the placeholder gave up.
	r2 := roundWith(nil, []ObservedAlloc{alloc("a0", "train"), alloc("u0", "api")})
	r2.obs.Nodes = r.obs.Nodes
	r2.obs.Placeholders = map[string]Placeholder{}
	c2.syncPlaceholders(context.Background(), r2)
	if want := []string{"register steward/" + id + " gpus=2"}; !slices.Equal(f.calls, want) {
		t.Fatalf("next round: calls %q, want %q", f.calls, want)
	}
}

// TestPausedBeneficiaryGetsNoSetAside: GPUs set aside for a job that a
// person paused (a victim's drain for it ended after the pause) are free to
// all: the snapshot leaves them out and no placeholder holds them; a held
// job that waits keeps them.
func TestPausedBeneficiaryGetsNoSetAside(t *testing.T) {
	nb := engine.JobRef{Namespace: "ml", ID: "nb"}
	id := placeholderID(nb, "work", "n1")
	for _, tt := range []struct {
		name      string
		paused    bool
		existing  bool     // the placeholder is registered already
		earmarks  int      // GPUs the snapshot sets aside for ml/nb
		wantCalls []string // on the fake
	}{
		{name: "held, waiting: set aside, placeholder registered", earmarks: 3, wantCalls: []string{"register steward/" + id + " gpus=3"}},
		{name: "paused: nothing set aside, no placeholder", paused: true},
		{name: "paused with a placeholder from before: purged", paused: true, existing: true, wantCalls: []string{"purge steward/" + id}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			c.state(jobKey{"ml", "train"}).Marks = []Mark{{Node: "n1", GPUs: 3, For: "ml/nb", Group: "work", Until: t0.Add(time.Minute)}}
			st := c.state(jobKey{"ml", "nb"})
			st.hold("work", 1, 1, string(engine.RuleDraining), t0, 10)
			st.Paused = tt.paused
			r := roundWith([]*ObservedJob{job("ml", "nb", "interactive", 60, 0, 3)}, []ObservedAlloc{alloc("a0", "train")})
			r.obs.Nodes = []ObservedNode{{ID: "n1", Name: "gpu-1", GPUs: 4, Drivers: []string{"raw_exec"}}}
			r.obs.Placeholders = map[string]Placeholder{}
			if tt.existing {
				r.obs.Placeholders[id] = Placeholder{ID: id, Node: "n1", GPUs: 3}
			}
			got := 0
			for _, m := range buildSnapshot(c.pol, r.obs, c.states(), nil).Earmarks {
				if m.For == nb {
					got += m.GPUs
				}
			}
			if got != tt.earmarks {
				t.Errorf("the snapshot sets aside %d GPUs for ml/nb, want %d", got, tt.earmarks)
			}
			c.syncPlaceholders(context.Background(), r)
			if !slices.Equal(f.calls, tt.wantCalls) {
				t.Fatalf("calls %q, want %q", f.calls, tt.wantCalls)
			}
		})
	}
}

// TestPlaceholderLeavesWorkPlacedNow: GPUs set aside for work the round
// resumes are that work's: Nomad places it there now. A placeholder
// registered in the same round for another held beneficiary must not
// count them as free too (nomadmodel.PlacingMarks), or the resumed work
// waits for GPUs set aside for it and the other beneficiary's victims
// were preempted for GPUs it cannot have either. Before, the placeholder
// took every free GPU on the node, the resumed work's included.
func TestPlaceholderLeavesWorkPlacedNow(t *testing.T) {
	other := engine.JobRef{Namespace: "ml", ID: "other"}
	id := placeholderID(other, "work", "n1")
	nbID := placeholderID(engine.JobRef{Namespace: "ml", ID: "nb"}, "work", "n1")
	until := t0.Add(time.Minute)
	besideOther := Mark{Node: "n1", GPUs: 3, For: "ml/other", Group: "work", Until: until, Beside: true}
	tests := []struct {
		name   string
		gpus   int  // the node's; 1 of them runs an allocation
		nbMark Mark // set aside for ml/nb, resumed in this round
		nbHeld int  // GPUs ml/nb's own placeholder holds (purged now); 0: none
		want   []string
	}{
		{"freed for the resumed work: not the other's placeholder's", 4,
			Mark{Node: "n1", GPUs: 3, For: "ml/nb", Group: "work", Until: until}, 0, nil},
		{"what is left beside them: the other's", 6,
			Mark{Node: "n1", GPUs: 3, For: "ml/nb", Group: "work", Until: until}, 0, []string{"register steward/" + id + " gpus=2"}},
		{"held by the resumed work's own placeholder: counted once", 8,
			Mark{Node: "n1", GPUs: 3, For: "ml/nb", Group: "work", Until: until, Beside: true}, 3,
			[]string{"register steward/" + id + " gpus=3", "purge steward/" + nbID}},
		{"resumed work's marks lapsed: all free", 4,
			Mark{Node: "n1", GPUs: 3, For: "ml/nb", Group: "work", Until: t0}, 0, []string{"register steward/" + id + " gpus=3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			c.state(jobKey{"ml", "train"}).Marks = []Mark{besideOther, tt.nbMark}
			c.state(jobKey{"ml", "other"}).hold("work", 1, 1, string(engine.RuleDraining), t0, 10)
			c.state(jobKey{"ml", "nb"}).hold("work", 1, 1, string(engine.RuleDraining), t0, 10)
			r := roundWith(nil, []ObservedAlloc{alloc("a0", "train")})
			r.obs.Nodes = []ObservedNode{{ID: "n1", Name: "gpu-1", GPUs: tt.gpus, Drivers: []string{"raw_exec"}}}
			r.obs.Placeholders = map[string]Placeholder{}
			if tt.nbHeld > 0 {
				r.obs.Placeholders[nbID] = Placeholder{ID: nbID, Node: "n1", GPUs: tt.nbHeld}
			}
			r.resumed[jobKey{"ml", "nb"}] = map[string]bool{"work": true}
			c.syncPlaceholders(context.Background(), r)
			if got := f.calls; !slices.Equal(got, tt.want) {
				t.Fatalf("calls %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPlaceholderHoldsGPUsFreedSince: GPUs promised to a held beneficiary
// while still draining (a Beside mark on another victim's GPUs, which a
// placeholder could not hold then) are held once they free, while the
// marks stand (nomadmodel.Holds): a placeholder not registered yet takes
// them, and one holding fewer is registered again with them. GPUs set
// aside for work resumed in this round are its own only up to what the
// plan resumes of it (nomadmodel.PlacingMarks), and its own placeholder,
// purged now, holds them no longer. Before, a 4-GPU victim's GPUs freed
// for a 1-GPU job counted whole as that job's, a placeholder never grew,
// and Nomad placed other work on the GPUs promised to the second
// beneficiary, whose victims had stopped for nothing (issue 31).
func TestPlaceholderHoldsGPUsFreedSince(t *testing.T) {
	other, nb := engine.JobRef{Namespace: "ml", ID: "other"}, engine.JobRef{Namespace: "ml", ID: "nb"}
	id, nbID := placeholderID(other, "work", "n1"), placeholderID(nb, "work", "n1")
	until := t0.Add(time.Minute)
	tests := []struct {
		name  string
		busy  int // GPUs of the node's 8 that allocations hold
		nbRes int // GPUs the plan resumes of ml/nb, whose victim freed 4 on n1 (0: none)
		nbPH  int // GPUs ml/nb's own placeholder held (purged now)
		held  int // GPUs ml/other's placeholder holds (-1: registered, not placed yet)
		want  []string
	}{
		{"freed beside a 1-GPU job resumed now: held", 4, 1, 0, 0, []string{"register steward/" + id + " gpus=3"}},
		{"freed for work resumed now that takes them all: none", 4, 4, 0, 0, nil},
		{"held by the resumed job's own placeholder: the rest held", 4, 1, 4, 0,
			[]string{"register steward/" + id + " gpus=3", "purge steward/" + nbID}},
		{"partly held when promised, the rest freed since: grows", 5, 0, 0, 1, []string{"register steward/" + id + " gpus=3"}},
		{"grows no further than is free", 6, 0, 0, 1, []string{"register steward/" + id + " gpus=2"}},
		{"holds all: nothing to do", 5, 0, 0, 3, nil},
		{"registered, not placed yet: left as it is", 4, 0, 0, -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			marks := []Mark{{Node: "n1", GPUs: 3, For: "ml/other", Group: "work", Until: until, Beside: true}}
			if tt.nbRes > 0 {
				marks = append(marks, Mark{Node: "n1", GPUs: 4, For: "ml/nb", Group: "work", Until: until})
			}
			c.state(jobKey{"ml", "train"}).Marks = marks
			c.state(jobKey{"ml", "other"}).hold("work", 1, 4, string(engine.RuleDraining), t0, 10)
			var allocs []ObservedAlloc
			for i := range tt.busy {
				allocs = append(allocs, alloc(fmt.Sprint("a", i), "train"))
			}
			r := roundWith(nil, allocs)
			r.obs.Nodes = []ObservedNode{{ID: "n1", Name: "gpu-1", GPUs: 8, Drivers: []string{"raw_exec"}}}
			r.obs.Placeholders = map[string]Placeholder{}
			switch {
			case tt.held > 0:
				r.obs.Placeholders[id] = Placeholder{ID: id, Node: "n1", GPUs: tt.held}
			case tt.held < 0:
				r.obs.Placeholders[id] = Placeholder{ID: id}
			}
			if tt.nbPH > 0 {
				r.obs.Placeholders[nbID] = Placeholder{ID: nbID, Node: "n1", GPUs: tt.nbPH}
			}
			if tt.nbRes > 0 {
				c.state(jobKey{"ml", "nb"}).hold("work", 1, tt.nbRes, string(engine.RuleDraining), t0, 10)
				r.resumed[jobKey{"ml", "nb"}] = map[string]bool{"work": true}
				r.plan = &engine.Plan{Actions: []engine.Action{{Kind: engine.Resume, Job: nb, Group: "work", Count: 1, GPUs: tt.nbRes}}}
			}
			c.syncPlaceholders(context.Background(), r)
			if got := f.calls; !slices.Equal(got, tt.want) {
				t.Fatalf("calls %q, want %q", got, tt.want)
			}
		})
	}
}

// TestResumeIndex: the plan's resumes by job and group, read per mark
// placing resumed work; a job's whole ("" group) is the sum of its groups,
// and what the plan does not resume is 0.
func TestResumeIndex(t *testing.T) {
	nb, train := engine.JobRef{Namespace: "ml", ID: "nb"}, engine.JobRef{Namespace: "ml", ID: "train"}
	plan := &engine.Plan{Actions: []engine.Action{
		{Kind: engine.Resume, Job: nb, Group: "work", GPUs: 2},
		{Kind: engine.Resume, Job: nb, Group: "side", GPUs: 1},
		{Kind: engine.Resume, Job: nb, Group: "work", GPUs: 3}, // a second resume of the group adds up
		{Kind: engine.Preempt, Job: train, Group: "work", GPUs: 4},
		{Kind: engine.Hold, Job: nb, Group: "work", GPUs: 8},
	}}
	cases := []struct {
		name  string
		plan  *engine.Plan
		ref   engine.JobRef
		group string
		want  int
	}{
		{"one group's resumes", plan, nb, "work", 5},
		{"the job's groups together", plan, nb, "", 6},
		{"a group not resumed", plan, nb, "other", 0},
		{"a preempted job is not resumed", plan, train, "work", 0},
		{"a job the plan does not name", plan, engine.JobRef{Namespace: "ml", ID: "x"}, "", 0},
		{"no plan", nil, nb, "work", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := indexResumes(tc.plan).gpus(tc.ref, tc.group); got != tc.want {
				t.Errorf("gpus(%s, %q) = %d, want %d", tc.ref, tc.group, got, tc.want)
			}
		})
	}
}
