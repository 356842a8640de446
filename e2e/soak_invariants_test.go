//go:build soak

package e2e

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The invariants (docs/soak.md lists each, and how it is measured). The
// checker polls Nomad as the operator (management token) once a second,
// one bounded list of every allocation with its devices and task events,
// and keeps what it needs to judge the next sample.

const (
	// soakOverLimitGrace: how long a tenant may run above its limit
	// before each further second counts. Nomad places work before Steward
	// sees it; taking it back is a round or two (resync 2 s), the
	// checkpoint grace (10 s), the task's kill timeout (5-10 s) and
	// Nomad's stop, and a takeover when the leader was just stopped
	// (2 lock TTLs): 60 s on a loaded 2-core machine.
	soakOverLimitGrace = 60 * time.Second
	// soakStrandedBound: how long held work may wait on free GPUs while
	// its tenant is under its reserve.
	soakStrandedBound = 90 * time.Second
	// soakThrashWindow: three alternating takeovers of one pair of jobs
	// within this are thrash.
	soakThrashWindow = time.Hour
	// soakSampleTimeout bounds each sample's call.
	soakSampleTimeout = 5 * time.Second
)

type allocTrack struct {
	id, ns, job, name, node string
	devs                    []string
	firstRunning            time.Time
	lastRunning             time.Time
	done                    bool // its end has been judged
	lost                    bool // its node was lost at some point
	resumeChecked           bool
	resumeTries             int
}

type takeover struct {
	taker, victim string
	at            time.Time
}

type soakChecker struct {
	t     *testing.T
	cl    *api.Client
	w     *soakWorkload
	nodes []string
	ctls  []*soakController

	mu      sync.Mutex
	samples int
	missed  int
	last    time.Time

	allocs map[string]*allocTrack
	// jobAllocs: a trainer job's allocations in the order first seen
	// running.
	jobAllocs map[string][]*allocTrack
	completed map[string]string // job key|allocation ID -> its name: the allocations that completed by themselves
	overSince map[string]time.Time
	candSince map[string]time.Time // stranded candidates
	flagged   map[string]bool
	freed     map[string]takeover // device -> the job Steward stopped on it, when
	edges     map[string][]takeover

	overLimit    float64 // seconds
	doubleBooked float64 // GPU-seconds
	evidence     map[string][]string
	counts       map[string]int
}

func newSoakChecker(t *testing.T, cl *api.Client, w *soakWorkload, nodes []string) *soakChecker {
	return &soakChecker{t: t, cl: cl, w: w, nodes: nodes,
		allocs: map[string]*allocTrack{}, jobAllocs: map[string][]*allocTrack{}, completed: map[string]string{},
		overSince: map[string]time.Time{}, candSince: map[string]time.Time{}, flagged: map[string]bool{},
		freed: map[string]takeover{}, edges: map[string][]takeover{}, evidence: map[string][]string{}, counts: map[string]int{}}
}

// violation records one breach of an invariant, with its evidence.
func (k *soakChecker) violation(kind, format string, args ...any) {
	k.counts[kind]++
	msg := fmt.Sprintf(format, args...)
	if len(k.evidence[kind]) < 20 {
		k.evidence[kind] = append(k.evidence[kind], time.Now().Format(time.TimeOnly)+" "+msg)
	}
	k.t.Logf("soak VIOLATION %s: %s", kind, msg)
}

// run samples every second until the returned function is called.
func (k *soakChecker) run() func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				k.sample()
			}
		}
	}()
	return func() { close(done); <-stopped }
}

