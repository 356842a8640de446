package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	ibackoff "github.com/gpu-steward/steward/internal/backoff"
)

// The notifier sends webhook messages (the policy's notify blocks) beside
// the control rounds, never in them: a round hands a message over with a
// non-blocking send on a bounded queue, and workers deliver it, retrying
// with exponential backoff and jitter on timers, so that one slow or dead
// receiver holds up neither a round nor the other messages. What is to be
// sent lives in the job's state (JobState.Outbox, outbox.go) from the
// decision on: the queue only carries it, and a message the queue could
// not take is queued again by a later round.

// noticeKey names one message: a decision, to one notify block.
type noticeKey struct {
	job jobKey
	id  string // the decision's ID
	to  string // the notify block's name
}

// delivery is a message on its way.
type delivery struct {
	key      noticeKey
	url      string
	headers  map[string]string
	body     []byte
	timeout  time.Duration
	attempts int // the most to make
	attempt  int // made so far
}

// notifier delivers messages. Its workers run while this controller leads
// (run); finished says which messages are done with, for the control loop
// to mark in the job states.
type notifier struct {
	log     hclog.Logger
	client  *http.Client
	queue   chan *delivery
	workers int
	// base and max bound the waits between attempts (backoffDelay).
	base, max time.Duration
	// leading reports whether this controller may act: a message goes out
	// only while it leads.
	leading func() bool
	// delivered is called after each message is done with (the control
	// loop marks it soon rather than at its next round).
	delivered func()
	metrics   *notifyMetrics

	mu       sync.Mutex
	rnd      *rand.Rand
	inflight map[noticeKey]bool // queued, being sent, or waiting to retry
	finished map[noticeKey]bool // sent or given up: to be removed from the outbox
	term     context.Context    // the current lead term; nil between terms
	timers   map[*time.Timer]bool
}

// Default queue and worker counts, and the waits between attempts.
const (
	notifyQueue   = 256
	notifyWorkers = 4
	notifyBase    = time.Second
	notifyMax     = 5 * time.Minute
)

func newNotifier(log hclog.Logger, leading func() bool, m *notifyMetrics) *notifier {
	return &notifier{
		log:     log,
		client:  &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		queue:   make(chan *delivery, notifyQueue),
		workers: notifyWorkers, base: notifyBase, max: notifyMax,
		leading: leading, delivered: func() {}, metrics: m,
		rnd:      rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5ee)),
		inflight: map[noticeKey]bool{}, finished: map[noticeKey]bool{},
		timers: map[*time.Timer]bool{},
	}
}

// run starts the workers for one lead term and returns a function that
// ends it: no new attempt starts after, attempts under way get up to wait
// to finish (so that what a receiver took is marked sent), and everything
// not done stays in the outbox for the next leader.
func (n *notifier) run(ctx context.Context) (stop func(wait time.Duration)) {
	term, cancel := context.WithCancel(ctx)
	n.mu.Lock()
	n.term = term
	n.mu.Unlock()
	var wg sync.WaitGroup
	for range n.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.work(term)
		}()
	}
	return func(wait time.Duration) {
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(wait):
			n.log.Warn("webhook messages still being sent at shutdown; a new leader sends them again (same Idempotency-Key)")
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		n.term = nil
		for t := range n.timers {
			t.Stop()
		}
		n.timers = map[*time.Timer]bool{}
		n.inflight = map[noticeKey]bool{}
		for len(n.queue) > 0 {
			<-n.queue // left in the outbox, for the next term or leader
		}
	}
}

// enqueue hands a message over without blocking, and reports whether it
// was taken. A message already on its way is not queued twice; a full
// queue drops it (logged, counted): it stays in the outbox, and a later
// round queues it again.
func (n *notifier) enqueue(d *delivery) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.term == nil || n.inflight[d.key] || n.finished[d.key] {
		return false
	}
	select {
	case n.queue <- d:
		n.inflight[d.key] = true
		return true
	default:
		n.metrics.dropped.Inc()
		n.log.Warn("webhook queue full: message left for a later round", "notify", d.key.to, "job", d.key.job, "decision", d.key.id)
		return false
	}
}

// busy reports whether a message is queued, being sent or waiting to be
// retried.
func (n *notifier) busy(k noticeKey) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inflight[k]
}

// takeFinished returns the messages sent or given up since the last call.
func (n *notifier) takeFinished() map[noticeKey]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := n.finished
	n.finished = map[noticeKey]bool{}
	return out
}

func (n *notifier) work(term context.Context) {
	for {
		select {
		case <-term.Done():
			return
		case d := <-n.queue:
			n.attempt(term, d)
		}
	}
}

// errPermanent marks an answer that another attempt would not change.
var errPermanent = errors.New("not retried")

