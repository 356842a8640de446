package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

// Builders of the fake cluster's API objects: a GPU node, a job with one
// GPU group "work", its allocations and a blocked evaluation.

func apiNode(id string, gpus int) *api.NodeListStub {
	var inst []*api.NodeDevice
	for i := range gpus {
		inst = append(inst, &api.NodeDevice{ID: fmt.Sprintf("%s-gpu%d", id, i), Healthy: true})
	}
	return &api.NodeListStub{ID: id, Name: id, NodePool: "default", Status: api.NodeStatusReady,
		SchedulingEligibility: api.NodeSchedulingEligible,
		Drivers:               map[string]*api.DriverInfo{"raw_exec": {Detected: true, Healthy: true}},
		NodeResources:         &api.NodeResources{Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "sim", Instances: inst}}}}
}

func apiJob(ns, id, tier string, priority, count, gpus int) *api.Job {
	g := uint64(gpus)
	task := &api.Task{Name: "work", Driver: "raw_exec", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "gpu", Count: &g}}}}
	j := &api.Job{ID: &id, Namespace: &ns, Type: ptr("service"), Priority: &priority, Meta: map[string]string{"steward.tier": tier},
		JobModifyIndex: ptr(uint64(10)), TaskGroups: []*api.TaskGroup{{Name: ptr("work"), Count: &count, Tasks: []*api.Task{task}}}}
	return j
}

func apiAlloc(id string, j *api.Job, node string, gpuIDs []string, started time.Time) *api.AllocationListStub {
	return &api.AllocationListStub{ID: id, Name: *j.ID + ".work[0]", Namespace: *j.Namespace, JobID: *j.ID, TaskGroup: "work", NodeID: node,
		ClientStatus: "running", DesiredStatus: "run", CreateTime: started.UnixNano(),
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"work": {Devices: []*api.AllocatedDeviceResource{{Type: "gpu", DeviceIDs: gpuIDs}}}}},
		TaskStates: map[string]*api.TaskState{"work": {State: "running", StartedAt: started}}}
}

func apiBlockedEval(j *api.Job, queued int, at time.Time) (*api.Evaluation, *api.JobSummary) {
	ev := &api.Evaluation{ID: "eval-" + *j.ID, Namespace: *j.Namespace, JobID: *j.ID, Status: "blocked",
		CreateTime: at.UnixNano(), ModifyTime: at.UnixNano(),
		FailedTGAllocs: map[string]*api.AllocationMetric{"work": {DimensionExhausted: map[string]int{"devices: no GPUs free": 1}}}}
	sum := &api.JobSummary{JobID: *j.ID, Namespace: *j.Namespace, Summary: map[string]api.TaskGroupSummary{"work": {Queued: queued}}}
	return ev, sum
}

// roundRunner runs whole rounds of a controller over the fake cluster:
// each round at a time since t0, then Nomad's scheduler (the fake's).
type roundRunner struct {
	t     *testing.T
	f     *fakeNomad
	c     *Controller
	clock time.Time
	opts  []testOption // what restart makes each controller with
}

func newRoundRunner(t *testing.T, f *fakeNomad, opts ...testOption) *roundRunner {
	r := &roundRunner{t: t, f: f, opts: opts}
	r.restart()
	return r
}

// restart replaces the controller with a new one that loads its state
// from the variables, as after a crash.
func (r *roundRunner) restart() {
	c := testController(r.t, r.f, append([]testOption{withClock(func() time.Time { return r.clock })}, r.opts...)...)
	// The fake sends no events: every round reads the cluster in full
	// (cache_test.go covers following events).
	c.obs.resync = time.Nanosecond
	c.reload = true
	r.c = c
}

// round runs one round at t0+after and returns its writes to Nomad (state
// variables left out); errors of the round are returned, not fatal.
func (r *roundRunner) round(after time.Duration) ([]string, error) {
	r.clock = t0.Add(after)
	r.f.mu.Lock()
	r.f.calls = nil
	r.f.mu.Unlock()
	_, err := r.c.reconcile(context.Background())
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var writes []string
	for _, call := range r.f.calls {
		if !strings.HasPrefix(call, "put ") && !strings.HasPrefix(call, "delete ") {
			writes = append(writes, call)
		}
	}
	r.f.cl().schedule(r.clock)
	return writes, err
}

// count is a group's count in the fake cluster.
func (r *roundRunner) count(ns, id string) int {
	return *r.f.cl().jobs[ns+"/"+id].TaskGroups[0].Count
}

