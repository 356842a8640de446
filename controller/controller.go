// Package controller is Steward's imperative shell: it watches Nomad, runs
// the pure decision engine (policy/engine) and carries its actions out
// through Nomad's API — priorities, checkpoint signals, allocation stops,
// job scaling — recording every decision where the Nomad UI shows it.
package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// Controller enforces a policy on one Nomad cluster.
type Controller struct {
	cfg    Config
	log    hclog.Logger
	client *api.Client
	nomad  Nomad
	obs    *observer
	now    func() time.Time
	// lease proves leadership; nomad refuses writes without it (fence.go).
	lease *lease
	// crashAt is a step to exit at (crash.go; tests only).
	crashAt string

	mu      sync.Mutex // guards pol, eng, health, lastCheck (read by HTTP and SIGHUP)
	pol     *policy.Policy
	eng     *engine.Engine
	health  Health
	trigger chan struct{}
	// lastCheck is what `steward job check` plans on (check.go); checkAddr
	// is where this controller answers checks, published in the status.
	lastCheck *checkBase
	checkAddr string

	// Owned by the control loop.
	states map[jobKey]*JobState
	saved  map[jobKey]string // JSON last written, to skip unchanged writes
	index  map[jobKey]uint64 // modify index of each state variable, for check-and-set
	// reload: a check-and-set write failed, so what this controller holds
	// in memory may be stale; the next round reads every state afresh.
	reload    bool
	records   map[jobKey]string
	recordErr map[jobKey]string // last error writing each job's record, logged once
	decisions []Decision
	refused   map[jobKey]*refusal // jobs whose meta Steward refused in part
	statusOut string
	// statusIndex is the status variable's modify index (check-and-set),
	// once statusKnown.
	statusIndex uint64
	statusKnown bool
	// statusStable and statusAt are the last published status without
	// its drifting figures (stableStatus), and when it was published.
	statusStable string
	statusAt     time.Time
	usage        *usageStore
	metrics      *metrics

	pressureMu    sync.Mutex
	pressureSince time.Time
}

// Health is what /healthz reports.
type Health struct {
	Leader        bool      `json:"leader"`
	Identity      string    `json:"identity"`
	LastReconcile time.Time `json:"last_reconcile"`
	LastError     string    `json:"last_error,omitempty"`
	PolicyFiles   []string  `json:"policy_files"`
	DryRun        bool      `json:"dry_run"`
}

