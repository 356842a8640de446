package scale

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// kind is a kind of work the harness submits.
type kind struct {
	tenant, tier string
	gpus, count  int           // GPUs per allocation, allocations (a gang when > 1)
	run          time.Duration // mean run time
	idle         float64       // share of jobs whose GPUs idle (notebooks left open)
	weight       int           // share of submissions
}

// kinds is the mix: mostly one-GPU interactive, build and training work,
// some four-GPU training and two-allocation gangs, a little inference
// (about 1.2 GPUs per allocation); product and research own reserves,
// platform borrows.
var kinds = []kind{
	{"product", "inference", 1, 1, 30 * time.Minute, 0, 5},
	{"product", "build", 1, 1, 2 * time.Minute, 0, 15},
	{"product", "interactive", 1, 1, 20 * time.Minute, 0.5, 15},
	{"research", "interactive", 1, 1, 20 * time.Minute, 0.5, 15},
	{"research", "training", 4, 1, 15 * time.Minute, 0.05, 5},
	{"research", "training", 1, 1, 15 * time.Minute, 0.05, 10},
	{"research", "training", 2, 2, 15 * time.Minute, 0, 5},
	{"platform", "training", 1, 1, 10 * time.Minute, 0, 20},
	{"platform", "interactive", 1, 1, 10 * time.Minute, 0.5, 10},
}

// workload submits jobs and ends allocations as their run time passes,
// and tells the fleet how busy each GPU is.
type workload struct {
	rng *rand.Rand
	seq int

	mu sync.Mutex
	// jobs by "ns/id": how long each allocation runs, whether it idles.
	jobs map[string]jobPlan
	// util by GPU ID, from the allocations the last sync saw running.
	util map[string]int
	// ends by allocation ID: when it finishes.
	ends map[string]time.Time
	// idleCap is how many GPUs the outstanding jobs that idle may hold
	// (idleBudget), idleHeld how many they hold: a job drawn to idle past
	// the cap is busy.
	idleCap, idleHeld int
}

type jobPlan struct {
	run  time.Duration
	idle bool
	gpus int // all its allocations', for the idle budget
}

func newWorkload(seed uint64, idleCap int) *workload {
	return &workload{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), jobs: map[string]jobPlan{}, util: map[string]int{},
		ends: map[string]time.Time{}, idleCap: idleCap}
}

// release gives back the idle budget of the job "ns/id", which finished.
func (w *workload) release(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.jobs[key]; p.idle {
		w.idleHeld -= p.gpus
		p.idle = false // released once
		w.jobs[key] = p
	}
}

// next returns a new job of a kind drawn by weight.
func (w *workload) next() *api.Job {
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	n := w.rng.IntN(total)
	var k kind
	for _, k = range kinds {
		if n < k.weight {
			break
		}
		n -= k.weight
	}
	w.seq++
	id := fmt.Sprintf("%s-%05d", k.tier, w.seq)
	run := time.Duration(w.rng.ExpFloat64() * float64(k.run))
	// The draw is made whatever the budget, so that the jobs' kinds and
	// run times stay those of the seed.
	idle, gpus := w.rng.Float64() < k.idle, k.gpus*k.count
	w.mu.Lock()
	if idle = idle && w.idleHeld+gpus <= w.idleCap; idle {
		w.idleHeld += gpus
	}
	w.jobs[k.tenant+"/"+id] = jobPlan{run: max(run, 30*time.Second), idle: idle, gpus: gpus}
	w.mu.Unlock()
	return gpuJob(k.tenant, id, k.tier, k.gpus, k.count)
}

// highKinds are the busy high-tier work the driver adds once idle work
// cannot serve what waits (driver.tick): interactive work of each tenant
// that may run it, and product's builds, none of it idle.
var highKinds = []kind{
	{"product", "build", 1, 1, 2 * time.Minute, 0, 1},
	{"product", "interactive", 1, 1, 20 * time.Minute, 0, 1},
	{"research", "interactive", 1, 1, 20 * time.Minute, 0, 1},
	{"platform", "interactive", 1, 1, 10 * time.Minute, 0, 1},
}

// nextHigh returns a new busy high-tier job (highKinds, in turn).
func (w *workload) nextHigh() *api.Job {
	w.seq++
	k := highKinds[w.seq%len(highKinds)]
	id := fmt.Sprintf("%s-%05d", k.tier, w.seq)
	run := time.Duration(w.rng.ExpFloat64() * float64(k.run))
	w.mu.Lock()
	w.jobs[k.tenant+"/"+id] = jobPlan{run: max(run, 30*time.Second)}
	w.mu.Unlock()
	return gpuJob(k.tenant, id, k.tier, k.gpus, k.count)
}

// gpuJob is a batch job of count allocations of gpus GPUs each, on the
// simulated nodes only.
func gpuJob(ns, id, tier string, gpus, count int) *api.Job {
	g := uint64(gpus)
	prio := map[string]int{"inference": 90, "build": 80, "interactive": 60, "training": 40}[tier]
	meta := map[string]string{"steward.tier": tier}
	if count > 1 {
		meta["steward.gang"] = "true"
	}
	task := &api.Task{Name: "work", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"},
		Resources: &api.Resources{CPU: ptr(10), MemoryMB: ptr(10), Devices: []*api.RequestedDevice{{Name: "gpu", Count: &g}}}}
	return &api.Job{ID: &id, Namespace: &ns, Type: ptr("batch"), Priority: &prio, Meta: meta,
		Constraints: []*api.Constraint{{LTarget: "${meta.steward.sim}", RTarget: "true", Operand: "="}},
		TaskGroups: []*api.TaskGroup{{Name: ptr("work"), Count: &count, Tasks: []*api.Task{task},
			RestartPolicy:    &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}}}}
}

func ptr[T any](v T) *T { return &v }

// sync takes the allocations running now: when each ends (its job's run
// time after it started), and how busy its GPUs are. It returns the
// allocations whose time is up.
func (w *workload) sync(allocs []*api.AllocationListStub, now time.Time) (done []string, running, idleGPUs int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	util := map[string]int{}
	alive := map[string]bool{}
	for _, a := range allocs {
		if a.ClientStatus != "running" || a.DesiredStatus != "run" {
			continue
		}
		plan, ok := w.jobs[a.Namespace+"/"+a.JobID]
		if !ok {
			continue // not the harness's (a placeholder)
		}
		running++
		alive[a.ID] = true
		end, seen := w.ends[a.ID]
		if !seen {
			end = now.Add(plan.run)
			w.ends[a.ID] = end
		}
		if !now.Before(end) {
			done = append(done, a.ID)
		}
		busy := 90
		if plan.idle {
			busy = 2
		}
		idle := plan.idle
		if a.AllocatedResources != nil {
			for _, t := range a.AllocatedResources.Tasks {
				for _, d := range t.Devices {
					for _, id := range d.DeviceIDs {
						util[id] = busy
						if idle {
							idleGPUs++
						}
					}
				}
			}
		}
	}
	for id := range w.ends {
		if !alive[id] {
			delete(w.ends, id)
		}
	}
	w.util = util
	return done, running, idleGPUs
}

// activity is the fleet's Config.Activity.
func (w *workload) activity(_, gpuID string) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	u, ok := w.util[gpuID]
	return u, ok
}