// running counts a job's allocations in the fake cluster.
func (r *roundRunner) running(ns, id string) int {
	n := 0
	for _, a := range r.f.cl().allocs {
		if a.Namespace == ns && a.JobID == id {
			n++
		}
	}
	return n
}

type roundStep struct {
	after time.Duration
	want  []string // the round's writes, in order
}

// preemptionCluster: one node of 4 GPUs that ml/train (training, 4 GPUs)
// holds, and ml/nb (interactive, 2 GPUs) blocked.
func preemptionCluster(f *fakeNomad) {
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 4)}
	train := apiJob("ml", "train", "training", 40, 1, 4)
	nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
	cl.jobs["ml/train"], cl.jobs["ml/nb"] = train, nb
	cl.allocs = []*api.AllocationListStub{apiAlloc("a-train", train, "n1", []string{"n1-gpu0", "n1-gpu1", "n1-gpu2", "n1-gpu3"}, t0.Add(-2*time.Hour))}
	ev, sum := apiBlockedEval(nb, 1, t0.Add(-time.Second))
	cl.evals, cl.summary["ml/nb"] = []*api.Evaluation{ev}, sum
}

var preemptionSteps = []roundStep{
	{0, []string{"scale ml/nb work 0: Steward holds 1 allocation: GPUs are being freed for it: 4 GPUs of ml/train checkpoint for up to 2m; held until they stop, so that no other work takes them"}},
	{signalDelay, []string{"signal ml a-train SIGUSR1"}},
	{signalDelay + 2*time.Minute, []string{
		"scale ml/train work 0: Steward preempts 1 allocation: tier training (priority 40) yields 4 GPUs to ml/nb/work, tier interactive (priority 60)",
		"scale-ahead ml/nb work 1"}},
	{signalDelay + 2*time.Minute + time.Second, nil},
}

// TestWholeRound runs whole control rounds (observe through the fake's
// reads, plan, act, record) on a node whose 4 GPUs a training job holds
// while an interactive job waits for 2: the round preempts the training
// job with a grace and holds the interactive job; a round after the signal
// delay signals; the round at the deadline holds the victim and resumes
// the beneficiary ahead of the queue, which Nomad then places.
func TestWholeRound(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	r := newRoundRunner(t, f)
	for _, step := range preemptionSteps {
		got, err := r.round(step.after)
		if err != nil {
			t.Fatalf("round at %s: %v", step.after, err)
		}
		if !slices.Equal(got, step.want) {
			t.Fatalf("round at %s: writes\n%q\nwant\n%q", step.after, got, step.want)
		}
	}
	if r.count("ml", "train") != 0 || r.running("ml", "nb") != 1 || !r.c.states()[jobKey{"ml", "train"}].holds("work") {
		t.Errorf("end: ml/train count %d, ml/nb running %d, ml/train held %v", r.count("ml", "train"), r.running("ml", "nb"),
			r.c.states()[jobKey{"ml", "train"}] != nil)
	}
}

// faultRounds are the rounds a faulty run gets: the clean run's, and a few
// after them in which the controller finishes what failed.
var faultRounds = append(slices.Clone(preemptionSteps), roundStep{after: 3 * time.Minute},
	roundStep{after: 3*time.Minute + 5*time.Second}, roundStep{after: 4 * time.Minute}, roundStep{after: 5 * time.Minute})

// TestWholeRoundFailures fails each write of TestWholeRound's rounds once
// in turn, and separately restarts the controller before each round: later
// rounds finish the work, and it ends as without a fault, the victim held
// (so that it resumes when GPUs free up) and the beneficiary running.
func TestWholeRoundFailures(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	clean := newRoundRunner(t, f)
	var calls []string
	for _, step := range preemptionSteps {
		if _, err := clean.round(step.after); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, f.calls...)
	}
	type fault struct {
		name    string
		failing string // a write that fails once
		restart int    // restart the controller before this round (1-based)
	}
	var faults []fault
	for _, call := range calls {
		if !slices.ContainsFunc(faults, func(f fault) bool { return f.failing == call }) {
			faults = append(faults, fault{name: "fail " + call, failing: call})
		}
	}
	for i := range preemptionSteps {
		faults = append(faults, fault{name: fmt.Sprintf("restart before round %d", i+1), restart: i + 1})
	}
	for _, ft := range faults {
		t.Run(ft.name, func(t *testing.T) {
			f := newFakeNomad()
			preemptionCluster(f)
			if ft.failing != "" {
				f.failNext = map[string]int{ft.failing: 1}
			}
			r := newRoundRunner(t, f)
			for i, step := range faultRounds {
				if i+1 == ft.restart {
					r.restart()
				}
				r.round(step.after) // errors are retried by the next round
			}
			st := r.c.states()[jobKey{"ml", "train"}]
			if r.count("ml", "train") != 0 || st == nil || !st.holds("work") {
				t.Errorf("ml/train: count %d, held by Steward %v: a victim must end held, to be resumed", r.count("ml", "train"), st != nil && st.holds("work"))
			}
			if r.running("ml", "nb") != 1 {
				t.Errorf("ml/nb runs %d allocations, want 1: the preemption must end with its beneficiary running", r.running("ml", "nb"))
			}
			if f.failNext[ft.failing] != 0 {
				t.Errorf("the fault was never injected")
			}
		})
	}
}

