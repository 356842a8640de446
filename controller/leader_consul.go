package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	consul "github.com/hashicorp/consul/api"
)

// consulSessionName names the controllers' sessions in Consul.
const consulSessionName = "steward-controller"

// electConsul runs lead while this controller holds a Consul session lock
// on c.cfg().Consul.LockKey, and contends again whenever it loses it. The
// session has the TTL -lock-ttl and the lock delay -lock-delay: a holder
// that vanishes loses the lock once Consul invalidates its session (Consul
// allows up to twice the TTL), and the lock delay then keeps it free a
// little longer so that an old leader that is merely slow has stopped
// acting before a new one starts. Any doubt about the lock (the session
// expired, Consul unreachable) ends leadership at once: lead's context is
// canceled and lead is waited for before contending again.
//
// Writes are fenced as on the Nomad lock (fence.go): the controller
// creates and renews the session itself (consulSession), so it knows when
// its last renewal was sent, and its lease ends one TTL after that. Consul
// invalidates a session no sooner than its TTL after the last renewal it
// received, so a leader paused or cut off past its lease refuses every
// write before another controller can hold the lock.
//
// The agent comes from c.cfg().Consul.Address, else CONSUL_HTTP_ADDR; the
// token from CONSUL_HTTP_TOKEN (never logged); TLS from CONSUL_CACERT and
// the other variables the consul CLI reads.
func (e *elector) electConsul(ctx context.Context, lead func(context.Context) error) error {
	client, addr, err := e.consulClient(ctx)
	if err != nil {
		return err
	}
	key := e.cfg().Consul.LockKey
	if key == "" {
		key = LeaderLockPath
	}
	// The API sends no lock delay when it is 0, and Consul then applies
	// its default of 15s: 1ms is the closest to none it can express.
	delay := e.cfg().LockDelay
	if delay <= 0 {
		delay = time.Millisecond
	}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		e.lease.end()
		sess, err := e.newConsulSession(ctx, client, delay)
		if err != nil {
			wait := backoff(attempt, e.cfg().MaxBackoff)
			e.log().Warn("leader election", "error", consulNeeds(err, key), "retry_in", wait)
			sleepCtx(ctx, wait)
			continue
		}
		lock, err := client.LockOpts(&consul.LockOptions{
			Key:     key,
			Value:   []byte(e.cfg().Identity),
			Session: sess.id,
		})
		if err != nil {
			sess.close()
			return fmt.Errorf("consul lock %s: %w", key, err)
		}
		e.log().Info("waiting to lead", "lock", key, "consul", addr, "identity", e.cfg().Identity)
		lost, err := waitConsulLock(ctx, lock, sess)
		if ctx.Err() != nil {
			if lost != nil {
				e.unlockConsul(lock, key)
			}
			sess.close()
			return nil
		}
		if err != nil || lost == nil {
			sess.close()
			if err != nil {
				wait := backoff(attempt, e.cfg().MaxBackoff)
				e.log().Warn("leader election", "error", consulNeeds(err, key), "retry_in", wait)
				sleepCtx(ctx, wait)
			}
			continue
		}

		steppedDown, err := e.leadWhileHeld(ctx, lost, sess, func() { e.unlockConsul(lock, key) }, lead)
		e.unlockConsul(lock, key)
		sess.close()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			e.log().Warn("leader election", "error", err)
		}
		// A term ended: start the backoff over.
		attempt = -1
		sleepCtx(ctx, e.afterConsulTerm(steppedDown, err))
	}
	return nil
}

// waitConsulLock waits for the lock on sess. The wait ends with ctx, or
// with the session (Lock would wait on a dead session until its next query
// fails); lost is nil when it ended so.
func waitConsulLock(ctx context.Context, lock *consul.Lock, sess *consulSession) (lost <-chan struct{}, err error) {
	stopWait := make(chan struct{})
	var once sync.Once
	endWait := func() { once.Do(func() { close(stopWait) }) }
	stopAfter := context.AfterFunc(ctx, endWait)
	go func() {
		select {
		case <-sess.gone:
			endWait()
		case <-stopWait:
		}
	}()
	lost, err = lock.Lock(stopWait)
	stopAfter()
	endWait()
	return lost, err
}

