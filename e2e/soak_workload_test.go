//go:build soak

package e2e

import (
	"bytes"
	"fmt"
	"math/rand"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// soakJob is one job the harness submitted, and what it expects of it.
type soakJob struct {
	ns, id string
	// kind: training (the trainer, checkpointing), batch, interactive,
	// inference; rogue-*: the hostile tenant's.
	kind        string
	gpus, count int
	// finite jobs (training, batch of fair tenants) must complete by the
	// end of the drain window.
	finite  bool
	hostile bool
	trainer bool
	spec    *api.Job // as submitted, for the hostile re-registration
	// stopAt is when the harness stops a service; stoppedAt when it did
	// (zero: not stopped by the harness).
	submitted, stopAt, stoppedAt time.Time
}

func (j *soakJob) key() string { return j.ns + "/" + j.id }

// soakWorkload is the seeded random workload: fair tenants (vision,
// speech, lab) and the hostile one (rogue). Every rate and count is bounded
// so that a 2-core machine copes.
type soakWorkload struct {
	t       *testing.T
	c       *cluster
	mgmt    *api.Client
	clients map[string]*api.Client
	tokens  map[string]string
	rng     *rand.Rand
	cfg     soakConfig
	ctls    []*soakController

	mu   sync.Mutex
	jobs map[string]*soakJob
	seq  int

	nextFair, nextRogue time.Time
	requests, checks    int
	actions             map[string]int
	gpuWork, trainerHCL string
}

const (
	soakMaxFairLive  = 10 // fair jobs not yet finished or stopped
	soakMaxRogueLive = 3
)

func newSoakWorkload(t *testing.T, c *cluster, mgmt *api.Client, tokens map[string]string, rng *rand.Rand, cfg soakConfig) *soakWorkload {
	w := &soakWorkload{t: t, c: c, mgmt: mgmt, tokens: tokens, rng: rng, cfg: cfg,
		clients: map[string]*api.Client{}, jobs: map[string]*soakJob{}, actions: map[string]int{}}
	for ns, tok := range tokens {
		cl, err := api.NewClient(c.prod.Server.APIConfig(tok))
		if err != nil {
			t.Fatal(err)
		}
		w.clients[ns] = cl
	}
	w.gpuWork = mustRead(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "gpu-work.nomad.hcl"))
	w.trainerHCL = mustRead(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "trainer.nomad.hcl"))
	now := time.Now()
	w.nextFair, w.nextRogue = now, now.Add(20*time.Second)
	return w
}

func (w *soakWorkload) between(lo, hi int) int { return lo + w.rng.Intn(hi-lo+1) }

// job returns the harness's job of that key (nil if not the harness's).
func (w *soakWorkload) job(key string) *soakJob {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.jobs[key]
}

// snapshot copies every job.
func (w *soakWorkload) snapshot() []soakJob {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]soakJob, 0, len(w.jobs))
	for _, j := range w.jobs {
		out = append(out, *j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].submitted.Before(out[b].submitted) })
	return out
}

func (w *soakWorkload) submitted() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.jobs)
}

func (w *soakWorkload) live(hostile bool, done func(*soakJob) bool) int {
	n := 0
	for _, j := range w.snapshot() {
		if j.hostile == hostile && j.stoppedAt.IsZero() && !done(&j) {
			n++
		}
	}
	return n
}

// step submits, stops and attacks as the schedule says.
func (w *soakWorkload) step(now time.Time, done func(*soakJob) bool) {
	for _, j := range w.snapshot() {
		if !j.stopAt.IsZero() && j.stoppedAt.IsZero() && now.After(j.stopAt) {
			w.stop(j.key())
		}
	}
	if now.After(w.nextFair) {
		w.nextFair = now.Add(time.Duration(w.between(8, 16)) * time.Second)
		if w.live(false, done) < soakMaxFairLive {
			w.fair(now)
		}
	}
	if now.After(w.nextRogue) {
		w.nextRogue = now.Add(time.Duration(w.between(15, 30)) * time.Second)
		w.rogue(now, done)
	}
}

