package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// fakeNomad records every call and keeps variables in memory.
type fakeNomad struct {
	mu    sync.Mutex
	calls []string
	vars  map[string]map[string]string // "ns:path" -> items
	index map[string]uint64
	fail  map[string]error // call prefix -> error
	// failNext fails the next calls equal to a key, as many times as its
	// value, with errInjected.
	failNext map[string]int
	next     uint64
	// purged jobs ("ns/id") are unknown to JobExists.
	purged map[string]bool
	// cluster answers the reads (fakecluster_test.go).
	cluster *fakeCluster
	// gets counts variable reads per namespace (reads are not calls);
	// getDelay slows each (a Nomad under load).
	gets     map[string]int
	getDelay time.Duration
	// files answer StatAllocFile ("allocID:path"); statHook, when set,
	// runs before each (a slow client, a missing right).
	files    map[string]*api.AllocFileInfo
	stats    int
	statHook func(ctx context.Context, allocID, path string) error
	// siteHook, when set, sees each write as it is made (outside the
	// fake's lock, one at a time: hookMu; records are merged several at
	// once): tests that count writes by call site.
	siteHook func(call string)
	hookMu   sync.Mutex
	putHook  func(call string, items map[string]string)
	// ended answers AllocsByPrefix: allocations Nomad no longer lists as
	// meant to run (a stopped victim, its end), besides the cluster's.
	ended []*api.AllocationListStub
	// prefixReads counts AllocsByPrefix calls.
	prefixReads int
}

func newFakeNomad() *fakeNomad {
	return &fakeNomad{vars: map[string]map[string]string{}, index: map[string]uint64{}, fail: map[string]error{}, purged: map[string]bool{}}
}