func (k *soakChecker) sample() {
	ctx, cancel := context.WithTimeout(context.Background(), soakSampleTimeout)
	defer cancel()
	q := (&api.QueryOptions{Namespace: "*", Params: map[string]string{"resources": "true"}}).WithContext(ctx)
	stubs, _, err := k.cl.Allocations().List(q)
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	k.samples++
	if err != nil {
		k.missed++
		return
	}
	dt := 1.0
	if !k.last.IsZero() {
		dt = math.Min(now.Sub(k.last).Seconds(), 5) // a sample that took long covers its time, up to its bound
	}
	k.last = now

	usage := map[string]int{}    // tenant -> GPUs of running allocations
	nodeUsed := map[string]int{} // node -> GPUs of running or placed allocations
	holders := map[string][]string{}
	running := map[string]int{} // job key -> allocations running or placed
	for _, a := range stubs {
		jk := a.Namespace + "/" + a.JobID
		devs := gpuDevices(a)
		tr := k.allocs[a.ID]
		if tr == nil {
			tr = &allocTrack{id: a.ID, ns: a.Namespace, job: jk, name: a.Name, node: a.NodeID}
			k.allocs[a.ID] = tr
		}
		if len(devs) > 0 {
			tr.devs = devs
		}
		if a.ClientStatus == "lost" || a.ClientStatus == "unknown" || strings.Contains(a.DesiredDescription, "lost") {
			tr.lost = true
		}
		live := a.DesiredStatus == "run" && (a.ClientStatus == "running" || a.ClientStatus == "pending")
		if live {
			running[jk]++
			nodeUsed[a.NodeID] += len(devs)
		}
		if a.ClientStatus == "running" {
			usage[a.Namespace] += len(devs)
			for _, d := range devs {
				holders[a.NodeID+"/"+d] = append(holders[a.NodeID+"/"+d], a.ID[:8]+"("+jk+")")
			}
			if tr.firstRunning.IsZero() {
				tr.firstRunning = now
				k.started(tr, now)
			}
			tr.lastRunning = now
		}
		if !tr.done && (a.ClientStatus == "complete" || a.ClientStatus == "failed" || a.ClientStatus == "lost") {
			tr.done = true
			k.ended(tr, a, now)
		}
	}

	if k.samples%30 == 0 {
		// What the run looks like, every 30 s: the evidence that the
		// invariants had something to bite on.
		var free []string
		for _, n := range k.nodes {
			free = append(free, fmt.Sprintf("%s:%d", n[:8], soakGPUsPerNode-nodeUsed[n]))
		}
		k.t.Logf("soak status: running GPUs vision=%d speech=%d lab=%d rogue=%d; free %s; %d allocations seen, %d live jobs",
			usage["vision"], usage["speech"], usage["lab"], usage["rogue"], strings.Join(free, " "), len(k.allocs), len(running))
	}

	// controller_exits: a copy that ended by itself (the harness stops
	// none before the end).
	for _, sc := range k.ctls {
		if sc.proc.Exited() {
			k.violationOnce("controller_exits", sc.name, "controller %s exited: %v; its log ends:\n%s", sc.name, sc.proc.cmd.ProcessState, tail(sc.proc.Log(), 30))
		}
	}

	// double_booked_gpu_s: a device held by two running allocations.
	for dev, hs := range holders {
		if len(hs) > 1 {
			k.doubleBooked += dt
			k.violationOnce("double_booked", dev, "device %s held by running allocations %v", dev, hs)
		}
	}

	// over_limit_s: a tenant's running GPUs above its limit past the grace.
	for ns, tl := range soakTenants {
		if usage[ns] > tl.limit {
			if k.overSince[ns].IsZero() {
				k.overSince[ns] = now
			}
			if now.Sub(k.overSince[ns]) > soakOverLimitGrace {
				k.overLimit += dt
				k.violationOnce("over_limit", ns+k.overSince[ns].String(), "tenant %s runs %d GPUs, limit %d, since %s", ns, usage[ns], tl.limit, k.overSince[ns].Format(time.TimeOnly))
			}
		} else {
			k.overSince[ns] = time.Time{}
		}
	}

	// stranded: held while its tenant is under its reserve and a node has
	// room for one of its allocations.
	maxFree := 0
	for _, n := range k.nodes {
		maxFree = max(maxFree, soakGPUsPerNode-nodeUsed[n])
	}
	for _, j := range k.w.snapshot() {
		key := j.key()
		tl := soakTenants[j.ns]
		want := j.count - k.completedOf(key)
		cand := j.stoppedAt.IsZero() && !j.hostile && want > 0 && running[key] < want &&
			usage[j.ns] < tl.reserve && usage[j.ns]+j.gpus <= tl.limit && maxFree >= j.gpus && now.Sub(j.submitted) > 30*time.Second
		if !cand {
			delete(k.candSince, key)
			delete(k.flagged, key)
			continue
		}
		if k.candSince[key].IsZero() {
			k.candSince[key] = now
		}
		if since := now.Sub(k.candSince[key]); since > soakStrandedBound && !k.flagged[key] && int(since.Seconds())%10 == 0 {
			state := k.recordState(j.ns, j.id)
			if state == "held" || state == "preempted" || state == "idle-stopped" || state == "migrating" {
				k.flagged[key] = true
				k.violation("stranded", "%s %s for %s: %d of %d allocations run, tenant %s holds %d GPUs (reserve %d), a node has %d free",
					key, state, since.Round(time.Second), running[key], want, j.ns, usage[j.ns], tl.reserve, maxFree)
			}
		}
	}
	k.checkResumes()
}