// TestWholeRoundIdle: a notebook idle for 20 minutes (two stats sweeps
// through the fake) holds the only 2 GPUs while a training job waits,
// held: the round requeues the notebook (the test policy's idle rule:
// interactive, under 10% for 15m, under pressure) and resumes the training
// job onto its GPUs, which Nomad then places.
func TestWholeRoundIdle(t *testing.T) {
	f := newFakeNomad()
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
	nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
	train := apiJob("ml", "train", "training", 40, 1, 2)
	cl.jobs["ml/nb"], cl.jobs["ml/train"] = nb, train
	gpus := []string{"n1-gpu0", "n1-gpu1"}
	cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", gpus, t0.Add(-time.Hour))}
	cl.stats["n1"] = gpuStats(gpus, 1)
	ev, sum := apiBlockedEval(train, 1, t0.Add(-time.Second))
	cl.evals, cl.summary["ml/train"] = []*api.Evaluation{ev}, sum
	r := newRoundRunner(t, f)
	// Twenty minutes ago: the round holds the training job (nothing is
	// free) and finds the notebook's node to sweep; the sweep finds it at
	// 1%.
	hold := []string{"scale ml/train work 0: Steward holds 1 allocation: needs 2 GPUs on one node in any node; none free, " +
		"and nothing may be preempted for tier training (priority 40) of tenant ml (holds 2, reserve 0)"}
	if w, err := r.round(-20 * time.Minute); err != nil || !slices.Equal(w, hold) {
		t.Fatalf("first round: %q, %v; want %q", w, err, hold)
	}
	r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
	// Now: still at 1%.
	r.clock = t0
	r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
	got, err := r.round(0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"scale ml/nb work 0: Steward requeues (idle) 1 allocation: GPU utilisation 1% (under 10%) for 20m " +
		"(idle rule notebooks: after 15m, mode pressure); 2 GPUs go to ml/train/work, which waits for 2; job requeued",
		"scale-ahead ml/train work 1"}
	if !slices.Equal(got, want) {
		t.Fatalf("writes\n%q\nwant\n%q", got, want)
	}
	if r.count("ml", "nb") != 0 || r.running("ml", "train") != 1 {
		t.Errorf("after: ml/nb count %d, ml/train running %d", r.count("ml", "nb"), r.running("ml", "train"))
	}
}

// Steward's own writes move a job's modify index: a later write to the
// same job in the round is conditional on the new one, so promoting a job
// and then holding it in one round does not refuse the hold as "changed
// since it was read", and the hold is not then mistaken for the owner's
// change.
func TestOwnWritesInOneRound(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	r := newRoundRunner(t, f)
	rr := roundWith([]*ObservedJob{toObservedJob(f.cl().jobs["ml/train"])}, nil)
	ref := engine.JobRef{Namespace: "ml", ID: "train"}
	for _, a := range []engine.Action{
		{Kind: engine.Promote, Job: ref, Priority: 50, Reason: engine.Reason{Rule: engine.RulePromoteAge, Message: "waited"}},
		{Kind: engine.Hold, Job: ref, Group: "work", Count: 1, GPUs: 4, Reason: engine.Reason{Rule: engine.RuleCapacity, Message: "full"}},
	} {
		if err := r.c.execute(context.Background(), rr, a); err != nil {
			t.Fatalf("%s: %v", a.Kind, err)
		}
	}
	if r.count("ml", "train") != 0 {
		t.Fatalf("ml/train's count is %d: the hold did not apply", r.count("ml", "train"))
	}
	r.c.syncHolds(context.Background(), roundWith([]*ObservedJob{toObservedJob(f.cl().jobs["ml/train"])}, nil))
	if !r.c.states()[jobKey{"ml", "train"}].holds("work") {
		t.Errorf("the hold was taken for its owner's change and dropped")
	}
}
