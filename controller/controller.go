// Package controller is Steward's imperative shell: it watches Nomad, runs
// the pure decision engine (policy/engine) and carries its actions out
// through Nomad's API — priorities, checkpoint signals, allocation stops,
// job scaling — recording every decision where the Nomad UI shows it.
package controller

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// Controller enforces a policy on one Nomad cluster.
type Controller struct {
	// wiring is its config, logger, Nomad and clock, set by New alone and
	// copied into each owner (wiring.go).
	wiring
	client *api.Client
	obs    *observer
	// lease proves leadership; nomad refuses writes without it (fence.go).
	lease *lease
	// crash is a step to exit at (crash.go; tests only).
	crash crashAt

	// The duties around the rounds, each a type of its own that owns its
	// state (docs/design.md, "Who owns what").
	pub      *publisher // publishes what the rounds leave (publish.go)
	notices  *outbox    // keeps and sends the decisions' messages (outbox.go)
	election *elector   // holds the leadership (elector.go)
	sampler  *sampler   // reads the GPUs' activity (sampler.go)
	drains   *drainer   // moves drains on (drainer.go)
	web      *endpoints // serves the HTTP endpoints (endpoints.go)

	mu      sync.Mutex // guards pol, eng, health, lastCheck (read by HTTP and SIGHUP)
	pol     *policy.Policy
	eng     *engine.Engine
	health  Health
	trigger wakeup // asks the loop for a round soon (poke)
	// lastCheck is what `steward job check` plans on (check.go); checkAddr
	// is where this controller answers checks, published in the status.
	lastCheck *checkBase
	checkAddr *checkAddress

	// The jobs' states, as read and written (store.go): the loop reads
	// them through c.states().
	*stateStore
	// The actor carries out the plans (actor.go).
	*actor
	// The placeholders that hold earmarked GPUs (placeholder.go).
	*placeholders
	// The tenants' fair-share usage, accounted and saved in Nomad
	// (fairshare.go).
	*fairSharer
	// What Steward refused of the jobs' meta (jobmeta.go).
	*metaChecker
	// People's requests, carried out by the actor (requests.go).
	*requester
	// The pool guard's holds, carried out by the actor (poolguard_act.go).
	*poolHolds
	decisions *recentDecisions // the latest, for the status (outcomes.go)
	// unsettled is the newest index of Steward's writes not yet seen back:
	// a round plans on the cache only once it holds it (reconcile,
	// clusterCache.settle; 0: none).
	unsettled uint64
	usage     *usageStore
	metrics   *metrics

	pressureMu    sync.Mutex
	pressureSince time.Time
	// latency measures each preemption's decision latency (latency.go).
	latency decisionLatency
}

// Health is what /healthz reports.
type Health struct {
	Leader        bool      `json:"leader"`
	Identity      string    `json:"identity"`
	LastReconcile time.Time `json:"last_reconcile"`
	LastError     string    `json:"last_error,omitempty"`
	PolicyFiles   []string  `json:"policy_files"`
	DryRun        bool      `json:"dry_run"`
	// SystemPreemption is Nomad's system scheduler preemption: "on"
	// (evictions without a checkpoint signal: turn it off), "off", or
	// "unknown" (syspreempt.go).
	SystemPreemption string `json:"system_preemption,omitempty"`
	// Warnings are what the controller refuses to judge and the operator
	// should fix: GPUs whose stats carry no utilisation (gpurefusals.go).
	Warnings []string `json:"warnings,omitempty"`
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
	var n Nomad = fencedNomad{Nomad: ioUnlocked{withDeadline(NewNomad(client), cfg.CallTimeout)}, lease: ls}
	if cfg.DryRun {
		n = dryNomad{n}
	}
	obs := newObserver(n, cfg.StateNamespace)
	obs.resync = cfg.Resync
	obs.behind = true
	obs.cache.guard(cfg.ControllerPools)
	c := &Controller{
		wiring: wiring{config: &cfg, logger: log, client: n, clock: time.Now}, client: client, lease: ls,
		obs: obs, crash: crashAt{step: os.Getenv(CrashAtEnv), log: log},
		pol: p, eng: engine.New(p), trigger: make(wakeup, 1),
		usage: newUsageStore(), metrics: newMetrics(),
	}
	giveDuties(c)
	if cfg.Traffic != nil {
		c.metrics.reg.MustRegister(cfg.Traffic.collectors()...)
	}
	if cfg.ActivitySource == ActivityPrometheus {
		if c.sampler.prom, err = newPromSource(cfg.Prometheus); err != nil {
			return nil, err
		}
		c.sampler.gpuRefused.hint = fmt.Sprintf("Steward reads %s from Prometheus, by the GPU's UUID in label %s: docs/reference/controller.md",
			cfg.Prometheus.Query, cfg.Prometheus.UUIDLabel)
	}
	if !cfg.DryRun {
		// A dry run (steward plan) sends nothing: it needs no secrets.
		if err := checkNotifyEnv(p); err != nil {
			return nil, err
		}
		nm := newNotifyMetrics()
		c.metrics.reg.MustRegister(nm.collectors()...)
		c.notices.notifier = newNotifier(log.Named("notify"), ls.valid, nm)
		c.notices.notifier.delivered = c.trigger.poke
	}
	c.health.Identity, c.health.PolicyFiles, c.health.DryRun = cfg.Identity, cfg.PolicyFiles, cfg.DryRun
	c.resetState()
	return c, nil
}