// fair submits one job of a fair tenant.
func (w *soakWorkload) fair(now time.Time) {
	ns := []string{"vision", "speech", "lab"}[w.rng.Intn(3)]
	w.seq++
	gpus := w.between(1, 2)
	switch r := w.rng.Intn(100); {
	case r < 40:
		id := fmt.Sprintf("train-%d", w.seq)
		job := w.parse(w.trainerHCL, map[string]any{"trainer_bin": testnomad.TrainerBin(w.t),
			"steps": w.between(250, 550), "step_time": "200ms", "checkpoint_every": soakCheckpointInt, "kill_timeout": "10s"})
		job.ID, job.Name, job.Namespace = &id, &id, &ns
		job.Meta["steward.tier"] = "training"
		job.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = ptrU64(uint64(gpus))
		w.register(&soakJob{ns: ns, id: id, kind: "training", gpus: gpus, count: 1, finite: true, trainer: true, submitted: now}, job)
	case r < 75:
		id, count := fmt.Sprintf("batch-%d", w.seq), w.between(1, 2)
		job := w.parse(w.gpuWork, map[string]any{"name": id, "namespace": ns, "tier": "batch", "gpus": gpus, "count": count,
			"type": "batch", "busy_seconds": w.between(30, 120)})
		w.register(&soakJob{ns: ns, id: id, kind: "batch", gpus: gpus, count: count, finite: true, submitted: now}, job)
	case r < 95 || ns != "vision":
		id := fmt.Sprintf("nb-%d", w.seq)
		job := w.parse(w.gpuWork, map[string]any{"name": id, "namespace": ns, "tier": "interactive", "gpus": gpus, "count": 1,
			"busy_seconds": w.between(20, 90)})
		w.register(&soakJob{ns: ns, id: id, kind: "interactive", gpus: gpus, count: 1, submitted: now,
			stopAt: now.Add(time.Duration(w.between(120, 300)) * time.Second)}, job)
	default:
		id := fmt.Sprintf("serve-%d", w.seq)
		job := w.parse(w.gpuWork, map[string]any{"name": id, "namespace": ns, "tier": "inference", "gpus": 1, "count": 1})
		w.register(&soakJob{ns: ns, id: id, kind: "inference", gpus: 1, count: 1, submitted: now,
			stopAt: now.Add(time.Duration(w.between(120, 240)) * time.Second)}, job)
	}
}

// rogue does one hostile thing.
func (w *soakWorkload) rogue(now time.Time, done func(*soakJob) bool) {
	w.seq++
	liveJobs := w.live(true, done)
	r := w.rng.Intn(100)
	if liveJobs >= soakMaxRogueLive && r < 50 {
		r = 50 + w.rng.Intn(50) // no more jobs: flood or re-register instead
	}
	ns := "rogue"
	switch {
	case r < 22:
		// A tier it may not use, and the top priority.
		id := fmt.Sprintf("rogue-spoof-%d", w.seq)
		gpus := w.between(1, 2)
		job := w.parse(w.gpuWork, map[string]any{"name": id, "namespace": ns, "tier": "inference", "gpus": gpus, "count": 1, "priority": 95})
		w.register(&soakJob{ns: ns, id: id, kind: "rogue-spoof", gpus: gpus, count: 1, hostile: true, submitted: now,
			stopAt: now.Add(time.Duration(w.between(90, 180)) * time.Second)}, job)
	case r < 36:
		if !w.cfg.systemJobs || w.liveKind("rogue-system") {
			w.requestFlood()
			return
		}
		// A system job with a GPU at priority 100: one allocation per
		// GPU node, and Nomad's system-scheduler preemption.
		id := fmt.Sprintf("rogue-system-%d", w.seq)
		job := w.parse(w.gpuWork, map[string]any{"name": id, "namespace": ns, "tier": "training", "gpus": 1, "count": 1, "priority": 100})
		job.Type = ptrStr("system")
		job.TaskGroups[0].Count = nil
		job.TaskGroups[0].ReschedulePolicy = nil
		job.Update = nil
		w.register(&soakJob{ns: ns, id: id, kind: "rogue-system", gpus: 1, count: 1, hostile: true, submitted: now,
			stopAt: now.Add(time.Duration(w.between(60, 120)) * time.Second)}, job)
	case r < 50:
		// Huge meta: 200 keys of its own and a 60 KB tier value.
		id := fmt.Sprintf("rogue-fat-%d", w.seq)
		job := w.parse(w.gpuWork, map[string]any{"name": id, "namespace": ns, "tier": "training", "gpus": 1, "count": 1})
		for i := range 200 {
			job.Meta[fmt.Sprintf("junk-%03d", i)] = strings.Repeat("x", 256)
		}
		job.Meta["steward.tier"] = strings.Repeat("t", 60<<10)
		w.register(&soakJob{ns: ns, id: id, kind: "rogue-fat", gpus: 1, count: 1, hostile: true, submitted: now,
			stopAt: now.Add(time.Duration(w.between(90, 180)) * time.Second)}, job)
	case r < 65:
		w.requestFlood()
	case r < 78:
		w.checkFlood()
	default:
		w.reregisterHeld()
	}
}