// violationOnce counts a violation the first time its key is seen (an
// episode), but the seconds it lasts are counted by the caller.
func (k *soakChecker) violationOnce(kind, key, format string, args ...any) {
	if k.flagged[kind+"|"+key] {
		return
	}
	k.flagged[kind+"|"+key] = true
	if kind == "controller_exits" {
		k.counts[kind]++ // counted here: it has no seconds
	}
	msg := fmt.Sprintf(format, args...)
	if len(k.evidence[kind]) < 20 {
		k.evidence[kind] = append(k.evidence[kind], time.Now().Format(time.TimeOnly)+" "+msg)
	}
	k.t.Logf("soak VIOLATION %s: %s", kind, msg)
}

func gpuDevices(a *api.AllocationListStub) []string {
	if a.AllocatedResources == nil {
		return nil
	}
	var out []string
	for _, tr := range a.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			if d.Type == "gpu" {
				out = append(out, d.DeviceIDs...)
			}
		}
	}
	sort.Strings(out)
	return out
}

// started: an allocation was seen running for the first time.
func (k *soakChecker) started(tr *allocTrack, now time.Time) {
	// A finite job whose work has all completed, running again. (Which
	// name runs which unit of work is Nomad's: a group's allocations are
	// alike, and a resumed group of a batch job is placed anew under the
	// lowest names, so a completed name may well run again while the
	// group still has work left.)
	if j := k.w.job(tr.job); j != nil && j.finite && k.completedOf(tr.job) >= j.count {
		k.violation("batch_rerun", "%s ran again (allocation %s) after its %d allocation(s) had completed", tr.job, tr.id[:8], j.count)
	}
	// Whose GPUs it took: a device Steward freed in the last 2 minutes.
	for _, d := range tr.devs {
		f, ok := k.freed[tr.node+"/"+d]
		if !ok {
			continue
		}
		delete(k.freed, tr.node+"/"+d)
		if f.taker == tr.job || now.Sub(f.at) > 2*time.Minute {
			continue
		}
		k.takeover(tr.job, f.taker, now)
		break
	}
	if j := k.w.job(tr.job); j != nil && j.trainer {
		k.jobAllocs[tr.job] = append(k.jobAllocs[tr.job], tr)
	}
}

