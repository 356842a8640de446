package engine_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// harness plays a story step by step: the engine over policy/nomadmodel,
// the one model of Nomad as the controller drives it (the simulator and
// the forecast's replay use it too). A step is one controller round: the
// drains whose grace is over finish, the engine plans, the plan is carried
// out as the controller carries it (a preemption's victims drain through
// their grace, the GPUs it sets aside stay set aside between steps), and
// Nomad places its queue (by priority, then how long each waited, each
// allocation on the fullest node that fits it).
//
// Beside Nomad's state it keeps what the controller reads from elsewhere:
// utilisation (the device plugin), checkpoints written (the driver's
// events) and idle warnings given (the job's records), by allocation.
type harness struct {
	t       *testing.T
	p       *policy.Policy
	e       *engine.Engine
	now     time.Time
	nodes   []engine.Node // fixed once the cluster starts
	c       *nomadmodel.Cluster
	jobs    []*hjob
	history []engine.Action
	util    map[string][]engine.Sample // reported, overriding the job's samples
	saved   map[string]time.Time       // checkpoints written
	warned  map[string]time.Time       // idle warnings given
	usage   map[string]float64         // tenants' decayed GPU use (Snapshot.Usage)
}

// hjob is a story's job: its one group in the model.
type hjob struct {
	*nomadmodel.Group
	samples []engine.Sample // utilisation each new allocation reports, from its start
	done    bool
}

func newHarness(t *testing.T, p *policy.Policy) *harness {
	t.Helper()
	return &harness{t: t, p: p, e: engine.New(p), now: t0, util: map[string][]engine.Sample{},
		saved: map[string]time.Time{}, warned: map[string]time.Time{}}
}

func (h *harness) node(id, pool string, gpus int) {
	h.addNode(engine.Node{ID: id, NodePool: pool, GPUs: gpus})
}

// modelNode adds a node whose GPUs are of one model; the model is its
// device class.
func (h *harness) modelNode(id, pool, model string, gpus int) {
	h.addNode(engine.Node{ID: id, NodePool: pool, GPUs: gpus, Device: model, Model: model})
}

func (h *harness) addNode(n engine.Node) {
	h.t.Helper()
	if h.c != nil {
		h.t.Fatalf("node %s added after the cluster started", n.ID)
	}
	h.nodes = append(h.nodes, n)
}

// cluster is the model, started on the nodes added so far.
func (h *harness) cluster() *nomadmodel.Cluster {
	if h.c == nil {
		h.t.Helper() // here only: the over-time test calls this per job per step
		c, err := nomadmodel.New(h.nodes)
		if err != nil {
			h.t.Fatal(err)
		}
		h.c = c
	}
	return h.c
}

// submit registers a job: count allocations of gpus GPUs each, and lets
// Nomad place what fits.
func (h *harness) submit(ns, id, tier string, gpus, count int, opts ...jobOpt) *hjob {
	h.t.Helper()
	j := &hjob{Group: &nomadmodel.Group{Job: engine.Job{Ref: engine.JobRef{Namespace: ns, ID: id}, Tier: tier,
		Priority: h.p.Tiers[tier].Priority}, Name: "main", GPUsPerAlloc: gpus, Count: count, Since: h.now}}
	for _, o := range opts {
		o(j)
	}
	g, err := h.cluster().AddGroup(*j.Group)
	if err != nil {
		h.t.Fatal(err)
	}
	j.Group = g
	h.jobs = append(h.jobs, j)
	h.c.Place(h.now)
	return j
}

// snooze records a person's snooze of a job's idle rule, asked for at at,
// for d, as the controller passes it on (Job.Snooze).
func (h *harness) snooze(ns, id string, at time.Time, d time.Duration) {
	h.find(ns, id).Job.Snooze = engine.Snooze{At: at, Until: at.Add(d)}
}

func (h *harness) find(ns, id string) *hjob {
	h.t.Helper()
	for _, j := range h.jobs {
		if j.Job.Ref == (engine.JobRef{Namespace: ns, ID: id}) && !j.done {
			return j
		}
	}
	h.t.Fatalf("no job %s/%s", ns, id)
	return nil
}

// finish ends a job: its allocations complete and free their GPUs.
func (h *harness) finish(ns, id string) {
	j := h.find(ns, id)
	j.done = true
	h.c.Complete(j.Job.Ref)
	h.c.Place(h.now)
}

