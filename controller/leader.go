package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// LeaderLockPath is the variable whose lock the leader holds.
const LeaderLockPath = "steward/leader"

// errLostLease refuses a write by a controller that cannot prove it still
// leads.
var errLostLease = errors.New("not leading: this controller's leader lease has expired, so it changes nothing")

// lease is a leader's proof that it holds the lock, until a local deadline.
//
// Nomad keeps a variable lock for twice its TTL after the last renewal and
// then for the lock delay (nomad/locks.go), so nobody else can acquire it
// before lastRenewalSent + 2*TTL + delay. The deadline here is
// lastRenewalSent + TTL: strictly earlier, with a whole TTL to spare for a
// slow clock or a paused process. A leader whose renewals fail, or that
// was paused (SIGSTOP, a long GC, a frozen VM) past its deadline, refuses
// every write from then on, before another controller can lead.
type lease struct {
	mu       sync.Mutex
	enforced bool // false: no election (dry run, tests of the acting logic)
	until    time.Time
	now      func() time.Time
}

func newLease() *lease { return &lease{now: time.Now} }

// valid reports whether a write may go out now.
func (l *lease) valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.enforced || l.now().Before(l.until)
}

// deadline is when the lease ends (zero when not enforced).
func (l *lease) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// extend records a successful acquire or renew whose request was sent at
// sent.
func (l *lease) extend(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.enforced = true
	if t := sent.Add(ttl); t.After(l.until) {
		l.until = t
	}
}

// end withdraws the lease at once.
func (l *lease) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.enforced = true
	l.until = time.Time{}
}

// elect runs lead while this controller holds the leader lock (a Nomad
// variable lock), and contends again whenever it loses it.
//
// It does not use api.LockLeaser: a renewal refused with 409 (someone else
// holds the lock) ends its renew loop but not the protected function, and
// its calls have no timeout. Here lead's context ends, and every write is
// refused (fencedNomad), as soon as the lease cannot be proven.
func (e *elector) elect(ctx context.Context, lead func(context.Context) error) error {
	// Nomad replaces a lock delay of 0 with its default of 15 s
	// (structs.VariableLock.Canonicalize): ask for the smallest it keeps.
	delay := max(e.cfg().LockDelay, time.Millisecond)
	v := api.Variable{
		Namespace: e.cfg().StateNamespace,
		Path:      LeaderLockPath,
		Items:     map[string]string{"holder": e.cfg().Identity},
		Lock: &api.VariableLock{
			TTL:       e.cfg().LockTTL.String(),
			LockDelay: delay.String(),
		},
	}
	e.log().Info("waiting to lead", "lock", LeaderLockPath, "namespace", e.cfg().StateNamespace, "identity", e.cfg().Identity)
	seen := &leaseSeen{now: time.Now}
	return e.contend(ctx, func() (leaderLock, error) {
		locks, err := e.client.Locks(api.WriteOptions{Namespace: e.cfg().StateNamespace}, v, api.LocksOptionWithMaxRetries(0))
		if err != nil {
			return nil, fmt.Errorf("leader lock: %w", err)
		}
		return nomadLock{e: e, locks: locks, seen: seen}, nil
	}, lead)
}

// leaderLock is the leader lock as elect uses it: a Nomad variable lock
// (nomadLock), or a fake in unit tests. Each call fails with
// api.ErrLockConflict when another controller holds the lock.
type leaderLock interface {
	Acquire(ctx context.Context) error
	Renew(ctx context.Context) error
	Release(ctx context.Context) error
}

// nomadLock is a Nomad variable lock; each request has a timeout
// (lockCall).
type nomadLock struct {
	e     *elector
	locks *api.Locks
	seen  *leaseSeen
}

func (l nomadLock) Acquire(ctx context.Context) error {
	return l.e.lockCall(ctx, l.locks, func(cctx context.Context) error {
		// Nomad grants the lock on a variable without one: not while a
		// copy elected with -election lease renews its lease there.
		if items, index, err := l.e.unfenced().GetVar(cctx, l.e.cfg().StateNamespace, LeaderLockPath); err == nil && leaseHeld(items, index, l.seen, l.e.cfg().LockTTL) {
			return api.ErrLockConflict
		}
		_, err := l.locks.Acquire(cctx)
		return err
	})
}
func (l nomadLock) Renew(ctx context.Context) error { return l.e.lockCall(ctx, l.locks, l.locks.Renew) }
func (l nomadLock) Release(ctx context.Context) error {
	return l.e.lockCall(ctx, l.locks, l.locks.Release)
}