// giveDuties gives c the types that carry its duties around the rounds,
// and the owners inside a round (store, actor, ...), each given what it
// needs of c rather than c (docs/design.md, "Who owns what").
func giveDuties(c *Controller) {
	c.decisions, c.checkAddr = &recentDecisions{}, &checkAddress{addr: c.cfg().Advertise}
	c.sampler = &sampler{wiring: c.wiring, usage: c.usage, metrics: c.metrics, poke: c.trigger.poke}
	c.drains = &drainer{poke: c.trigger.poke}
	c.web = newEndpoints(c)
	c.metaChecker = &metaChecker{wiring: c.wiring, metrics: c.metrics}
	c.stateStore = newStateStore(c)
	c.pub = newPublisher(c) // reads the store, meta checker and sampler
	c.notices = &outbox{wiring: c.wiring, store: c.stateStore, usage: c.usage, client: c.client, engineNow: c.engineNow}
	c.stateStore.forgotten = c.pub.forgetRecords // a new term writes the records afresh
	c.actor = newActor(c)
	c.drains.actor = c.actor // the drainer acts through the actor
	c.election = newElector(c)
	c.placeholders = &placeholders{c.stateStore}
	c.fairSharer = &fairSharer{wiring: c.wiring}
	c.requester = &requester{c.actor}
	c.poolHolds = &poolHolds{c.actor}
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
	p, err := LoadPolicy(c.cfg().PolicyFiles)
	if err == nil && !c.cfg().DryRun {
		err = checkNotifyEnv(p)
	}
	if err != nil {
		c.log().Error("policy reload failed: keeping the last good policy", "error", err)
		c.metrics.reloads.WithLabelValues("error").Inc()
		return err
	}
	c.mu.Lock()
	c.pol, c.eng = p, engine.New(p)
	c.mu.Unlock()
	c.metrics.reloads.WithLabelValues("ok").Inc()
	c.log().Info("policy reloaded", "files", c.cfg().PolicyFiles, "summary", policySummary(p))
	c.trigger.poke()
	return nil
}

func policySummary(p *policy.Policy) string {
	tenants := plural(len(p.Tenants), "tenant")
	if len(p.Departments) > 0 { // named only when there are some: older summaries read as before
		tenants += ", " + plural(len(p.Departments), "department")
	}
	return plural(len(p.Tiers), "tier") + ", " + tenants + ", " + plural(len(p.Pools), "pool") + ", " +
		plural(len(p.Idle), "idle rule")
}

func (c *Controller) engineNow() (*policy.Policy, *engine.Engine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pol, c.eng
}

// pressure notes that an event that may create pressure arrived now: the
// decision latency metric runs from here to the first call on a victim.
func (c *Controller) pressure(at time.Time) {
	c.pressureMu.Lock()
	if c.pressureSince.IsZero() {
		c.pressureSince = at
	}
	c.pressureMu.Unlock()
	c.trigger.poke()
}

// pressurePending reports whether an event brought new pressure that no
// round has taken yet.
func (c *Controller) pressurePending() bool {
	c.pressureMu.Lock()
	defer c.pressureMu.Unlock()
	return !c.pressureSince.IsZero()
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
	h := c.health
	c.mu.Unlock()
	h.Warnings = append(c.sampler.activityHealthWarning(), c.sampler.gpuRefused.healthWarnings()...)
	return h
}

func (c *Controller) setHealth(f func(h *Health)) {
	c.mu.Lock()
	f(&c.health)
	c.mu.Unlock()
}