// Decision is one action as the status command shows it.
type Decision struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Job    string    `json:"job"`
	Group  string    `json:"group,omitempty"`
	GPUs   int       `json:"gpus,omitempty"`
	Rule   string    `json:"rule"`
	Reason string    `json:"reason"`
	DryRun bool      `json:"dry_run,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// New builds a controller; it parses the policy files and fails with their
// diagnostics (file:line:col) when they are bad.
func New(cfg Config, client *api.Client, log hclog.Logger) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := LoadPolicy(cfg.PolicyFiles)
	if err != nil {
		return nil, err
	}
	ls := newLease()
	n := fencedNomad{Nomad: NewNomad(client), lease: ls}
	obs := newObserver(n, cfg.StateNamespace)
	obs.resync = cfg.Resync
	c := &Controller{
		cfg: cfg, log: log, client: client, nomad: n, lease: ls,
		obs: obs, now: time.Now, crashAt: os.Getenv(CrashAtEnv),
		pol: p, eng: engine.New(p), trigger: make(chan struct{}, 1),
		usage: newUsageStore(), metrics: newMetrics(),
	}
	if cfg.Traffic != nil {
		c.metrics.reg.MustRegister(cfg.Traffic.collectors()...)
	}
	c.health.Identity, c.health.PolicyFiles, c.health.DryRun = cfg.Identity, cfg.PolicyFiles, cfg.DryRun
	c.checkAddr = cfg.Advertise
	c.resetState()
	return c, nil
}

func (c *Controller) resetState() {
	c.states = map[jobKey]*JobState{}
	c.saved = map[jobKey]string{}
	c.index = map[jobKey]uint64{}
	c.recordErr = map[jobKey]string{}
	c.records = map[jobKey]string{}
}

// LoadPolicy parses and validates policy files; the error carries every
// diagnostic with its file:line:col.
func LoadPolicy(paths []string) (*policy.Policy, error) {
	files, err := policy.ExpandPaths(paths)
	if err != nil {
		return nil, err
	}
	parser := policy.NewParser()
	p, diags := parser.Parse(files...)
	if diags.HasErrors() {
		var b bytes.Buffer
		parser.WriteDiagnostics(&b, diags)
		return nil, fmt.Errorf("policy %v:\n%s", files, b.String())
	}
	if p == nil {
		return nil, fmt.Errorf("policy %v: no policy", files)
	}
	return p, nil
}

// Reload re-reads the policy files. A bad policy is reported and the last
// good one stays in force.
func (c *Controller) Reload() error {
	p, err := LoadPolicy(c.cfg.PolicyFiles)
	if err != nil {
		c.log.Error("policy reload failed: keeping the last good policy", "error", err)
		c.metrics.reloads.WithLabelValues("error").Inc()
		return err
	}
	c.mu.Lock()
	c.pol, c.eng = p, engine.New(p)
	c.mu.Unlock()
	c.metrics.reloads.WithLabelValues("ok").Inc()
	c.log.Info("policy reloaded", "files", c.cfg.PolicyFiles, "summary", policySummary(p))
	c.poke()
	return nil
}

func policySummary(p *policy.Policy) string {
	return plural(len(p.Tiers), "tier") + ", " + plural(len(p.Tenants), "tenant") + ", " + plural(len(p.Pools), "pool") + ", " +
		plural(len(p.Idle), "idle rule")
}

func (c *Controller) engineNow() (*policy.Policy, *engine.Engine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pol, c.eng
}

// poke asks the loop for a round soon.
func (c *Controller) poke() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// pressure notes that an event that may create pressure arrived now: the
// decision latency metric runs from here to the first call on a victim.
func (c *Controller) pressure(at time.Time) {
	c.pressureMu.Lock()
	if c.pressureSince.IsZero() {
		c.pressureSince = at
	}
	c.pressureMu.Unlock()
	c.poke()
}

func (c *Controller) takePressure() time.Time {
	c.pressureMu.Lock()
	defer c.pressureMu.Unlock()
	t := c.pressureSince
	c.pressureSince = time.Time{}
	return t
}

// Health returns the controller's health for /healthz.
func (c *Controller) Health() Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health
}

func (c *Controller) setHealth(f func(h *Health)) {
	c.mu.Lock()
	f(&c.health)
	c.mu.Unlock()
}

// loadStates reads every job state the controller (or a previous leader)
// wrote, from the state namespace only.
func (c *Controller) loadStates(ctx context.Context) error {
	c.resetState()
	c.reload = false
	refs, err := c.nomad.ListVars(ctx, c.cfg.StateNamespace, statePrefix)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if ref.Namespace != c.cfg.StateNamespace {
			continue
		}
		items, index, err := c.nomad.GetVar(ctx, ref.Namespace, ref.Path)
		if err != nil {
			return err
		}
		if items == nil {
			continue
		}
		st, err := decodeState(items)
		if err != nil {
			c.log.Error("ignoring unreadable job state", "namespace", ref.Namespace, "path", ref.Path, "error", err)
			continue
		}
		k, err := stateKey(ref.Path, st)
		if err != nil {
			c.log.Error("ignoring job state", "namespace", ref.Namespace, "error", err)
			continue
		}
		st.Namespace, st.ID = k.Namespace, k.ID
		c.states[k] = st
		c.index[k] = index
		if b, err := json.Marshal(st); err == nil {
			c.saved[k] = string(b)
		}
		for short, idle := range st.Idle {
			c.usage.restore(short, idle)
		}
		for id, samples := range st.Usage {
			c.usage.restoreHistory(id, samples)
		}
		st.Usage = nil // saved as Idle from now on
	}
	c.log.Info("loaded controller state", "jobs", len(c.states))
	return nil
}

// state returns the job's state, creating an empty one.
func (c *Controller) state(k jobKey) *JobState {
	st := c.states[k]
	if st == nil {
		st = &JobState{Namespace: k.Namespace, ID: k.ID}
		c.states[k] = st
	}
	return st
}

func (c *Controller) sortedStates() []*JobState {
	out := make([]*JobState, 0, len(c.states))
	for _, st := range c.states {
		out = append(out, st)
	}
	sort.Slice(out, func(i, k int) bool {
		a, b := out[i].key(), out[k].key()
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.ID < b.ID
	})
	return out
}

// save writes a job's state now (before the action it describes).
func (c *Controller) save(ctx context.Context, st *JobState) error {
	k := st.key()
	if c.cfg.DryRun {
		return nil
	}
	now := c.now()
	if st.empty(now) && st.Status == "" {
		if _, ok := c.saved[k]; ok {
			return c.forget(ctx, k)
		}
		return nil
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode state of %s: %w", k, err)
	}
	if c.saved[k] == string(b) {
		return nil
	}
	items, _ := st.encode()
	index, err := c.nomad.PutVar(ctx, c.cfg.StateNamespace, statePath(k), items, true, c.index[k])
	if err != nil {
		c.casFailed(k, err)
		return err
	}
	c.saved[k], c.index[k] = string(b), index
	return nil
}

// forget deletes a job's state (check-and-set).
func (c *Controller) forget(ctx context.Context, k jobKey) error {
	if err := c.nomad.DeleteVar(ctx, c.cfg.StateNamespace, statePath(k), c.index[k]); err != nil {
		c.casFailed(k, err)
		return err
	}
	delete(c.saved, k)
	delete(c.states, k)
	delete(c.index, k)
	return nil
}

// casFailed notes a refused check-and-set: someone else wrote the state
// (another controller that believed it led), so every state is read again
// before the next decision.
func (c *Controller) casFailed(k jobKey, err error) {
	if isConflict(err) {
		c.log.Error("job state changed under this controller: reading every state again", "job", k, "error", err)
		c.reload = true
	}
}

// flush writes states changed outside actions (idle timers, index
// updates).
func (c *Controller) flush(ctx context.Context, r *round) {
	pol, _ := c.engineNow()
	idle := c.idleTimers(pol, r)
	for k := range idle {
		c.state(k) // a job that only idles gets a state, to keep its timer
	}
	for _, st := range c.sortedStates() {
		k := st.key()
		if r.obs.Jobs[k] != nil {
			st.Idle = mergeIdle(st.Idle, idle[k])
		}
		if err := c.save(ctx, st); err != nil {
			c.log.Error("save job state", "job", k, "error", err)
			r.failed++
		}
	}
}

// Run acts while this controller holds the leader lock, and waits for it
// otherwise, until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if c.cfg.DryRun {
		c.log.Info("dry run: planning and logging only; nothing in Nomad is changed")
		c.setHealth(func(h *Health) { h.Leader = false })
		return c.lead(ctx)
	}
	if err := c.checkStateNamespace(ctx); err != nil {
		return err
	}
	if c.cfg.Consul != nil {
		return c.electConsul(ctx, c.lead)
	}
	return c.elect(ctx, c.lead)
}

// checkStateNamespace fails when the state namespace does not exist: the
// controller does not create it (its token needs no right to), and writing
// state anywhere a tenant can write would let tenants steer it.
func (c *Controller) checkStateNamespace(ctx context.Context) error {
	ns := c.cfg.StateNamespace
	_, _, err := c.client.Namespaces().Info(ns, (&api.QueryOptions{}).WithContext(ctx))
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound || err != nil && strings.Contains(err.Error(), "not found") {
		return fmt.Errorf("the state namespace %q does not exist: create it for Steward alone "+
			"(nomad namespace apply -description \"Steward's state\" %s) and give no tenant's token rights there; "+
			"or name another with -state-namespace", ns, ns)
	}
	if err != nil {
		// Nomad may be down for now: the control loop retries its reads.
		c.log.Warn("cannot check the state namespace", "namespace", ns, "error", err)
	}
	return nil
}

// lead is the control loop of the leader.
func (c *Controller) lead(ctx context.Context) error {
	c.setHealth(func(h *Health) { h.Leader = !c.cfg.DryRun })
	c.metrics.leader.Set(1)
	defer c.metrics.leader.Set(0)
	defer c.setHealth(func(h *Health) { h.Leader = false })

	for attempt := 0; ; attempt++ {
		err := c.loadStates(ctx)
		if err == nil {
			break
		}
		c.log.Error("load controller state", "error", err)
		if !sleepCtx(ctx, backoff(attempt, c.cfg.MaxBackoff)) {
			return nil
		}
	}

	// A new term starts from a full read: the cache may have missed what
	// happened while another copy led.
	c.obs.cache.invalidate()
	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	go c.watch(streamCtx)
	go c.pollStats(streamCtx)

	resync := time.NewTicker(c.cfg.Resync)
	defer resync.Stop()
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.trigger:
			// Gather the rest of a burst of events into one round.
			if !sleepCtx(ctx, c.cfg.Debounce) {
				return nil
			}
		case <-resync.C:
		case <-timer.C:
		}
		wake, err := c.reconcile(ctx)
		if ctx.Err() != nil {
			return nil
		}
		next := c.cfg.Resync
		if err != nil {
			failures++
			next = backoff(failures-1, c.cfg.MaxBackoff)
			c.log.Error("control round failed; retrying", "error", err, "retry_in", next)
			c.setHealth(func(h *Health) { h.LastError = err.Error() })
			// Drop events that arrived meanwhile: the retry reads
			// everything afresh, so an outage ends in one round, not a
			// burst.
			select {
			case <-c.trigger:
			default:
			}
		} else {
			failures = 0
			if !wake.IsZero() {
				if d := time.Until(wake); d < next {
					next = max(d, 0)
				}
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// reconcile is one control round: observe, finish what is due, plan, act,
// record. It returns when the next round is due at the latest.
func (c *Controller) reconcile(ctx context.Context) (time.Time, error) {
	start := time.Now()
	if c.reload {
		if err := c.loadStates(ctx); err != nil {
			return time.Time{}, err
		}
	}
	pressureSince := c.takePressure()
	pol, eng := c.engineNow()
	following, applied := c.obs.cache.follows()
	obs, err := c.obs.observe(ctx, c.now(), false)
	c.metrics.observed(c.obs.stats)
	if err != nil {
		c.metrics.nomadErrors.Inc()
		return time.Time{}, err
	}
	c.usage.setObservation(obs, statsTargets(pol, obs))
	r := newRound(obs.At, obs, c.states)
	r.pressureSince = pressureSince
	if !obs.NewPressure.IsZero() && (r.pressureSince.IsZero() || obs.NewPressure.Before(r.pressureSince)) {
		r.pressureSince = obs.NewPressure
	}
	if !c.cfg.DryRun {
		c.applyRequests(ctx, r)
		c.syncHolds(ctx, r)
		c.finishDrains(ctx, r)
		if r.failed > 0 {
			c.metrics.nomadErrors.Add(float64(r.failed))
		}
		if r.acted > 0 {
			// Holds and stops just changed the cluster: plan on what
			// Nomad shows now, not on what it showed before them. The
			// event stream brings it within milliseconds; without it (or
			// if it is late) the cluster is read again, from the leader.
			full := !following || !c.obs.cache.settle(ctx, r.newestIndex(), applied, settleTimeout)
			obs, err = c.obs.observe(ctx, c.now(), full)
			c.metrics.observed(c.obs.stats)
			if err != nil {
				c.metrics.nomadErrors.Inc()
				return time.Time{}, err
			}
			c.usage.setObservation(obs, statsTargets(pol, obs))
			prev := r
			r = newRound(obs.At, obs, c.states)
			r.pressureSince, r.failed, r.wakeAt, r.acted = prev.pressureSince, prev.failed, prev.wakeAt, prev.acted
			if !obs.NewPressure.IsZero() && (r.pressureSince.IsZero() || obs.NewPressure.Before(r.pressureSince)) {
				r.pressureSince = obs.NewPressure
			}
		}
	}

	c.trackWaiting(r)
	c.checkJobMeta(pol, obs)
	snap := buildSnapshot(pol, obs, c.states, c.usage.samples())
	planStart := time.Now()
	plan := eng.Plan(snap, r.now)
	c.metrics.planSeconds.Observe(time.Since(planStart).Seconds())
	c.keepCheckBase(snap, r.now)
	r.plan = plan
	for _, s := range plan.Skipped {
		c.log.Warn("engine skipped snapshot item", "item", s.Item, "reason", s.Reason)
	}
	if !c.cfg.DryRun {
		for _, d := range c.unmark(ctx, r, plan.Unmarked) {
			c.remember(d)
		}
	}
	for _, a := range plan.Actions {
		d := Decision{At: r.now, Kind: string(a.Kind), Job: a.Job.String(), Group: a.Group, GPUs: a.GPUs,
			Rule: string(a.Reason.Rule), Reason: a.Reason.Message, DryRun: c.cfg.DryRun}
		if c.cfg.DryRun {
			c.log.Info("would "+string(a.Kind), "job", a.Job.String(), "group", a.Group, "gpus", a.GPUs, "reason", a.Reason.String())
			c.remember(d)
			continue
		}
		if a.Kind == engine.Resume && a.AfterVictims && r.beneficiaryDraining(a.Job) {
			continue
		}
		fields := []any{"job", a.Job.String(), "group", a.Group, "gpus", a.GPUs, "reason", a.Reason.String()}
		if (a.Kind == engine.Preempt || a.Kind == engine.IdleStop) && !r.latencyTaken && !r.pressureSince.IsZero() {
			// The first call on a victim follows right after this line.
			r.latencyTaken = true
			latency := time.Since(r.pressureSince)
			c.metrics.decisionLatency.Observe(latency.Seconds())
			fields = append(fields, "decision_latency", latency)
		}
		c.log.Info(string(a.Kind), fields...)
		if err := c.execute(ctx, r, a); err != nil {
			r.failed++
			c.metrics.nomadErrors.Inc()
			d.Error = err.Error()
			c.log.Error("action failed", "kind", a.Kind, "job", a.Job.String(), "error", err)
		} else {
			r.acted++
			c.metrics.action(a, pol)
		}
		c.remember(d)
	}
	if !c.cfg.DryRun {
		c.holdUnadmitted(ctx, r)
		c.syncPlaceholders(ctx, r)
		c.flush(ctx, r)
		c.writeRecords(ctx, r, pol)
	}
	if !c.cfg.DryRun {
		c.writeStatus(ctx, r, pol)
	}
	c.metrics.observePlan(r, pol, c.states)
	c.metrics.reconcileSeconds.Observe(time.Since(start).Seconds())
	if r.failed == 0 {
		c.setHealth(func(h *Health) { h.LastReconcile = r.now; h.LastError = "" })
	}
	if r.acted > 0 {
		// What was done changes what Nomad shows: look again soon rather
		// than waiting for the events.
		r.wake(r.now.Add(time.Second))
	}
	if r.failed > 0 {
		// Failed actions are retried on a fresh read soon; only a failed
		// read (an outage) backs the whole loop off.
		c.log.Warn("some Nomad calls failed in this round; retrying", "failed", r.failed)
		c.setHealth(func(h *Health) { h.LastError = fmt.Sprintf("%d Nomad calls failed", r.failed) })
		r.wake(r.now.Add(2 * time.Second))
	}
	return r.wakeAt, nil
}

// remember keeps the latest decisions for steward status.
func (c *Controller) remember(d Decision) {
	c.decisions = append(c.decisions, d)
	if n := len(c.decisions); n > maxDecisions {
		c.decisions = c.decisions[n-maxDecisions:]
	}
}

const maxDecisions = 40

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// PlanOnce reads the cluster and the controller's saved state and returns
// what the controller would do now, changing nothing (steward plan).
func (c *Controller) PlanOnce(ctx context.Context) (*engine.Plan, *Observation, error) {
	if err := c.loadStates(ctx); err != nil {
		return nil, nil, err
	}
	pol, eng := c.engineNow()
	obs, err := c.obs.observe(ctx, c.now(), false)
	if err != nil {
		return nil, nil, err
	}
	// One fresh stats reading on top of the saved per-minute history.
	c.sweepStats(ctx, statsTargets(pol, obs))
	return eng.Plan(buildSnapshot(pol, obs, c.states, c.usage.samples()), obs.At), obs, nil
}

// trackWaiting remembers since when each group has waited for GPUs, and
// forgets groups that wait no more.
func (c *Controller) trackWaiting(r *round) {
	for k, groups := range r.obs.Queued {
		for g, q := range groups {
			if q.Count > 0 {
				c.state(k).setWaiting(g, q.Since)
			}
		}
	}
	for k, st := range c.states {
		for g := range st.Waiting {
			if q := r.obs.Queued[k][g]; q.Count == 0 && !st.holds(g) {
				delete(st.Waiting, g)
			}
		}
		for g := range st.Interrupted {
			// Running again (nothing of it held or queued), or gone.
			if q := r.obs.Queued[k][g]; q.Count == 0 && !st.holds(g) {
				delete(st.Interrupted, g)
			}
		}
	}
}