// afterConsulTerm is how long to let pass after a term before contending
// again: a moment, or a TTL after stepping down (or meeting a newer
// schema), so that another copy takes the lock rather than this one, to
// hang again.
func (e *elector) afterConsulTerm(steppedDown bool, err error) time.Duration {
	if steppedDown || errors.Is(err, errNewerState) {
		return e.cfg().LockTTL
	}
	return backoff(0, e.cfg().MaxBackoff)
}

// leadWhileHeld runs lead until it returns, ctx ends, lost closes (the
// lock is no longer ours), the lease cannot be proven, or no round
// finishes within the round timeout (then it releases the lock at once and
// reports steppedDown); it waits for lead to return.
func (e *elector) leadWhileHeld(ctx context.Context, lost <-chan struct{}, sess *consulSession, release func(),
	lead func(context.Context) error) (steppedDown bool, err error) {
	ttl := e.cfg().LockTTL
	e.lease.extend(sess.lastRenewal(), ttl)
	if !e.lease.valid() {
		// The wait outlasted the last renewal by a TTL: the session's
		// renewals fail, and the lock may not be ours for long.
		e.lease.end()
		return false, errors.New("acquired the Consul lock on a session not renewed within its TTL: contending again")
	}
	e.log().Info("leading: this controller acts", "identity", e.cfg().Identity)
	defer e.log().Info("no longer leading", "identity", e.cfg().Identity)
	e.roundFinished()
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- lead(lctx) }()
	check := time.NewTicker(min(lockPoll(ttl), roundCheck(e.cfg().RoundTimeout)))
	defer check.Stop()
	end := func(why string, args ...any) error {
		e.lease.end()
		stop()
		if ctx.Err() == nil {
			e.log().Warn("lost the Consul lock: stopping at once ("+why+")", append(args, "identity", e.cfg().Identity)...)
		}
		return <-done
	}
	for {
		select {
		case err := <-done:
			e.lease.end()
			return false, err
		case <-lost:
			return false, end("the lock is no longer held")
		case <-sess.gone:
			return false, end("Consul no longer knows the session")
		case <-check.C:
			if !e.lease.valid() {
				// Checked before extending: a leader paused past its
				// deadline stops, whatever a late renewal says.
				return false, end("the lease expired before a renewal succeeded", "deadline", e.lease.deadline())
			}
			e.lease.extend(sess.lastRenewal(), ttl)
			if e.stuck() {
				e.lease.end()
				stop()
				e.log().Warn("lost the Consul lock: stopping at once (no round finished within the round timeout: stepping down)",
					"round_timeout", e.cfg().RoundTimeout, "last_round", e.lastRound(), "identity", e.cfg().Identity)
				release() // before waiting: a hung call must not keep the lock
				return true, <-done
			}
		}
	}
}

// consulSession is a Consul session this controller renews itself, so
// that it knows when the last renewal that succeeded was sent: the basis
// of its lease (consul.Lock renews the sessions it creates, and says
// nothing of when).
type consulSession struct {
	id     string
	client *consul.Client
	// last is when the last successful renewal (or the creation) was
	// sent, in Unix nanoseconds.
	last atomic.Int64
	// gone closes when Consul no longer knows the session.
	gone chan struct{}
	stop context.CancelFunc
	done chan struct{}
}

// newConsulSession creates a session with the lock TTL and delay and
// renews it every third of its TTL until closed.
func (e *elector) newConsulSession(ctx context.Context, client *consul.Client, delay time.Duration) (*consulSession, error) {
	ttl := e.cfg().LockTTL
	cctx, cancel := context.WithTimeout(ctx, ttl/3)
	sent := time.Now()
	id, _, err := client.Session().Create(&consul.SessionEntry{
		Name: consulSessionName, TTL: ttl.String(), LockDelay: delay, Behavior: consul.SessionBehaviorRelease,
	}, (&consul.WriteOptions{}).WithContext(cctx))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("create a session: %w", err)
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &consulSession{id: id, client: client, gone: make(chan struct{}), stop: stop, done: make(chan struct{})}
	s.last.Store(sent.UnixNano())
	go s.renew(sctx, ttl, e.log())
	return s, nil
}