// attempt makes one attempt at d and, when it fails for a reason that may
// pass, schedules the next.
func (n *notifier) attempt(term context.Context, d *delivery) {
	if !n.leading() {
		n.forget(d.key) // the next leader sends it
		return
	}
	d.attempt++
	err := n.post(d)
	switch {
	case err == nil:
		n.metrics.sent.WithLabelValues(d.key.to).Inc()
		n.log.Info("webhook message sent", "notify", d.key.to, "job", d.key.job, "decision", d.key.id, "attempt", d.attempt)
		n.finish(d.key)
	case errors.Is(err, errPermanent) || d.attempt >= d.attempts:
		n.metrics.failed.WithLabelValues(d.key.to).Inc()
		n.log.Error("webhook message given up", "notify", d.key.to, "job", d.key.job, "decision", d.key.id,
			"attempts", d.attempt, "error", err)
		n.finish(d.key)
	default:
		wait := n.backoff(d.attempt)
		n.metrics.retries.WithLabelValues(d.key.to).Inc()
		n.log.Warn("webhook message failed; retrying", "notify", d.key.to, "job", d.key.job, "decision", d.key.id,
			"attempt", d.attempt, "retry_in", wait, "error", err)
		n.retryAfter(term, d, wait)
	}
}

// retryAfter queues d again after wait, on a timer: no worker sleeps.
func (n *notifier) retryAfter(term context.Context, d *delivery, wait time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if term.Err() != nil {
		delete(n.inflight, d.key)
		return
	}
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.timers, t)
		if term.Err() != nil || n.term != term {
			delete(n.inflight, d.key)
			return
		}
		select {
		case n.queue <- d:
		default:
			// Left for a later round to queue again.
			n.metrics.dropped.Inc()
			n.log.Warn("webhook queue full: retry left for a later round", "notify", d.key.to, "decision", d.key.id)
			delete(n.inflight, d.key)
		}
	})
	n.timers[t] = true
}

func (n *notifier) finish(k noticeKey) {
	n.mu.Lock()
	delete(n.inflight, k)
	n.finished[k] = true
	n.mu.Unlock()
	n.delivered()
}

func (n *notifier) forget(k noticeKey) {
	n.mu.Lock()
	delete(n.inflight, k)
	n.mu.Unlock()
}

// post makes one attempt: a 2xx answer delivers the message; 408, 429,
// 5xx and failures to connect or answer are worth another attempt; any
// other answer (a redirect too: Steward sends nowhere the policy does not
// name) is not.
func (n *notifier) post(d *delivery) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		return fmt.Errorf("%w: %v", errPermanent, err)
	}
	for h, v := range d.headers {
		req.Header.Set(h, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "steward")
	req.Header.Set("Idempotency-Key", d.key.id)
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("post to notify %s: %w", d.key.to, redactURLError(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return fmt.Errorf("notify %s answered %s", d.key.to, resp.Status)
	default:
		return fmt.Errorf("notify %s answered %s: %w", d.key.to, resp.Status, errPermanent)
	}
}

// redactURLError keeps a webhook's URL, which may be a secret (url_env),
// out of logs: the client's error names it, the error inside does not.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

// backoff is the wait after the attempt-th failed attempt: base doubled
// per attempt, at most max, drawn between half of that and all of it so
// that messages failing together spread out.
func (n *notifier) backoff(attempt int) time.Duration {
	n.mu.Lock()
	f := n.rnd.Float64()
	n.mu.Unlock()
	return backoffDelay(attempt, n.base, n.max, f)
}

// backoffDelay is the wait after the attempt-th failure (1 for the first)
// given a draw f in [0, 1): within [d/2, d] for d = min(base·2^(attempt-1),
// max).
func backoffDelay(attempt int, base, max time.Duration, f float64) time.Duration {
	return ibackoff.Jitter(ibackoff.Exponential(base, max, attempt-1), f)
}

// notifyMetrics count what became of messages.
type notifyMetrics struct {
	sent, failed, retries *prometheus.CounterVec
	dropped               prometheus.Counter
}

func newNotifyMetrics() *notifyMetrics {
	return &notifyMetrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_notifications_sent_total",
			Help: "Webhook messages a receiver took (2xx), by notify block."}, []string{"notify"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_notifications_failed_total",
			Help: "Webhook messages given up (attempts used, or an answer not worth retrying), by notify block."}, []string{"notify"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_notification_retries_total",
			Help: "Failed webhook attempts that were retried, by notify block."}, []string{"notify"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_notifications_dropped_total",
			Help: "Webhook messages the full queue could not take (each stays in the outbox for a later round)."}),
	}
}

func (m *notifyMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.sent, m.failed, m.retries, m.dropped}
}
