package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// fakeLock is a leader lock in memory, shared by the controllers of a
// test: held until released or 2×TTL after its last renewal, as Nomad's.
type fakeLock struct {
	mu     sync.Mutex
	ttl    time.Duration
	holder string
	until  time.Time
	// taken lists the holders in the order they acquired the lock.
	taken []string
}

type fakeLockHandle struct {
	l  *fakeLock
	id string
}

func (h fakeLockHandle) Acquire(context.Context) error {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if h.l.holder != "" && h.l.holder != h.id && time.Now().Before(h.l.until) {
		return api.ErrLockConflict
	}
	h.l.holder, h.l.until = h.id, time.Now().Add(2*h.l.ttl)
	h.l.taken = append(h.l.taken, h.id)
	return nil
}

func (h fakeLockHandle) Renew(context.Context) error {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if h.l.holder != h.id {
		return api.ErrLockConflict
	}
	h.l.until = time.Now().Add(2 * h.l.ttl)
	return nil
}

func (h fakeLockHandle) Release(context.Context) error {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if h.l.holder == h.id {
		h.l.holder = ""
	}
	return nil
}

func (l *fakeLock) takers() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.taken...)
}

// hangingNomad is a Nomad whose cluster reads hang until their context
// ends, as a request to a server that accepted the connection and never
// answers does.
type hangingNomad struct {
	*fakeNomad
	entered chan struct{}
	once    sync.Once
}

func (h *hangingNomad) ListNodes(ctx context.Context, _ bool) ([]*api.NodeListStub, uint64, error) {
	h.once.Do(func() { close(h.entered) })
	<-ctx.Done()
	return nil, 0, ctx.Err()
}

// electedController is a controller as Run builds it, on n, with the
// timeouts of a test.
func electedController(t *testing.T, id string, n Nomad, roundTimeout time.Duration) *Controller {
	c := testController(t, nil, withNomad(n), withFence(), withClock(time.Now), withConfig(func(cfg *Config) {
		cfg.Identity, cfg.LockTTL, cfg.CallTimeout, cfg.RoundTimeout = id, 300*time.Millisecond, 50*time.Millisecond, roundTimeout
	}))
	return c
}

// TestStuckLeaderStepsDown: the leader's cluster reads hang. Each ends by
// its deadline (-nomad-timeout), no round finishes, and within the round
// timeout the leader steps down: its lease ends (every write refused) and
// it releases the lock, although its renewals would still succeed. The
// second copy takes the lock and finishes rounds. Before, the read hung
// for ever while the lease loop renewed the lock: no enforcement and no
// failover.
func TestStuckLeaderStepsDown(t *testing.T) {
	lk := &fakeLock{ttl: 300 * time.Millisecond}
	hung := &hangingNomad{fakeNomad: newFakeNomad(), entered: make(chan struct{})}
	a := electedController(t, "a", hung, 400*time.Millisecond)
	b := electedController(t, "b", newFakeNomad(), 400*time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run := func(c *Controller) {
		defer wg.Done()
		_ = c.election.contend(ctx, func() (leaderLock, error) { return fakeLockHandle{l: lk, id: c.cfg().Identity}, nil }, c.lead)
	}
	wg.Add(1)
	go run(a)
	select {
	case <-hung.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("a never led and read the cluster")
	}
	wg.Add(1)
	go run(b)

	deadline := time.Now().Add(10 * time.Second)
	for !b.Health().Leader || b.Health().LastReconcile.IsZero() {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("b never took over and finished a round (lock taken by %v; a leader=%v)", lk.takers(), a.Health().Leader)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a.lease.valid() {
		t.Error("a's lease is still valid after it stepped down: its writes would go out")
	}
	if a.Health().Leader {
		t.Error("a still reports itself leader")
	}
	if got := lk.takers(); len(got) < 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("lock taken by %v, want a then b", got)
	}
	cancel()
	wg.Wait()
}