// takeover records that taker's allocation started on GPUs Steward freed
// from victim, and flags a pair that took from each other in turn three
// times within the window (A from B, B from A, A from B).
func (k *soakChecker) takeover(taker, victim string, now time.Time) {
	pair := taker + "|" + victim
	if victim < taker {
		pair = victim + "|" + taker
	}
	es := append(k.edges[pair], takeover{taker: taker, victim: victim, at: now})
	for len(es) > 0 && now.Sub(es[0].at) > soakThrashWindow {
		es = es[1:]
	}
	k.edges[pair] = es
	if n := len(es); n >= 3 && es[n-1].taker == es[n-3].taker && es[n-2].taker != es[n-1].taker {
		k.violation("thrash", "%s and %s took each other's GPUs in turn: %s from %s at %s, %s from %s at %s, %s from %s at %s",
			taker, victim, es[n-3].taker, es[n-3].victim, es[n-3].at.Format(time.TimeOnly),
			es[n-2].taker, es[n-2].victim, es[n-2].at.Format(time.TimeOnly), es[n-1].taker, es[n-1].victim, es[n-1].at.Format(time.TimeOnly))
		k.edges[pair] = nil
	}
}

// ended judges an allocation that reached a terminal client status.
func (k *soakChecker) ended(tr *allocTrack, a *api.AllocationListStub, now time.Time) {
	j := k.w.job(tr.job)
	// Completed by itself: its task exited 0 without being killed. Its
	// desired status may still be stop: a trainer that finished its last
	// step just as Steward decided to preempt it is done, not stopped.
	natural := a.ClientStatus == "complete" && !taskEvent(a, api.TaskKilling)
	if natural {
		if j != nil && j.finite {
			k.completed[tr.job+"|"+tr.id] = tr.name
		}
		return
	}
	if a.DesiredStatus != "stop" && a.DesiredStatus != "evict" || tr.lost || a.ClientStatus == "lost" {
		return
	}
	// Stopped by someone: the harness (the job was deregistered first),
	// Nomad's own preemption, or Steward.
	harness := j != nil && !j.stoppedAt.IsZero()
	if harness {
		return
	}
	nomadPreempted := a.PreemptedByAllocation != "" || strings.Contains(a.DesiredDescription, "preempted")
	if !nomadPreempted && !tr.firstRunning.IsZero() {
		for _, d := range tr.devs {
			k.freed[tr.node+"/"+d] = takeover{taker: tr.job, at: now}
		}
	}
	if j == nil || !j.trainer || tr.firstRunning.IsZero() {
		return
	}
	// unsignalled_stops: a checkpointing job's allocation stopped with no
	// checkpoint signal before it was killed.
	if !taskEvent(a, api.TaskSignaling) {
		cause := "Steward or other: " + a.DesiredDescription
		if nomadPreempted {
			cause = "Nomad's preemption by allocation " + a.PreemptedByAllocation + " (" + k.jobOfAlloc(a.PreemptedByAllocation) + ")"
		}
		k.violation("unsignalled_stops", "%s allocation %s stopped without a checkpoint signal: %s", tr.job, tr.id[:8], cause)
	}
}

// taskEvent reports whether any task of the allocation has an event of
// the type (Nomad keeps each task's last 10).
func taskEvent(a *api.AllocationListStub, typ string) bool {
	for _, ts := range a.TaskStates {
		for _, e := range ts.Events {
			if e.Type == typ {
				return true
			}
		}
	}
	return false
}

func (k *soakChecker) jobOfAlloc(id string) string {
	if tr := k.allocs[id]; tr != nil {
		return tr.job
	}
	return "unknown job"
}