// checkpoint records that a job's running allocations saved a checkpoint
// at the given time, as the controller reads it from the driver's events.
func (h *harness) checkpoint(ns, id string, at time.Time) {
	ref := h.find(ns, id).Job.Ref
	for _, a := range h.allocs() {
		if a.Job.Ref == ref {
			h.saved[a.ID] = at
		}
	}
}

func (h *harness) advance(d time.Duration) { h.now = h.now.Add(d) }

// allocs is what runs (draining allocations included), as the engine
// sees it.
func (h *harness) allocs() []engine.Alloc { return h.snapshot().Allocs }

// queued is what Nomad has yet to place of j.
func (h *harness) queued(j *hjob) int { return h.cluster().Queued(j.Group) }

// busy reports whether anything runs or is held.
func (h *harness) busy() bool {
	for _, j := range h.jobs {
		if !j.done && (j.Held > 0 || j.Count > h.queued(j)) {
			return true
		}
	}
	return false
}

// snapshot is the cluster as the controller reads it for the engine.
func (h *harness) snapshot() *engine.Snapshot {
	s := h.cluster().Snapshot()
	s.Usage = h.usage
	samples := map[engine.JobRef][]engine.Sample{}
	for _, j := range h.jobs {
		if !j.done && j.samples != nil {
			samples[j.Job.Ref] = j.samples
		}
	}
	for i := range s.Allocs {
		a := &s.Allocs[i]
		a.CheckpointAt, a.IdleWarned = h.saved[a.ID], h.warned[a.ID]
		if u, ok := h.util[a.ID]; ok {
			a.Usage = u
			continue
		}
		for _, smp := range samples[a.Job.Ref] {
			a.Usage = append(a.Usage, engine.Sample{At: a.StartedAt.Add(smp.At.Sub(time.Time{})), Util: smp.Util})
		}
	}
	for i := range s.Waiting {
		if d := &s.Waiting[i]; d.Devices != nil {
			d.Asks = "nvidia/gpu/" + strings.Join(d.Devices, "|")
		}
	}
	return s
}

// step is one controller round at h.now: it returns the plan.
func (h *harness) step() *engine.Plan {
	h.t.Helper()
	h.cluster().Advance(h.now)
	plan := h.e.Plan(h.snapshot(), h.now)
	for _, sk := range plan.Skipped {
		h.t.Errorf("engine skipped %s: %s", sk.Item, sk.Reason)
	}
	h.carry(plan)
	return plan
}

// carry carries a plan out at h.now as the controller does, and Nomad
// places its queue.
func (h *harness) carry(plan *engine.Plan) {
	h.t.Helper()
	if err := h.cluster().CarryOut(plan, h.now); err != nil {
		h.t.Fatal(err)
	}
	for _, w := range plan.Warnings {
		for _, id := range w.Allocs {
			h.warned[id] = h.now // as the controller records it, so that it is given once
		}
	}
	h.history = append(h.history, plan.Actions...)
}

// playDrains lets the drains in progress run their grace: time moves on
// to when the last of their victims stops, and the round then (which
// finishes the drains and resumes the work that waited for them) runs.
// It returns that round's plan; a story that calls it with nothing
// draining fails (its victims stopped at once: it reads wrong).
func (h *harness) playDrains() *engine.Plan {
	h.t.Helper()
	end := h.cluster().DrainsEnd()
	if end.IsZero() {
		h.t.Fatal("playDrains: no drain in progress")
	}
	h.now = end
	return h.step()
}

// running returns "ns/id×n" for each job with running allocations
// (draining ones included), sorted.
func (h *harness) running() []string {
	count := map[string]int{}
	for _, a := range h.allocs() {
		count[a.Job.Ref.String()]++
	}
	var out []string
	for k, n := range count {
		out = append(out, fmt.Sprintf("%s×%d", k, n))
	}
	slices.Sort(out)
	return out
}

// heldJobs returns "ns/id×n" for each job Steward holds, sorted.
func (h *harness) heldJobs() []string {
	var out []string
	for _, j := range h.jobs {
		if j.Held > 0 && !j.done {
			out = append(out, fmt.Sprintf("%s×%d", j.Job.Ref, j.Held))
		}
	}
	slices.Sort(out)
	return out
}

func (h *harness) expect(what string, got, want []string) {
	h.t.Helper()
	if !slices.Equal(got, want) {
		h.t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
	}
}