func (f *fakeNomad) record(call string) error {
	if f.siteHook != nil {
		f.hookMu.Lock()
		f.siteHook(call)
		f.hookMu.Unlock()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if f.failNext[call] > 0 {
		f.failNext[call]--
		return fmt.Errorf("%s: %w", call, errInjected)
	}
	for prefix, err := range f.fail {
		if strings.HasPrefix(call, prefix) {
			return err
		}
	}
	return nil
}

func (f *fakeNomad) Signal(_ context.Context, ns, alloc, task, signal string) error {
	return f.record(fmt.Sprintf("signal %s %s %s", ns, alloc, signal))
}
func (f *fakeNomad) JobExists(_ context.Context, ns, job string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.purged[ns+"/"+job], nil
}
func (f *fakeNomad) RegisterJob(_ context.Context, job *api.Job) error {
	gpus := uint64(0)
	for _, tg := range job.TaskGroups {
		for _, t := range tg.Tasks {
			if t.Resources != nil {
				for _, d := range t.Resources.Devices {
					gpus += *d.Count
				}
			}
		}
	}
	return f.record(fmt.Sprintf("register %s/%s gpus=%d", *job.Namespace, *job.ID, gpus))
}
func (f *fakeNomad) PurgeJob(_ context.Context, ns, job string) error {
	return f.record(fmt.Sprintf("purge %s/%s", ns, job))
}
func (f *fakeNomad) StopAlloc(_ context.Context, ns, alloc string) (uint64, error) {
	if err := f.record(fmt.Sprintf("stop %s %s", ns, alloc)); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cluster != nil {
		f.cluster.stopAlloc(alloc)
	}
	return 0, nil
}
func (f *fakeNomad) Scale(_ context.Context, ns, job, group string, count int, msg string, _ map[string]any, index uint64) (uint64, error) {
	if err := f.record(fmt.Sprintf("scale %s/%s %s %d: %s", ns, job, group, count, msg)); err != nil {
		return 0, err
	}
	return f.scaled(ns, job, group, count, index)
}
func (f *fakeNomad) ScaleAhead(_ context.Context, ns, job, group string, count int, index uint64) (uint64, error) {
	if err := f.record(fmt.Sprintf("scale-ahead %s/%s %s %d", ns, job, group, count)); err != nil {
		return 0, err
	}
	return f.scaled(ns, job, group, count, index)
}

func (f *fakeNomad) ScaleWithPolicy(_ context.Context, ns, job, group string, count int, p ScalingPolicy, msg string, _ map[string]any, index uint64, evalPriority int) (uint64, error) {
	if err := f.record(fmt.Sprintf("scale-policy %s/%s %s %d (%s) eval-priority=%d: %s", ns, job, group, count, p, evalPriority, msg)); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cluster == nil {
		return index + 1, nil
	}
	return f.cluster.scaleWithPolicy(ns, job, group, count, p, index)
}

// scaled applies a scale to the fake cluster, when the test has one.
func (f *fakeNomad) scaled(ns, job, group string, count int, index uint64) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cluster == nil {
		return index + 1, nil
	}
	return f.cluster.scale(ns, job, group, count, index)
}
func (f *fakeNomad) SetPriority(_ context.Context, ns, job string, prio int, _ string, index uint64) (uint64, error) {
	if err := f.record(fmt.Sprintf("priority %s/%s %d", ns, job, prio)); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cluster != nil {
		return f.cluster.setPriority(ns, job, prio, index)
	}
	return index + 1, nil
}
func (f *fakeNomad) MoveJob(_ context.Context, ns, job, nodePool, _ string, index uint64) (uint64, error) {
	if err := f.record(fmt.Sprintf("move %s/%s %s", ns, job, nodePool)); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cluster != nil {
		return f.cluster.move(ns, job, nodePool, index)
	}
	return index + 1, nil
}
func (f *fakeNomad) GetVar(_ context.Context, ns, path string) (map[string]string, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gets == nil {
		f.gets = map[string]int{}
	}
	f.gets[ns]++
	time.Sleep(f.getDelay)
	if err := f.fail["get "+ns+" "+path]; err != nil {
		return nil, 0, err
	}
	v, ok := f.vars[ns+":"+path]
	if !ok {
		return nil, 0, nil
	}
	return maps.Clone(v), f.index[ns+":"+path], nil
}
func (f *fakeNomad) PutVar(_ context.Context, ns, path string, items map[string]string, cas bool, index uint64) (uint64, error) {
	if err := f.record(fmt.Sprintf("put %s %s", ns, path)); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if cas && f.index[ns+":"+path] != index {
		return 0, fmt.Errorf("put: %w", errConflict)
	}
	f.next++
	f.vars[ns+":"+path] = maps.Clone(items)
	if f.putHook != nil {
		f.putHook(fmt.Sprintf("put %s %s", ns, path), items)
	}
	f.index[ns+":"+path] = f.next
	return f.next, nil
}
func (f *fakeNomad) DeleteVar(_ context.Context, ns, path string, index uint64) error {
	if err := f.record(fmt.Sprintf("delete %s %s", ns, path)); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if index != 0 && f.index[ns+":"+path] != index {
		return fmt.Errorf("delete: %w", errConflict)
	}
	delete(f.vars, ns+":"+path)
	delete(f.index, ns+":"+path)
	return nil
}
func (f *fakeNomad) ListVars(_ context.Context, namespace, prefix string) ([]VarRef, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []VarRef
	for k := range f.vars {
		ns, path, _ := strings.Cut(k, ":")
		if (namespace == "*" || ns == namespace) && strings.HasPrefix(path, prefix) {
			out = append(out, VarRef{Namespace: ns, Path: path, Index: f.index[k]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// callsMatching returns the recorded calls that start with prefix.
func (f *fakeNomad) callsMatching(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

var errInjected = errors.New("injected fault")

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

const testPolicyText = `
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
}
tenant "ml" {
  reserve = 0
}
# Tenants a and b may use every tier (a namespace no tenant names may use
# only the default tier).
tenant "a" {}
tenant "b" {}
idle "notebooks" {
  tiers     = ["interactive"]
  threshold = 10
  after     = "15m"
}
preemption {
  min_runtime       = "0s"
  grace             = "2m"
  checkpoint_signal = "SIGUSR1"
}
`

func testPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, diags := policy.ParseBytes("test.hcl", []byte(testPolicyText))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	return p
}

// testController is a controller over the fake, without an API client;
// its observer reads through the same Nomad, with no resync period.
// Its clock, Nomad, logger, config and usage store are set here, by its
// options, and nowhere later: the owners hold copies of them (wiring.go).
func testController(t *testing.T, f *fakeNomad, opts ...testOption) *Controller {
	p := testPolicy(t)
	s := testSetup{cfg: DefaultConfig(), log: hclog.NewNullLogger(), nomad: f, now: func() time.Time { return t0 }, usage: newUsageStore()}
	for _, o := range opts {
		o(&s)
	}
	ls := newLease()
	// The act lock is let go during calls, as New has it (actlock.go).
	var n Nomad = ioUnlocked{s.nomad}
	if s.fenced {
		n = fencedNomad{Nomad: ioUnlocked{withDeadline(s.nomad, s.cfg.CallTimeout)}, lease: ls}
	}
	c := &Controller{wiring: wiring{config: &s.cfg, logger: s.log, client: n, clock: s.now}, lease: ls, obs: newObserver(n, s.cfg.StateNamespace),
		pol: p, eng: engine.New(p), trigger: make(wakeup, 1), usage: s.usage, metrics: newMetrics()}
	giveDuties(c)
	c.resetState()
	return c
}

// testSetup is what a test's controller is made with (testController).
type testSetup struct {
	cfg    Config
	log    hclog.Logger
	nomad  Nomad
	now    func() time.Time
	usage  *usageStore
	fenced bool // Nomad behind the lease's fence and the call timeout, as New makes it
}

type testOption func(*testSetup)

func withClock(now func() time.Time) testOption { return func(s *testSetup) { s.now = now } }
func withLogger(l hclog.Logger) testOption      { return func(s *testSetup) { s.log = l } }
func withNomad(n Nomad) testOption              { return func(s *testSetup) { s.nomad = n } }
func withUsage(u *usageStore) testOption        { return func(s *testSetup) { s.usage = u } }
func withFence() testOption                     { return func(s *testSetup) { s.fenced = true } }
func withConfig(set func(*Config)) testOption   { return func(s *testSetup) { set(&s.cfg) } }

// testClock is a clock a test moves: a controller's clock is given at
// construction (withClock(k.now)), and the test sets the time.
type testClock struct {
	mu sync.Mutex
	at time.Time
}

func newTestClock(at time.Time) *testClock { return &testClock{at: at} }

func (k *testClock) now() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.at
}

func (k *testClock) set(at time.Time) {
	k.mu.Lock()
	k.at = at
	k.mu.Unlock()
}

// job returns an observed job with one GPU group.
func job(ns, id, tier string, priority, count, gpus int) *ObservedJob {
	return &ObservedJob{Namespace: ns, ID: id, Type: "service", Priority: priority, ModifyIndex: 10,
		Meta: map[string]string{"steward.tier": tier}, Groups: map[string]GroupSpec{"work": {Count: count, GPUsPerAlloc: gpus, Tasks: []string{"work"}, SignalTasks: []string{"work"}}}}
}