// checkResumes reads the first lines of each trainer allocation that is
// not its job's first, a few seconds after it started, and judges its
// resume: lost_checkpoints.
func (k *soakChecker) checkResumes() {
	read := 0
	for key, trs := range k.jobAllocs {
		for i, tr := range trs {
			if i == 0 || tr.resumeChecked || time.Since(tr.firstRunning) < 4*time.Second || read >= 2 {
				continue
			}
			read++
			out := k.trainerStdout(tr)
			tr.resumeTries++
			if !strings.Contains(out, "trainer: ") || !strings.Contains(out, "checkpoint") {
				if tr.resumeTries < 10 {
					continue
				}
			}
			tr.resumeChecked = true
			prev := trs[i-1]
			ran := prev.lastRunning.Sub(prev.firstRunning)
			switch m := trainerResumeRE.FindStringSubmatch(out); {
			case m != nil:
				lost, _ := strconv.Atoi(m[3])
				if lost > soakCheckpointInt {
					k.violation("lost_checkpoints", "%s allocation %s resumed from step %s, the previous run reached %s: lost %d steps, more than the checkpoint interval %d",
						key, tr.id[:8], m[1], m[2], lost, soakCheckpointInt)
				}
			case strings.Contains(out, "no checkpoint"):
				if ran >= 10*time.Second {
					k.violation("lost_checkpoints", "%s allocation %s started from step 0 although %s ran %s before it: %s",
						key, tr.id[:8], prev.id[:8], ran.Round(time.Second), checkpointLine(out, "trainer: "))
				}
			default:
				k.t.Logf("soak: could not read the resume of %s allocation %s: %q", key, tr.id[:8], clipped(out))
				k.counts["unread_resumes"]++
			}
		}
	}
}

// checkpointLine is the first line of s that starts with prefix and speaks
// of a checkpoint.
func checkpointLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "checkpoint") && strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func (k *soakChecker) trainerStdout(tr *allocTrack) string {
	ctx, cancel := context.WithTimeout(context.Background(), soakSampleTimeout)
	defer cancel()
	alloc, _, err := k.cl.Allocations().Info(tr.id, (&api.QueryOptions{Namespace: tr.ns}).WithContext(ctx))
	if err != nil {
		return ""
	}
	rc, err := k.cl.AllocFS().Cat(alloc, "alloc/logs/train.stdout.0", (&api.QueryOptions{Namespace: tr.ns}).WithContext(ctx))
	if err != nil {
		return ""
	}
	defer rc.Close()
	buf := make([]byte, 4096)
	var b strings.Builder
	for b.Len() < 4096 {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// recordState is Steward's record's steward_state for a job.
func (k *soakChecker) recordState(ns, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), soakSampleTimeout)
	defer cancel()
	v, _, err := k.cl.Variables().Read("nomad/jobs/"+id, (&api.QueryOptions{Namespace: ns}).WithContext(ctx))
	if err != nil || v == nil {
		return ""
	}
	return v.Items["steward_state"]
}

// completedOf is how many of a job's allocations completed by themselves.
func (k *soakChecker) completedOf(key string) int {
	n := 0
	for name := range k.completed {
		if strings.HasPrefix(name, key+"|") {
			n++
		}
	}
	return n
}

