package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// cpuJob is an observed job without GPUs: one group "web" of count, in a
// node pool.
func cpuJob(ns, id, typ, pool string, count int) *ObservedJob {
	return &ObservedJob{Namespace: ns, ID: id, Type: typ, NodePool: pool, ModifyIndex: 10,
		Groups: map[string]GroupSpec{"web": {Count: count, Tasks: []string{"web"}}}}
}

// sysJob is a system job as systemCounts leaves it: Count the GPU
// allocations it runs (none observed without GPUs), PerNode its count.
func sysJob(ns, id, pool string, perNode int) *ObservedJob {
	j := cpuJob(ns, id, api.JobTypeSystem, pool, 0)
	j.Groups["web"] = GroupSpec{Count: 0, PerNode: perNode, Tasks: []string{"web"}}
	return j
}

func TestPoolRefusals(t *testing.T) {
	two := map[string][]string{"steward": {"steward-1", "steward-2"}}
	stopped := cpuJob("research", "gone", "service", "steward", 1)
	stopped.Stopped = true
	multi := cpuJob("research", "multi", "service", "steward", 2)
	multi.Groups["db"] = GroupSpec{Count: 1}
	multi.Groups["idle"] = GroupSpec{Count: 0}

	type want struct {
		job, pool string
		hold      []string
		reason    string
	}
	cases := []struct {
		name      string
		jobs      []*ObservedJob
		skipped   []*ObservedJob
		pools     []string
		poolNodes map[string][]string
		want      []want
	}{
		{
			name: "a CPU-only service job named in the controller's pool", pools: []string{"steward"}, poolNodes: two,
			jobs: []*ObservedJob{cpuJob("research", "beside", "service", "steward", 2)},
			want: []want{{"research/beside", "steward", []string{"web"},
				"node pool steward is kept for the Steward controller (2 nodes: steward-1, steward-2): tenants' work may not run there, " +
					"so Steward holds the job (group web: 2 allocations) until its owner submits it to another node pool (such as default)"}},
		},
		{
			name: "named before the pool has a node: refused all the same", pools: []string{"steward"}, poolNodes: map[string][]string{},
			jobs: []*ObservedJob{cpuJob("research", "early", "batch", "steward", 1)},
			want: []want{{"research/early", "steward", []string{"web"},
				"node pool steward is kept for the Steward controller: tenants' work may not run there, " +
					"so Steward holds the job (group web: 1 allocation) until its owner submits it to another node pool (such as default)"}},
		},
		{
			name: "a system job in all, while the pool has nodes", pools: []string{"steward"}, poolNodes: two,
			jobs: []*ObservedJob{sysJob("research", "everywhere", "all", 1)},
			want: []want{{"research/everywhere", "all", []string{"web"},
				"node pool all includes node pool steward, kept for the Steward controller (2 nodes: steward-1, steward-2): tenants' work may not run there, " +
					"so Steward holds the job (group web: 1 per node) until its owner submits it to another node pool (such as default)"}},
		},
		{
			name: "all, with no node in the controller's pool: nothing to guard", pools: []string{"steward"}, poolNodes: map[string][]string{},
			jobs: []*ObservedJob{cpuJob("research", "anywhere", "service", "all", 1)},
		},
		{
			name: "the default pool, named or not, and other pools", pools: []string{"steward"}, poolNodes: two,
			jobs: []*ObservedJob{cpuJob("research", "a", "service", "default", 1), cpuJob("research", "b", "service", "", 1),
				cpuJob("research", "c", "service", "gpu", 1)},
		},
		{
			name: "Steward's own namespace: the controller's job and placeholders", pools: []string{"steward"}, poolNodes: two,
			jobs: []*ObservedJob{cpuJob("steward", "steward-controller", "service", "steward", 2), sysJob("steward", "exporter", "all", 1)},
		},
		{
			name: "no controller pool configured: nothing is guarded", poolNodes: two,
			jobs: []*ObservedJob{cpuJob("research", "beside", "service", "steward", 2)},
		},
		{
			name: "stopped: nothing runs", pools: []string{"steward"}, poolNodes: two,
			jobs: []*ObservedJob{stopped},
		},
		{
			name: "held already: refused, nothing left to hold", pools: []string{"steward"}, poolNodes: two,
			jobs: []*ObservedJob{cpuJob("research", "held", "service", "steward", 0), sysJob("research", "sys", "all", 0)},
			want: []want{{job: "research/held", pool: "steward"}, {job: "research/sys", pool: "all"}},
		},
		{
			name: "every group with a count, in order", pools: []string{"steward"}, poolNodes: two,
			jobs: []*ObservedJob{multi},
			want: []want{{"research/multi", "steward", []string{"db", "web"},
				"node pool steward is kept for the Steward controller (2 nodes: steward-1, steward-2): tenants' work may not run there, " +
					"so Steward holds the job (groups db: 1 allocation, web: 2 allocations) until its owner submits it to another node pool (such as default)"}},
		},
		{
			name: "a periodic child the view leaves out (skipped)", pools: []string{"steward"}, poolNodes: two,
			skipped: []*ObservedJob{cpuJob("research", "cron/periodic-1", "batch", "steward", 1)},
			want: []want{{"research/cron/periodic-1", "steward", []string{"web"},
				"node pool steward is kept for the Steward controller (2 nodes: steward-1, steward-2): tenants' work may not run there, " +
					"so Steward holds the job (group web: 1 allocation) until its owner submits it to another node pool (such as default)"}},
		},
		{
			name: "all reaches two controller pools; many nodes named by the first three", pools: []string{"ctl", "steward"},
			poolNodes: map[string][]string{"ctl": {"c1", "c2", "c3"}, "steward": {"steward-1", "steward-2"}},
			jobs:      []*ObservedJob{cpuJob("ml", "x", "service", "all", 1)},
			want: []want{{"ml/x", "all", []string{"web"},
				"node pool all includes node pools ctl, steward, kept for the Steward controller (5 nodes: c1, c2, c3 and 2 more): tenants' work may not run there, " +
					"so Steward holds the job (group web: 1 allocation) until its owner submits it to another node pool (such as default)"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := &Observation{Jobs: map[jobKey]*ObservedJob{}, Skipped: map[jobKey]*ObservedJob{}, PoolNodes: tc.poolNodes}
			for _, j := range tc.jobs {
				obs.Jobs[jobKey{j.Namespace, j.ID}] = j
			}
			for _, j := range tc.skipped {
				obs.Skipped[jobKey{j.Namespace, j.ID}] = j
			}
			got := poolRefusals(obs, tc.pools, "steward")
			if len(got) != len(tc.want) {
				t.Fatalf("got %d refusals %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Job.String() != w.job || g.Pool != w.pool || !slices.Equal(g.Hold, w.hold) {
					t.Errorf("refusal %d: %s in %s holding %v, want %s in %s holding %v", i, g.Job, g.Pool, g.Hold, w.job, w.pool, w.hold)
				}
				if g.Reason.Rule != ruleControllerPool {
					t.Errorf("rule %q, want %q", g.Reason.Rule, ruleControllerPool)
				}
				if w.reason != "" && g.Reason.Message != w.reason {
					t.Errorf("reason:\n got %s\nwant %s", g.Reason.Message, w.reason)
				}
			}
		})
	}
}

// TestAdmitSkipped: a job the view leaves out joins the round's jobs when
// the guard refuses it or Steward has state for it (its holds must end as
// any job's do), and not otherwise.
func TestAdmitSkipped(t *testing.T) {
	in := cpuJob("research", "in/periodic-1", "batch", "steward", 1)
	moved := cpuJob("research", "moved/periodic-1", "batch", "default", 1)
	other := cpuJob("research", "other/periodic-1", "batch", "default", 1)
	own := cpuJob("steward", "x/periodic-1", "batch", "steward", 1)
	obs := &Observation{Jobs: map[jobKey]*ObservedJob{}, Skipped: map[jobKey]*ObservedJob{}, PoolNodes: map[string][]string{"steward": {"s1"}}}
	for _, j := range []*ObservedJob{in, moved, other, own} {
		obs.Skipped[jobKey{j.Namespace, j.ID}] = j
	}
	admitSkipped(obs, []string{"steward"}, "steward", func(k jobKey) bool { return k.ID == "moved/periodic-1" })
	var got []string
	for k := range obs.Jobs {
		got = append(got, k.String())
	}
	slices.Sort(got)
	if want := []string{"research/in/periodic-1", "research/moved/periodic-1"}; !slices.Equal(got, want) {
		t.Errorf("admitted %v, want %v", got, want)
	}
}

func TestValidateControllerPools(t *testing.T) {
	for _, tc := range []struct {
		pools []string
		err   string
	}{
		{nil, ""},
		{[]string{"steward"}, ""},
		{[]string{"steward", "ctl"}, ""},
		{[]string{"default"}, "-controller-pool default: Steward would hold every tenant's job there"},
		{[]string{"steward", "all"}, "-controller-pool all: Steward would hold every tenant's job there"},
		{[]string{""}, "empty node pool name"},
	} {
		err := validateControllerPools(tc.pools)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.pools, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: got %v, want %q", tc.pools, err, tc.err)
		}
	}
}