// contend acquires the lock, runs lead while holding it (holdLease), and
// contends again, until ctx ends.
func (e *elector) contend(ctx context.Context, newLock func() (leaderLock, error), lead func(context.Context) error) error {
	ttl := e.cfg().LockTTL
	retry := electionWait{ttl: ttl, max: e.cfg().MaxBackoff}
	for ctx.Err() == nil {
		e.lease.end()
		lk, err := newLock()
		if err != nil {
			return err
		}
		sent := time.Now()
		err = lk.Acquire(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, api.ErrLockConflict):
			// Another controller leads. Ask again soon: the takeover time
			// is Nomad's (2*TTL + delay after the leader's last renewal)
			// plus at most this poll.
			sleepCtx(ctx, retry.after(err))
			continue
		case err != nil:
			wait := retry.after(err)
			e.log().Warn("leader election", "error", needs(err, "variables write on steward/leader", "acquire the leader lock"), "retry_in", wait)
			sleepCtx(ctx, wait)
			continue
		}
		retry.failures = 0
		e.lease.extend(sent, ttl)
		if e.holdLease(ctx, lk, lead) {
			// Stepped down: leave the lock to another copy for a TTL
			// (followers poll every lockPoll) rather than take it back at
			// once to hang again.
			sleepCtx(ctx, ttl)
		}
	}
	return nil
}

// electionWait is how long a copy that does not lead waits before it asks
// for the lock again: a lockPoll after an answer (another copy leads),
// and after a failed call (Nomad slow or down) a backoff that a TTL
// bounds and an answer ends. Before, the backoff grew with every failure
// of the follower's life and only leading reset it: on a loaded server at
// 250 nodes a follower's occasional timed-out poll had grown it to 30 s,
// and it took the dead leader's lease 32 s after the death instead of
// 2×TTL (6 s on a 3 s TTL; issue 33, 2026-11-28).
type electionWait struct {
	ttl, max time.Duration
	// failures is the run of failed calls since the last answer.
	failures int
}

// after is the wait after a call that ended with err.
func (w *electionWait) after(err error) time.Duration {
	if errors.Is(err, api.ErrLockConflict) {
		w.failures = 0
		poll := lockPoll(w.ttl)
		if due := (leaseWait{}); errors.As(err, &due) && due.in > 0 && due.in < poll {
			return due.in // the lease falls due before the next poll
		}
		return poll
	}
	wait := min(backoff(w.failures, w.max), max(w.ttl, time.Second))
	w.failures++
	return wait
}

// lockPoll is how often a follower asks for the lock.
func lockPoll(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

// holdLease runs lead while the lease can be renewed and its rounds
// finish, and returns once lead has stopped (after the lease was lost, ctx
// ended, or it stepped down: then it reports true).
func (e *elector) holdLease(ctx context.Context, locks leaderLock, lead func(context.Context) error) (steppedDown bool) {
	e.roundFinished()
	e.log().Info("leading: this controller acts", "identity", e.cfg().Identity)
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- lead(lctx) }()
	steppedDown, finished := e.keepLease(ctx, locks, done, stop)
	stop()
	if !finished {
		<-done
	}
	e.log().Info("no longer leading", "identity", e.cfg().Identity)
	if e.lease.valid() {
		// Stopped while leading: hand the lock over at once rather than
		// after its TTL.
		e.lease.end()
		if err := locks.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, api.ErrLockConflict) {
			e.log().Warn("release the leader lock", "error", err)
		}
	}
	return steppedDown
}

// keepLease keeps the lease while lead runs (its result comes on done):
// it renews the lock every third of the TTL, and ends the lease and lead
// (stop) as soon as the lease cannot be proven or no round finishes within
// the round timeout (then it releases the lock and reports steppedDown).
// It returns when lead returned (finished), ctx ended, or the lease ended.
func (e *elector) keepLease(ctx context.Context, locks leaderLock, done <-chan error, stop context.CancelFunc) (steppedDown, finished bool) {
	watch := time.NewTicker(roundCheck(e.cfg().RoundTimeout))
	defer watch.Stop()
	renew := time.NewTicker(e.cfg().LockTTL / 3)
	defer renew.Stop()
	expiry := time.NewTimer(time.Until(e.lease.deadline()))
	defer expiry.Stop()
	lost := func(why string, args ...any) {
		e.lease.end()
		stop()
		e.log().Warn("lost the leader lock: stopping at once ("+why+")", append(args, "identity", e.cfg().Identity)...)
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				e.log().Error("control loop ended", "error", err)
			}
			// States of a newer schema: step down, and leave the lock to
			// a newer copy for a TTL rather than take it back at once.
			return errors.Is(err, errNewerState), true
		case <-ctx.Done():
			return false, false
		case <-watch.C:
			if e.stuck() {
				lost("no round finished within the round timeout: stepping down", "round_timeout", e.cfg().RoundTimeout,
					"last_round", e.lastRound())
				// Release before waiting for lead: a call that hangs
				// still must not keep the lock (the lease is ended, so
				// it can write nothing).
				if err := locks.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, api.ErrLockConflict) {
					e.log().Warn("release the leader lock", "error", err)
				}
				return true, false
			}
		case <-expiry.C:
			if !e.lease.valid() {
				lost("the lease expired before a renewal succeeded", "deadline", e.lease.deadline())
				return false, false
			}
			expiry.Reset(time.Until(e.lease.deadline()))
		case <-renew.C:
			if !e.renewLease(ctx, locks, expiry, lost) {
				return false, false
			}
		}
	}
}