func (w *soakWorkload) liveKind(kind string) bool {
	for _, j := range w.snapshot() {
		if j.kind == kind && j.stoppedAt.IsZero() {
			return true
		}
	}
	return false
}

// requestFlood writes 150 pause and resume requests in rogue's namespace,
// for its own jobs and for jobs that do not exist (bounded: 900 in all).
func (w *soakWorkload) requestFlood() {
	if w.requests >= 900 {
		return
	}
	w.actions["request-flood"]++
	cl := w.clients["rogue"]
	var own []string
	for _, j := range w.snapshot() {
		if j.ns == "rogue" && j.stoppedAt.IsZero() {
			own = append(own, j.id)
		}
	}
	for i := 0; i < 150; i++ {
		job := fmt.Sprintf("ghost-%d", w.rng.Intn(1000))
		if len(own) > 0 && i%3 == 0 {
			job = own[w.rng.Intn(len(own))]
		}
		action := []string{"pause", "resume"}[w.rng.Intn(2)]
		w.requests++
		if err := putVar(cl, "rogue", fmt.Sprintf("steward/requests/flood-%d-%d", w.seq, i),
			map[string]string{"action": action, "job": job, "by": "rogue"}); err != nil {
			w.t.Logf("soak: rogue request flood: %v", err)
			return
		}
	}
}

// checkFlood sends `job check` requests to both controllers for 10 s from
// 4 senders, one in 8 of them over the size limit.
func (w *soakWorkload) checkFlood() {
	w.actions["check-flood"]++
	job := w.parse(w.gpuWork, map[string]any{"name": "check", "namespace": "rogue", "tier": "inference", "gpus": 4, "count": 2})
	payload := mustJSON(w.t, map[string]any{"Job": job})
	huge := mustJSON(w.t, map[string]any{"Job": map[string]any{"ID": strings.Repeat("x", 2<<20)}})
	hc := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	stop := time.Now().Add(10 * time.Second)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(stop); n++ {
				b := payload
				if (n+i)%8 == 0 {
					b = huge
				}
				addr := w.ctls[(n+i)%len(w.ctls)].checkAddr
				req, _ := http.NewRequest(http.MethodPost, addr+"/v1/job/check", bytes.NewReader(b))
				req.Header.Set("X-Nomad-Token", w.tokens["rogue"])
				resp, err := hc.Do(req)
				code := 0
				if err == nil {
					code = resp.StatusCode
					resp.Body.Close()
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for _, n := range codes {
		w.checks += n
	}
	w.t.Logf("soak: rogue check flood answered %v", codes)
}

// reregisterHeld re-registers each of rogue's jobs that Steward holds
// (its count lower than submitted) as submitted, at priority 100.
func (w *soakWorkload) reregisterHeld() {
	w.actions["reregister"]++
	for _, j := range w.snapshot() {
		if !j.hostile || !j.stoppedAt.IsZero() || j.spec == nil || j.kind == "rogue-system" {
			continue
		}
		cur, _, err := w.mgmt.Jobs().Info(j.id, &api.QueryOptions{Namespace: j.ns})
		if err != nil || len(cur.TaskGroups) == 0 || cur.TaskGroups[0].Count == nil || *cur.TaskGroups[0].Count >= j.count {
			continue
		}
		spec := *j.spec
		spec.Priority = ptrInt(100)
		if _, _, err := w.clients[j.ns].Jobs().Register(&spec, nil); err != nil {
			w.t.Logf("soak: rogue re-registers %s: %v", j.key(), err)
			continue
		}
		w.actions["reregistered"]++
		w.t.Logf("soak: rogue re-registered held job %s (count %d -> %d, priority 100)", j.key(), *cur.TaskGroups[0].Count, j.count)
	}
}

// parse parses a jobspec with variables on the server.
func (w *soakWorkload) parse(hcl string, vars map[string]any) *api.Job {
	var b strings.Builder
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch v := vars[k].(type) {
		case string:
			fmt.Fprintf(&b, "%s = %q\n", k, v)
		default:
			fmt.Fprintf(&b, "%s = %v\n", k, v)
		}
	}
	job, err := w.mgmt.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: hcl, Variables: b.String()})
	if err != nil {
		w.t.Fatalf("soak: parse job: %v\n%s", err, b.String())
	}
	if job.Meta == nil {
		job.Meta = map[string]string{}
	}
	return job
}

