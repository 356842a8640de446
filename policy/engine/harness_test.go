package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// harness is a tiny model of Nomad around the engine, enough to play a
// story step by step: it places queued allocations first-fit in priority
// order (as Nomad's scheduler does once capacity frees), and applies each
// plan the way the controller would once grace periods have passed.
type harness struct {
	t       *testing.T
	e       *Engine
	now     time.Time
	nodes   []Node
	jobs    []*hjob
	allocs  []Alloc
	seq     int
	history []Action
}

type hjob struct {
	job     Job
	group   string
	gpus    int // per allocation
	count   int // allocations wanted
	pool    string
	devices []string // device classes it accepts (Demand.Devices); nil: any
	nodes   []string // nodes it is pinned to (Demand.Nodes); nil: any
	queued  int      // Nomad could not place them
	held    int      // Steward holds them
	since   time.Time
	done    bool
	samples []Sample // utilisation each new allocation reports
	// preempted: preempted mid-run and not all placed again since, as the
	// controller records it (Demand.Preempted).
	preempted bool
	// requeued: held after an idle release (Demand.Requeued);
	// ownerResumed: its owner asked for it back since (Demand.OwnerResumed).
	requeued, ownerResumed bool
}

func newHarness(t *testing.T, p *policy.Policy) *harness {
	t.Helper()
	return &harness{t: t, e: New(p), now: t0}
}

func (h *harness) node(id, pool string, gpus int) {
	h.nodes = append(h.nodes, Node{ID: id, NodePool: pool, GPUs: gpus})
}

// modelNode adds a node whose GPUs are of one model; the model is its
// device class.
func (h *harness) modelNode(id, pool, model string, gpus int) {
	h.nodes = append(h.nodes, Node{ID: id, NodePool: pool, GPUs: gpus, Device: model, Model: model})
}

type jobOpt func(*hjob)

func gang() jobOpt                     { return func(j *hjob) { j.job.Gang = true } }
func inPool(p string) jobOpt           { return func(j *hjob) { j.pool = p } }
func asks(models ...string) jobOpt     { return func(j *hjob) { j.devices = models } }
func pinnedTo(nodes ...string) jobOpt  { return func(j *hjob) { j.nodes = nodes } }
func usage(s ...Sample) jobOpt         { return func(j *hjob) { j.samples = s } }
func preempted(at ...time.Time) jobOpt { return func(j *hjob) { j.job.Preemptions = at } }

// submit registers a job: count allocations of gpus GPUs each.
func (h *harness) submit(ns, id, tier string, gpus, count int, opts ...jobOpt) *hjob {
	j := &hjob{
		job:   Job{Ref: JobRef{ns, id}, Tier: tier, Priority: h.e.p.Tiers[tier].Priority},
		group: "main", gpus: gpus, count: count, queued: count, since: h.now,
	}
	for _, o := range opts {
		o(j)
	}
	h.jobs = append(h.jobs, j)
	h.schedule()
	return j
}

// snooze records a person's snooze of a job's idle rule, asked for at at,
// for d, as the controller passes it on (Job.Snooze).
func (h *harness) snooze(ns, id string, at time.Time, d time.Duration) {
	j := h.find(ns, id)
	j.job.Snooze = Snooze{At: at, Until: at.Add(d)}
	for i := range h.allocs {
		if h.allocs[i].Job.Ref == j.job.Ref {
			h.allocs[i].Job.Snooze = j.job.Snooze
		}
	}
}