// renewLease renews the lock and extends the lease (and its expiry) by
// it; it reports false, the lease ended by lost, when the lease cannot be
// kept.
func (e *elector) renewLease(ctx context.Context, locks leaderLock, expiry *time.Timer, lost func(why string, args ...any)) bool {
	if !e.lease.valid() {
		// Paused past the deadline (the ticker fires late): another
		// controller may lead already.
		lost("paused past the lease deadline", "deadline", e.lease.deadline())
		return false
	}
	sent, err := e.renewUntil(ctx, locks, e.lease.deadline())
	switch {
	case err == nil:
		e.lease.extend(sent, e.cfg().LockTTL)
		expiry.Reset(time.Until(e.lease.deadline()))
	case errors.Is(err, api.ErrLockConflict):
		lost("Nomad refused the renewal: another controller holds the lock")
		return false
	case ctx.Err() == nil:
		e.log().Warn("renew the leader lock; retrying until the lease deadline", "error", err, "deadline", e.lease.deadline())
	}
	return true
}

// renewUntil renews the lock with until, the lease's deadline, as its
// own: a renewal may take as long as the lease it extends has left. It
// reports when the renewal that succeeded was sent, from which its lease
// runs.
//
// It was given a third of the TTL, as every lock request is: on a server
// slowed by load (2 shared cores, 1,000 simulated nodes, a 6 s lease), a
// renewal was abandoned after its 2 s although 3.3 s of the lease were
// left, the next one too, and the lease was lost (2026-11-27); at 250
// nodes a 3 s lease was lost so, each renewal given 1 s. A renewal
// answered late is as good a proof as one answered at once:
// the lease it grants runs one TTL from when it was sent (lease.extend),
// and a follower sees its index no earlier than that. What bounds a
// renewal is the lease it would extend: past its deadline the fence has
// closed, and a renewal still out then is abandoned.
//
// A renewal that failed without Nomad naming another holder (a refused
// connection, this term's own write whose index moved) is sent again
// after renewRetry rather than at the next tick (up to TTL/3 later), so
// that the time the lease has left goes to renewing it; each attempt is
// timed (steward_lease_renew_seconds), and one answered after a third of
// the TTL is logged with what its lease had left.
func (e *elector) renewUntil(ctx context.Context, locks leaderLock, until time.Time) (sent time.Time, err error) {
	rctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	ttl := e.cfg().LockTTL
	for {
		sent = time.Now()
		err = locks.Renew(rctx)
		took := time.Since(sent)
		if e.renewSeconds != nil {
			e.renewSeconds.Observe(took.Seconds())
		}
		if err == nil && took > ttl/3 {
			e.log().Info("slow renewal of the leader lease", "took", took.Round(time.Millisecond),
				"lease_left", time.Until(until).Round(time.Millisecond), "ttl", ttl)
		}
		if err == nil || errors.Is(err, api.ErrLockConflict) || rctx.Err() != nil {
			return sent, err
		}
		if !sleepCtx(rctx, renewRetry(ttl)) {
			return sent, err
		}
	}
}

// renewRetry is the pause before a failed renewal is sent again: short
// against the lease (100 ms at a 3 s TTL), at most a follower's poll.
func renewRetry(ttl time.Duration) time.Duration { return min(ttl/30, lockPoll(ttl)) }

// callContext is the context of one lock request: the caller's deadline
// when it set one (a renewal's: its lease's end, renewUntil), else a
// third of the TTL, so that a hung request does not outlive the lease it
// is meant to take or hand back.
func callContext(ctx context.Context, ttl time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, ttl/3)
}

// lockCall runs one lock request in its callContext. The api package
// sends lock requests with the Locks' own WriteOptions, not the context
// it is given, so the context goes there.
func (e *elector) lockCall(ctx context.Context, locks *api.Locks, f func(context.Context) error) error {
	cctx, cancel := callContext(ctx, e.cfg().LockTTL)
	defer cancel()
	locks.WriteOptions = *(&api.WriteOptions{Namespace: e.cfg().StateNamespace}).WithContext(cctx)
	return f(cctx)
}