// register submits a job as its tenant (the tenant's own token).
func (w *soakWorkload) register(j *soakJob, job *api.Job) {
	w.actions[j.kind]++
	if job.Namespace == nil {
		job.Namespace = &j.ns
	}
	if j.finite {
		// As Nomad's own default for batch jobs (3 attempts): the
		// client-kill fault takes the task's log pipe with it (logmon
		// dies with the agent, "failed to reattach to logmon"), the task
		// dies of SIGPIPE at its next write, and gpu-work.nomad.hcl
		// allows no restart, so that other tests see Nomad exactly. Two
		// soaks counted such a job "unfinished" (seed 41: speech/batch-13,
		// "Exit Code: 141, Signal: 13" as the client came back).
		for _, tg := range job.TaskGroups {
			tg.RestartPolicy = &api.RestartPolicy{Attempts: ptrInt(3), Interval: ptr(30 * time.Minute),
				Delay: ptr(5 * time.Second), Mode: ptrStr("fail")}
		}
	}
	j.spec = job
	if _, _, err := w.clients[j.ns].Jobs().Register(job, nil); err != nil {
		w.t.Logf("soak: %s submits %s: %v", j.ns, j.id, err)
		return
	}
	w.mu.Lock()
	w.jobs[j.key()] = j
	w.mu.Unlock()
	if j.hostile {
		w.t.Logf("soak: rogue submitted %s (%s, %d GPU(s))", j.key(), j.kind, j.gpus)
	}
}

// stop deregisters a job as its tenant; stoppedAt is set first, so that
// the checker never takes the harness's stop for Steward's.
func (w *soakWorkload) stop(key string) {
	w.mu.Lock()
	j := w.jobs[key]
	if j == nil || !j.stoppedAt.IsZero() {
		w.mu.Unlock()
		return
	}
	j.stoppedAt = time.Now()
	ns, id := j.ns, j.id
	w.mu.Unlock()
	if _, _, err := w.clients[ns].Jobs().Deregister(id, false, &api.WriteOptions{Namespace: ns}); err != nil {
		w.t.Logf("soak: stop %s: %v", key, err)
	}
}

// drain stops every service and hostile job and waits, at most window,
// for every finite job to complete.
func (w *soakWorkload) drain(window time.Duration, chk *soakChecker) {
	for _, j := range w.snapshot() {
		if !j.finite && j.stoppedAt.IsZero() {
			w.stop(j.key())
		}
	}
	deadline := time.Now().Add(window)
	for time.Now().Before(deadline) {
		if len(chk.unfinished()) == 0 {
			break
		}
		time.Sleep(5 * time.Second)
	}
	// A few more samples: what happens right after the last completion.
	time.Sleep(10 * time.Second)
	w.t.Logf("soak: workload: %v; %d request variables, %d checks sent", w.actions, w.requests, w.checks)
}

func ptrU64(v uint64) *uint64 { return &v }
func ptrInt(v int) *int       { return &v }
func ptrStr(v string) *string { return &v }