func (s *consulSession) lastRenewal() time.Time { return time.Unix(0, s.last.Load()) }

func (s *consulSession) renew(ctx context.Context, ttl time.Duration, log hclog.Logger) {
	defer close(s.done)
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, ttl/3)
		sent := time.Now()
		entry, _, err := s.client.Session().Renew(s.id, (&consul.WriteOptions{}).WithContext(cctx))
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("renew the Consul session; retrying until the lease deadline", "error", err)
		case entry == nil:
			close(s.gone)
			return
		default:
			s.last.Store(sent.UnixNano())
		}
	}
}

// close stops the renewals and destroys the session (releasing any lock
// it holds), so that another controller can lead at once.
func (s *consulSession) close() {
	s.stop()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = s.client.Session().Destroy(s.id, (&consul.WriteOptions{}).WithContext(ctx))
}

// unlockConsul releases the lock (and so ends its session), so that
// another controller can lead at once rather than after the TTL.
func (e *elector) unlockConsul(lock *consul.Lock, key string) {
	if err := lock.Unlock(); err != nil && !errors.Is(err, consul.ErrLockNotHeld) {
		e.log().Warn("release the Consul lock", "lock", key, "error", err)
	}
}

// consulClient is a Consul API client configured as the consul CLI is,
// with c.cfg().Consul.Address over CONSUL_HTTP_ADDR. Its blocking queries
// end when ctx does, so a controller waiting for the lock stops at once.
// It returns the address too, for logs (the token is never logged).
func (e *elector) consulClient(ctx context.Context) (*consul.Client, string, error) {
	cfg := consul.DefaultConfig()
	if e.cfg().Consul.Address != "" {
		cfg.Address = e.cfg().Consul.Address
	}
	hc, err := consul.NewHttpClient(cfg.Transport, cfg.TLSConfig)
	if err != nil {
		return nil, "", fmt.Errorf("consul client: %w", err)
	}
	hc.Transport = &waitCanceler{base: hc.Transport, ctx: ctx, timeout: e.cfg().CallTimeout}
	cfg.HttpClient = hc
	addr := cfg.Address
	client, err := consul.NewClient(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("consul client for %s: %w", addr, err)
	}
	return client, addr, nil
}

// consulNeeds adds what the Consul token needs to an error that says it
// lacks it.
func consulNeeds(err error, key string) error {
	if strings.Contains(err.Error(), "code: 403") {
		return fmt.Errorf("consul lock %s: %w (the CONSUL_HTTP_TOKEN token needs session:write on this node and key:write on %q)", key, err, key)
	}
	return fmt.Errorf("consul lock %s: %w", key, err)
}

// waitCanceler gives every Consul request a deadline, and ends blocking
// queries (GET with an index) when ctx ends. The Consul API gives Lock no
// context: its wait on a held lock would otherwise hold up shutdown for up
// to LockWaitTime, and a request to an agent that never answers (the
// release of the lock, the lock's watch) would hang for ever. A request
// has timeout; a blocking query its wait on top (Consul's default wait of
// 5 minutes when it names none). Writes, among them the release of the
// lock on shutdown, are not ended by ctx.
type waitCanceler struct {
	base    http.RoundTripper
	ctx     context.Context
	timeout time.Duration
}

func (t *waitCanceler) RoundTrip(r *http.Request) (*http.Response, error) {
	blocking := r.Method == http.MethodGet && r.URL.Query().Has("index")
	limit := t.timeout
	if blocking {
		wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
		if err != nil || wait <= 0 {
			wait = 5 * time.Minute
		}
		limit += wait
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if limit > 0 {
		ctx, cancel = context.WithTimeout(r.Context(), limit)
	} else {
		ctx, cancel = context.WithCancel(r.Context())
	}
	stopAfter := func() bool { return false }
	if blocking {
		stopAfter = context.AfterFunc(t.ctx, cancel)
	}
	release := func() { stopAfter(); cancel() }
	resp, err := t.base.RoundTrip(r.WithContext(ctx))
	if err != nil {
		release()
		return nil, err
	}
	resp.Body = &releaseOnClose{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// releaseOnClose runs release once the body is closed.
type releaseOnClose struct {
	io.ReadCloser
	release func()
}

func (b *releaseOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}
