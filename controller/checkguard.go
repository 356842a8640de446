package controller

import (
	"crypto/sha256"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Anyone who holds a Nomad token can ask for a check, and each one plans
// the whole cluster (a copy of the snapshot, the engine) and asks Nomad
// for a plan: unbounded, a flood of checks starves the leader's rounds.
// checkGuard bounds them three ways before any work is done: a body
// larger than CheckMaxBody is refused (413), each token gets CheckRate
// checks a second with bursts of CheckBurst (429 with Retry-After beyond
// that), and at most CheckConcurrency checks run at once; a check that
// finds them all busy waits checkQueueWait for a slot, then gets 503. A
// flood from one token thus costs others at most a short wait.

// checkQueueWait is how long a check waits for a free slot.
const checkQueueWait = 2 * time.Second

// checkMaxTokens bounds the limiters kept (one per token seen): beyond it
// the least recently used is forgotten, so made-up tokens cannot grow the
// map without end (each still meets the concurrency bound).
const checkMaxTokens = 4096

type checkGuard struct {
	maxBody int64
	slots   chan struct{}
	limit   rate.Limit
	burst   int
	wait    time.Duration
	now     func() time.Time

	mu      sync.Mutex
	tokens  map[[32]byte]*tokenLimiter
	maxKeep int
}

type tokenLimiter struct {
	lim  *rate.Limiter
	seen time.Time
}

func newCheckGuard(cfg Config) *checkGuard {
	// A Config not made by DefaultConfig (tests) gets the defaults.
	d := DefaultConfig()
	if cfg.CheckMaxBody <= 0 {
		cfg.CheckMaxBody = d.CheckMaxBody
	}
	if cfg.CheckConcurrency <= 0 {
		cfg.CheckConcurrency = d.CheckConcurrency
	}
	if cfg.CheckRate <= 0 {
		cfg.CheckRate = d.CheckRate
	}
	if cfg.CheckBurst <= 0 {
		cfg.CheckBurst = d.CheckBurst
	}
	return &checkGuard{maxBody: cfg.CheckMaxBody, slots: make(chan struct{}, cfg.CheckConcurrency),
		limit: rate.Limit(cfg.CheckRate), burst: cfg.CheckBurst, wait: checkQueueWait, now: time.Now,
		tokens: map[[32]byte]*tokenLimiter{}, maxKeep: checkMaxTokens}
}

// allow takes one check from the token's bucket, or says how long until
// the next one is due. Tokens are kept hashed: the guard never holds a
// caller's secret.
func (g *checkGuard) allow(token string) (bool, time.Duration) {
	key := sha256.Sum256([]byte(token))
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	tl := g.tokens[key]
	if tl == nil {
		if len(g.tokens) >= g.maxKeep {
			g.forgetOldest()
		}
		tl = &tokenLimiter{lim: rate.NewLimiter(g.limit, g.burst)}
		g.tokens[key] = tl
	}
	tl.seen = now
	r := tl.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Minute
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// forgetOldest drops the least recently used limiter (g.mu held). It
// scans: it runs only when checkMaxTokens distinct tokens were seen.
func (g *checkGuard) forgetOldest() {
	var oldest [32]byte
	first := true
	var at time.Time
	for k, tl := range g.tokens {
		if first || tl.seen.Before(at) {
			oldest, at, first = k, tl.seen, false
		}
	}
	delete(g.tokens, oldest)
}

// wrap bounds next (the check handler).
func (g *checkGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > g.maxBody {
			writeJSONError(w, http.StatusRequestEntityTooLarge,
				fmt.Errorf("the check request has %d bytes, more than the %d a check takes", r.ContentLength, g.maxBody))
			return
		}
		if ok, d := g.allow(r.Header.Get("X-Nomad-Token")); !ok {
			secs := int(math.Ceil(d.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeJSONError(w, http.StatusTooManyRequests,
				fmt.Errorf("too many checks with this token: %g a second, bursts of %d; try again in %ds", float64(g.limit), g.burst, secs))
			return
		}
		t := time.NewTimer(g.wait)
		defer t.Stop()
		select {
		case g.slots <- struct{}{}:
		case <-t.C:
			writeJSONError(w, http.StatusServiceUnavailable,
				fmt.Errorf("the controller is busy: %d checks in flight (its limit) for %s; try again", cap(g.slots), g.wait))
			return
		case <-r.Context().Done():
			return
		}
		defer func() { <-g.slots }()
		// A body without Content-Length is cut at the limit too.
		r.Body = http.MaxBytesReader(w, r.Body, g.maxBody)
		next.ServeHTTP(w, r)
	})
}