func (h *harness) find(ns, id string) *hjob {
	for _, j := range h.jobs {
		if j.job.Ref == (JobRef{ns, id}) && !j.done {
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
	h.allocs = slices.DeleteFunc(h.allocs, func(a Alloc) bool { return a.Job.Ref == j.job.Ref })
	h.schedule()
}

// checkpoint records that a job's running allocations saved a checkpoint
// at the given time, as the controller reads it from the driver's events.
func (h *harness) checkpoint(ns, id string, at time.Time) {
	j := h.find(ns, id)
	for i := range h.allocs {
		if h.allocs[i].Job.Ref == j.job.Ref {
			h.allocs[i].CheckpointAt = at
		}
	}
}

func (h *harness) advance(d time.Duration) { h.now = h.now.Add(d) }

func (h *harness) free(n Node) int {
	used := 0
	for _, a := range h.allocs {
		if a.NodeID == n.ID {
			used += len(a.GPUIDs)
		}
	}
	return n.GPUs - used
}

// schedule places queued allocations, highest priority first, then in
// submission order, first fit, as Nomad does when blocked evaluations
// unblock.
func (h *harness) schedule() {
	order := slices.Clone(h.jobs)
	slices.SortStableFunc(order, func(a, b *hjob) int { return b.job.Priority - a.job.Priority })
	for _, j := range order {
		for j.queued > 0 && !j.done {
			placed := false
			for _, n := range h.nodes {
				if (j.pool == "" || j.pool == n.NodePool) && (j.devices == nil || slices.Contains(j.devices, n.Device)) &&
					(j.nodes == nil || slices.Contains(j.nodes, n.ID)) && h.free(n) >= j.gpus {
					h.seq++
					a := Alloc{ID: fmt.Sprintf("%s-%d", j.job.Ref.ID, h.seq), Job: j.job, Group: j.group,
						NodeID: n.ID, StartedAt: h.now}
					used := map[string]bool{}
					for _, o := range h.allocs {
						if o.NodeID == n.ID {
							for _, g := range o.GPUIDs {
								used[g] = true
							}
						}
					}
					for g := 0; len(a.GPUIDs) < j.gpus; g++ {
						if id := fmt.Sprintf("%s-gpu%d", n.ID, g); !used[id] {
							a.GPUIDs = append(a.GPUIDs, id)
						}
					}
					for _, s := range j.samples {
						a.Usage = append(a.Usage, Sample{At: h.now.Add(s.At.Sub(time.Time{})), Util: s.Util})
					}
					h.allocs = append(h.allocs, a)
					j.queued--
					placed = true
					break
				}
			}
			if !placed {
				break
			}
		}
		if j.queued == 0 && j.held == 0 {
			j.preempted = false
		}
	}
}

func (h *harness) snapshot() *Snapshot {
	s := &Snapshot{Nodes: slices.Clone(h.nodes), Allocs: slices.Clone(h.allocs)}
	for _, j := range h.jobs {
		if j.done {
			continue
		}
		d := Demand{Job: j.job, Group: j.group, GPUsPerAlloc: j.gpus, Since: j.since, NodePool: j.pool, Preempted: j.preempted,
			Devices: j.devices, Nodes: j.nodes}
		if j.devices != nil {
			d.Asks = "nvidia/gpu/" + strings.Join(j.devices, "|")
		}
		if j.queued > 0 {
			d.Count = j.queued
			s.Waiting = append(s.Waiting, d)
		}
		if j.held > 0 {
			d.Count, d.Held = j.held, true
			d.Requeued, d.OwnerResumed = j.requeued, j.requeued && j.ownerResumed
			s.Waiting = append(s.Waiting, d)
		}
	}
	return s
}

// step plans, applies the plan and lets the model Nomad place what it can.
func (h *harness) step() *Plan {
	h.t.Helper()
	plan := h.e.Plan(h.snapshot(), h.now)
	for _, sk := range plan.Skipped {
		h.t.Errorf("engine skipped %s: %s", sk.Item, sk.Reason)
	}
	for _, a := range plan.Actions {
		h.apply(a)
	}
	for _, w := range plan.Warnings {
		// As the controller records a warning, so that it is given once.
		for i := range h.allocs {
			if slices.Contains(w.Allocs, h.allocs[i].ID) {
				h.allocs[i].IdleWarned = h.now
			}
		}
	}
	h.history = append(h.history, plan.Actions...)
	h.schedule()
	return plan
}

func (h *harness) apply(a Action) {
	j := h.find(a.Job.Namespace, a.Job.ID)
	switch a.Kind {
	case Preempt, IdleStop:
		n := 0
		h.allocs = slices.DeleteFunc(h.allocs, func(al Alloc) bool {
			if slices.Contains(a.Allocs, al.ID) {
				n++
				return true
			}
			return false
		})
		if n != len(a.Allocs) {
			h.t.Fatalf("%s names allocations that do not run: %v", a, a.Allocs)
		}
		j.job.Preemptions = append(j.job.Preemptions, h.now)
		if a.Requeue {
			j.held += n
			j.since = h.now
			j.preempted = a.Kind == Preempt
			j.requeued, j.ownerResumed = a.Kind == IdleStop, false
		} else {
			j.done = true
		}
	case Hold:
		if a.Reason.Rule == RuleDraining {
			// Held while its victims checkpoint, resumed as they stop:
			// here they stopped at once (a step covers their grace).
			break
		}
		j.queued -= a.Count
		j.held += a.Count
	case Resume:
		j.held -= a.Count
		j.queued += a.Count
		if j.held == 0 {
			j.requeued, j.ownerResumed = false, false
		}
	case Move:
		j.pool = a.NodePool
	case Promote, SetPriority:
		j.job.Priority = a.Priority
		j.job.Promoted = a.Kind == Promote
	}
	if j.queued < 0 || j.held < 0 {
		h.t.Fatalf("%s leaves %s with %d queued, %d held", a, a.Job, j.queued, j.held)
	}
	for i := range h.allocs {
		if h.allocs[i].Job.Ref == j.job.Ref {
			h.allocs[i].Job = j.job
		}
	}
}

// running returns "ns/id×n" for each job with running allocations, sorted.
func (h *harness) running() []string {
	count := map[string]int{}
	for _, a := range h.allocs {
		count[a.Job.Ref.String()]++
	}
	var out []string
	for k, n := range count {
		out = append(out, fmt.Sprintf("%s×%d", k, n))
	}
	slices.Sort(out)
	return out
}

// held returns "ns/id×n" for each job Steward holds, sorted.
func (h *harness) heldJobs() []string {
	var out []string
	for _, j := range h.jobs {
		if j.held > 0 && !j.done {
			out = append(out, fmt.Sprintf("%s×%d", j.job.Ref, j.held))
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