// apiCPUJob is a tenant's job without GPUs, group "web", in a node pool.
func apiCPUJob(ns, id, typ, pool string, count int) *api.Job {
	prio := 50
	task := &api.Task{Name: "web", Driver: "raw_exec", Resources: &api.Resources{}}
	return &api.Job{ID: &id, Namespace: &ns, Type: &typ, Priority: &prio, NodePool: &pool, JobModifyIndex: ptr(uint64(10)),
		TaskGroups: []*api.TaskGroup{{Name: ptr("web"), Count: &count, Tasks: []*api.Task{task}}}}
}

// TestPoolGuardRounds: whole rounds over the fake cluster with a node in
// pool steward. Tenants' jobs there (a CPU-only service, a GPU job, a
// system job in all) are held in the first round, every group to 0, with
// the reason in their records; Steward's own job and a job in the default
// pool are left alone. Nothing resumes them, not even the GPU job on free
// GPUs; one its owner scales up in place is held again; one its owner
// submits to the default pool runs, its record says so.
func TestPoolGuardRounds(t *testing.T) {
	f := newFakeNomad()
	cl := f.cl()
	// GPUs on the controller's node too: free, and still no tenant's.
	ctl := apiNode("steward-1", 2)
	ctl.NodePool = "steward"
	cl.nodes = []*api.NodeListStub{apiNode("n1", 4), ctl}
	gpu := apiJob("a", "gpu-beside", "training", 40, 1, 1)
	gpu.NodePool = ptr("steward")
	for _, j := range []*api.Job{
		apiCPUJob("a", "beside", api.JobTypeService, "steward", 2),
		apiCPUJob("a", "everywhere", api.JobTypeSystem, "all", 1),
		apiCPUJob("a", "fine", api.JobTypeService, "default", 1),
		apiCPUJob("steward", "steward-controller", api.JobTypeService, "steward", 2),
		gpu,
	} {
		cl.jobs[*j.Namespace+"/"+*j.ID] = j
	}
	r := newRoundRunner(t, f, withConfig(func(cfg *Config) { cfg.ControllerPools = []string{"steward"} }))
	guard := func() { r.c.obs.cache.guard(r.c.cfg().ControllerPools) }
	guard()

	writes, err := r.round(0)
	if err != nil {
		t.Fatal(err)
	}
	var scales []string
	for _, w := range writes {
		if strings.HasPrefix(w, "scale") {
			scales = append(scales, w[:strings.Index(w, ":")])
		}
	}
	if want := []string{"scale a/beside web 0", "scale a/everywhere web 0", "scale a/gpu-beside work 0"}; !slices.Equal(scales, want) {
		t.Fatalf("first round's scales %v, want %v (all writes: %q)", scales, want, writes)
	}
	rec := f.vars["a:nomad/jobs/beside"]
	if !strings.HasPrefix(rec["steward_reason"], "node pool steward is kept for the Steward controller (1 node: steward-1)") ||
		rec["steward_state"] != StatusHeld || rec["steward_rule"] != ruleControllerPool || rec["steward_held"] != "2 allocations" {
		t.Errorf("record of a/beside: %v", rec)
	}
	if rec := f.vars["a:nomad/jobs/everywhere"]; !strings.HasPrefix(rec["steward_reason"], "node pool all includes node pool steward") {
		t.Errorf("record of a/everywhere: %v", rec)
	}
	if rec := f.vars["a:nomad/jobs/fine"]; rec["steward_reason"] != "" {
		t.Errorf("a job in the default pool got a record: %v", rec)
	}
	for _, id := range []string{"a/fine", "steward/steward-controller"} {
		if n := *cl.jobs[id].TaskGroups[0].Count; n == 0 {
			t.Errorf("%s scaled to 0", id)
		}
	}

	// Free GPUs and held work: nothing is resumed, round after round, and
	// a restarted controller (state from the variables) holds them too.
	for i := 1; i <= 3; i++ {
		if i == 2 {
			r.restart()
			guard()
		}
		writes, err := r.round(time.Duration(i) * time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range writes {
			if strings.HasPrefix(w, "scale") {
				t.Errorf("round %d: %s", i, w)
			}
		}
	}

	// Its owner scales it up where it is: held again.
	cl.jobs["a/beside"].TaskGroups[0].Count = ptr(3)
	cl.jobs["a/beside"].JobModifyIndex = ptr(uint64(500))
	writes, _ = r.round(5 * time.Minute)
	if !slices.ContainsFunc(writes, func(w string) bool { return strings.HasPrefix(w, "scale a/beside web 0: Steward holds 3 allocations") }) {
		t.Errorf("scaled up in pool steward, not held again: %q", writes)
	}

	// Its owner submits it to the default pool: it runs, and stays.
	cl.jobs["a/beside"].NodePool = ptr("default")
	cl.jobs["a/beside"].TaskGroups[0].Count = ptr(2)
	cl.jobs["a/beside"].JobModifyIndex = ptr(uint64(600))
	for i := 6; i < 9; i++ {
		writes, _ = r.round(time.Duration(i) * time.Minute)
		for _, w := range writes {
			if strings.Contains(w, "a/beside") {
				t.Errorf("round %d after the move: %s", i, w)
			}
		}
	}
	if n := *cl.jobs["a/beside"].TaskGroups[0].Count; n != 2 {
		t.Errorf("a/beside count %d after its move, want its owner's 2", n)
	}
	rec = f.vars["a:nomad/jobs/beside"]
	if rec["steward_state"] != StatusRunning || rec["steward_held"] != "" ||
		rec["steward_reason"] != "its owner submitted it to node pool default: Steward no longer holds it for the controller's node pool" {
		t.Errorf("record of a/beside after its move: %v", rec)
	}
}

// childJSON is a job the view leaves out (skipJobType: a periodic child
// as the function reads one) in a node pool.
const childJSON = `{"ID":"cron/periodic-1","ParentID":"cron","Namespace":"ml","Type":"batch","NodePool":%q,"JobModifyIndex":%d,
	"Periodic":{"Enabled":true},"TaskGroups":[{"Name":"web","Count":1,"Tasks":[{"Name":"web","Driver":"raw_exec"}]}]}`

// TestCacheKeepsSkippedForTheGuard: the jobs the view leaves out are kept
// apart only while pools are guarded; an event about one matters to a
// plan when it can run on the controller's nodes, or could before (moved
// away); a deregistration drops it; a full read keeps it, its pool
// included (the list's stub has none: the spec is read).
func TestCacheKeepsSkippedForTheGuard(t *testing.T) {
	k := jobKey{"ml", "cron/periodic-1"}
	c := newClusterCache("steward")
	if relevant, _ := c.apply(event(t, 10, "Job", "JobRegistered", "Job", fmt.Sprintf(childJSON, "steward", 10))); relevant || len(c.skipped) != 0 {
		t.Errorf("without guarded pools: relevant %v, kept %d", relevant, len(c.skipped))
	}
	c.guard([]string{"steward"})
	for i, step := range []struct {
		pool     string
		relevant bool
	}{
		{"default", false}, {"steward", true}, {"default", true}, {"all", true}, {"gpu", true}, {"gpu", false},
	} {
		index := 20 + i
		relevant, _ := c.apply(event(t, index, "Job", "JobRegistered", "Job", fmt.Sprintf(childJSON, step.pool, index)))
		if relevant != step.relevant || c.skipped[k] == nil || c.skipped[k].NodePool != step.pool {
			t.Errorf("step %d (pool %s): relevant %v, want %v; kept %+v", i, step.pool, relevant, step.relevant, c.skipped[k])
		}
		if _, ok := c.jobs[k]; ok {
			t.Errorf("step %d: a skipped job in the view's jobs", i)
		}
	}
	gone := event(t, 40, "Job", "JobDeregistered", "Job", fmt.Sprintf(childJSON, "gpu", 40))
	gone.Events[0].Payload["Deleted"] = true
	c.apply(gone)
	if c.skipped[k] != nil {
		t.Error("a purged skipped job kept")
	}

	// A full read: the spec is read for the pool, and the round sees it
	// with the controller's nodes.
	f := newFakeNomad()
	cl := f.cl()
	ctl := apiNode("steward-1", 0)
	ctl.NodePool = "steward"
	cl.nodes = []*api.NodeListStub{ctl}
	child := apiCPUJob("ml", "cron/periodic-1", api.JobTypeBatch, "steward", 1)
	child.ParentID = ptr("cron")
	child.Periodic = &api.PeriodicConfig{Enabled: ptr(true)}
	cl.jobs["ml/cron/periodic-1"] = child
	o := newObserver(f, "steward")
	o.cache.guard([]string{"steward"})
	rd, err := o.readAll(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if j := rd.skipped[k]; j == nil || j.NodePool != "steward" {
		t.Fatalf("full read: skipped %+v", rd.skipped)
	}
}
