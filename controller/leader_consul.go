package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	consul "github.com/hashicorp/consul/api"
)

// consulSessionName names the controllers' sessions in Consul.
const consulSessionName = "steward-controller"

// electConsul runs lead while this controller holds a Consul session lock
// on c.cfg.Consul.LockKey, and contends again whenever it loses it. The
// session has the TTL -lock-ttl and the lock delay -lock-delay: a holder
// that vanishes loses the lock once Consul invalidates its session (Consul
// allows up to twice the TTL), and the lock delay then keeps it free a
// little longer so that an old leader that is merely slow has stopped
// acting before a new one starts. Any doubt about the lock (the session
// expired, Consul unreachable) ends leadership at once: lead's context is
// canceled and lead is waited for before contending again.
//
// The agent comes from c.cfg.Consul.Address, else CONSUL_HTTP_ADDR; the
// token from CONSUL_HTTP_TOKEN (never logged); TLS from CONSUL_CACERT and
// the other variables the consul CLI reads.
func (c *Controller) electConsul(ctx context.Context, lead func(context.Context) error) error {
	client, addr, err := c.consulClient(ctx)
	if err != nil {
		return err
	}
	key := c.cfg.Consul.LockKey
	if key == "" {
		key = LeaderLockPath
	}
	// The API sends no lock delay when it is 0, and Consul then applies
	// its default of 15s: 1ms is the closest to none it can express.
	delay := c.cfg.LockDelay
	if delay <= 0 {
		delay = time.Millisecond
	}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		lock, err := client.LockOpts(&consul.LockOptions{
			Key:         key,
			Value:       []byte(c.cfg.Identity),
			SessionName: consulSessionName,
			SessionTTL:  c.cfg.LockTTL.String(),
			LockDelay:   delay,
		})
		if err != nil {
			return fmt.Errorf("consul lock %s: %w", key, err)
		}
		c.log.Info("waiting to lead", "lock", key, "consul", addr, "identity", c.cfg.Identity)
		lost, err := lock.Lock(ctx.Done())
		if ctx.Err() != nil {
			if lost != nil {
				c.unlockConsul(lock, key)
			}
			return nil
		}
		if err != nil {
			wait := backoff(attempt, c.cfg.MaxBackoff)
			c.log.Warn("leader election", "error", consulNeeds(err, key), "retry_in", wait)
			sleepCtx(ctx, wait)
			continue
		}
		if lost == nil { // Lock gave up without an error: only when stopped
			continue
		}

		err = c.leadWhileHeld(ctx, lost, lead)
		c.unlockConsul(lock, key)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.log.Warn("leader election", "error", err)
		}
		// A term ended: start the backoff over, and let a moment pass
		// before contending again.
		attempt = -1
		sleepCtx(ctx, backoff(0, c.cfg.MaxBackoff))
	}
	return nil
}

// leadWhileHeld runs lead until it returns, ctx ends or lost closes (the
// lock is no longer ours), and waits for lead to return.
func (c *Controller) leadWhileHeld(ctx context.Context, lost <-chan struct{}, lead func(context.Context) error) error {
	c.log.Info("leading: this controller acts", "identity", c.cfg.Identity)
	defer c.log.Info("no longer leading", "identity", c.cfg.Identity)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- lead(lctx) }()
	select {
	case err := <-done:
		return err
	case <-lost:
		if ctx.Err() == nil {
			c.log.Warn("lost the Consul lock: stopping", "identity", c.cfg.Identity)
		}
		stop()
		return <-done
	}
}

// unlockConsul releases the lock (and so ends its session), so that
// another controller can lead at once rather than after the TTL.
func (c *Controller) unlockConsul(lock *consul.Lock, key string) {
	if err := lock.Unlock(); err != nil && !errors.Is(err, consul.ErrLockNotHeld) {
		c.log.Warn("release the Consul lock", "lock", key, "error", err)
	}
}

// consulClient is a Consul API client configured as the consul CLI is,
// with c.cfg.Consul.Address over CONSUL_HTTP_ADDR. Its blocking queries
// end when ctx does, so a controller waiting for the lock stops at once.
// It returns the address too, for logs (the token is never logged).
func (c *Controller) consulClient(ctx context.Context) (*consul.Client, string, error) {
	cfg := consul.DefaultConfig()
	if c.cfg.Consul.Address != "" {
		cfg.Address = c.cfg.Consul.Address
	}
	hc, err := consul.NewHttpClient(cfg.Transport, cfg.TLSConfig)
	if err != nil {
		return nil, "", fmt.Errorf("consul client: %w", err)
	}
	hc.Transport = &waitCanceler{base: hc.Transport, ctx: ctx}
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

// waitCanceler ends blocking queries (GET with an index) when ctx ends.
// The Consul API gives Lock no context, and its wait on a held lock would
// otherwise hold up shutdown for up to LockWaitTime. Writes, among them
// the release of the lock on shutdown, are left alone.
type waitCanceler struct {
	base http.RoundTripper
	ctx  context.Context
}

func (t *waitCanceler) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet || !r.URL.Query().Has("index") {
		return t.base.RoundTrip(r)
	}
	ctx, cancel := context.WithCancel(r.Context())
	stopAfter := context.AfterFunc(t.ctx, cancel)
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