// done reports whether a finite job has completed as many allocations as
// it was submitted with.
func (k *soakChecker) done(j *soakJob) bool {
	if !j.finite {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.completedOf(j.key()) >= j.count
}

// unfinished are the finite fair jobs that have not completed.
func (k *soakChecker) unfinished() []string {
	var out []string
	for _, j := range k.w.snapshot() {
		if j.finite && !j.hostile && !k.done(&j) {
			out = append(out, j.key())
		}
	}
	return out
}

type soakResult struct {
	counts                            map[string]int
	overLimit, doubleBooked           float64
	lostCheckpoints, unsignalledStops int
	samples, missed                   int
	journalWrites                     int
}

func (r soakResult) overLimitS() int    { return int(math.Round(r.overLimit)) }
func (r soakResult) doubleBookedS() int { return int(math.Round(r.doubleBooked)) }

// total is every breach: the seconds of the two time-measured invariants
// and the count of every other.
func (r soakResult) total() int {
	n := r.overLimitS() + r.doubleBookedS()
	for _, kind := range soakCountedKinds {
		n += r.counts[kind]
	}
	return n
}

// soakCountedKinds are the invariants counted one per breach (episodes of
// over_limit and double_booked are counted in seconds instead).
var soakCountedKinds = []string{"lost_checkpoints", "unsignalled_stops", "dual_acting", "controller_exits", "stranded", "over_cap", "thrash", "batch_rerun", "unfinished"}

func (r soakResult) detail() string {
	var parts []string
	for _, kind := range soakCountedKinds {
		parts = append(parts, fmt.Sprintf("%s=%d", kind, r.counts[kind]))
	}
	parts = append(parts, fmt.Sprintf("samples=%d missed_samples=%d controller_writes=%d unread_resumes=%d", r.samples, r.missed, r.journalWrites, r.counts["unread_resumes"]))
	return strings.Join(parts, " ")
}

// finish runs the end-of-run checks and returns the counts.
func (k *soakChecker) finish(j *soakJournal) soakResult {
	for _, key := range k.unfinished() {
		k.mu.Lock()
		k.violation("unfinished", "%s did not complete by the end of the drain window (%d of its allocations completed)", key, k.completedOf(key))
		k.mu.Unlock()
	}
	for _, w := range j.dualActs() {
		k.violation("dual_acting", "controller %s: %s %s?%s sent %s, after the other controller was granted the leader lock",
			w.ctl, w.method, w.path, w.query, w.sent.Format("15:04:05.000"))
	}
	k.checkEvictionCap()
	if k.missed*10 > k.samples {
		k.t.Errorf("soak: %d of %d samples failed: the invariants were not checked every second", k.missed, k.samples)
	}
	var all []string
	for kind, ev := range k.evidence {
		for _, e := range ev {
			all = append(all, kind+": "+e)
		}
	}
	sort.Strings(all)
	soakArtifacts(k.t, "soak-evidence.txt", strings.Join(all, "\n")+"\n")
	return soakResult{counts: k.counts, overLimit: k.overLimit, doubleBooked: k.doubleBooked,
		lostCheckpoints: k.counts["lost_checkpoints"], unsignalledStops: k.counts["unsignalled_stops"],
		samples: k.samples, missed: k.missed, journalWrites: j.count()}
}

// checkEvictionCap counts, per job, Steward's evictions in its scaling
// events (preemptions and idle releases; not holds of work over its
// tenant's limit, which the limit takes whatever the cap) and flags any
// hour with more than the cap.
func (k *soakChecker) checkEvictionCap() {
	for _, j := range k.w.snapshot() {
		ctx, cancel := context.WithTimeout(context.Background(), soakSampleTimeout)
		st, _, err := k.cl.Jobs().ScaleStatus(j.id, (&api.QueryOptions{Namespace: j.ns}).WithContext(ctx))
		cancel()
		if err != nil || st == nil {
			continue
		}
		for g, tg := range st.TaskGroups {
			// Each counted event, with its rule and message: the evidence a
			// violation needs (the controllers' logs are in SOAK_LOGDIR).
			type eviction struct {
				at       time.Time
				rule     any
				message  string
				evaluate string
			}
			var evs []eviction
			for _, e := range tg.Events {
				if e.Meta["steward.rule"] == "limit" {
					continue
				}
				for _, verb := range []string{"Steward preempts", "Steward requeues (idle)", "Steward stops (idle)"} {
					if strings.HasPrefix(e.Message, verb) {
						eval := ""
						if e.EvalID != nil {
							eval = *e.EvalID
						}
						evs = append(evs, eviction{time.Unix(0, int64(e.Time)), e.Meta["steward.rule"], e.Message, eval})
					}
				}
			}
			sort.Slice(evs, func(a, b int) bool { return evs[a].at.Before(evs[b].at) })
			for i := range evs {
				n := 0
				for _, e2 := range evs[i:] {
					if e2.at.Sub(evs[i].at) < time.Hour {
						n++
					}
				}
				if n > soakEvictionCap {
					var list []string
					for _, e2 := range evs[i : i+n] {
						list = append(list, fmt.Sprintf("%s rule=%v eval=%.8s %q", e2.at.Format("15:04:05.000"), e2.rule, e2.evaluate, e2.message))
					}
					k.violation("over_cap", "%s group %s evicted %d times within an hour from %s (cap %d): %s", j.key(), g, n, evs[i].at.Format(time.TimeOnly), soakEvictionCap, strings.Join(list, "; "))
					break
				}
			}
		}
	}
}
