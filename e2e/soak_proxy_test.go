//go:build soak

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// soakProxy stands between one controller and the Nomad server. It ends
// TLS with the cluster's own server certificate (the test owns the CA, so
// the controller verifies it as it would the server) and speaks mTLS with
// the CLI certificate upstream. Seeing HTTP rather than TLS bytes is what
// lets it do the two things the soak needs of it:
//
//   - cut the controller's event stream alone (the request to
//     /v1/event/stream in flight is ended, and new ones are refused for a
//     while), leaving its other calls alone, as a load balancer that drops
//     long-lived connections would;
//   - journal every write Nomad accepted from that controller, with the
//     time it was sent and answered: the wire-level evidence for "two
//     controllers acting at once" (soakJournal.dualActs).
type soakProxy struct {
	name    string
	url     string
	srv     *http.Server
	journal *soakJournal

	mu       sync.Mutex
	cutUntil time.Time
	streams  map[int]context.CancelFunc
	next     int
}

func newSoakProxy(t testing.TB, name, target string, certs *testnomad.TLS, j *soakJournal) *soakProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cli, err := tls.LoadX509KeyPair(certs.CLICert, certs.CLIKey)
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // the event stream, as it comes
	rp.Transport = &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cli}},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	// A cut stream or a restarting server: the controller sees a 502, as
	// it would from a load balancer.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p := &soakProxy{name: name, journal: j, streams: map[int]context.CancelFunc{}}
	p.srv = &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(rp, w, r) }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{srvCert}},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	ln := listenLoopback(t)
	p.url = "https://" + ln.Addr().String()
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

func (p *soakProxy) serve(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/event/stream" {
		p.mu.Lock()
		if time.Now().Before(p.cutUntil) {
			p.mu.Unlock()
			http.Error(w, "soak: event stream cut", http.StatusBadGateway)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		id := p.next
		p.next++
		p.streams[id] = cancel
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.streams, id)
			p.mu.Unlock()
			cancel()
		}()
		rp.ServeHTTP(w, r.WithContext(ctx))
		return
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		rp.ServeHTTP(w, r)
		return
	}
	sent := time.Now()
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	rp.ServeHTTP(sw, r)
	if sw.code/100 == 2 {
		p.journal.add(soakWrite{ctl: p.name, sent: sent, answered: time.Now(), method: r.Method, path: r.URL.Path, query: r.URL.RawQuery})
	}
}

// CutStream ends the event stream the controller has open and refuses
// new ones for d.
func (p *soakProxy) CutStream(d time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutUntil = time.Now().Add(d)
	n := len(p.streams)
	for _, cancel := range p.streams {
		cancel()
	}
	return n
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// soakWrite is one write Nomad accepted (2xx) from a controller.
type soakWrite struct {
	ctl            string
	sent, answered time.Time
	method, path   string
	query          string
}

// lockOp is the leader-lock operation the write is ("" for none).
func (w soakWrite) lockOp() string {
	if !strings.HasSuffix(w.path, "/var/steward/leader") {
		return ""
	}
	for _, op := range []string{"lock-acquire", "lock-renew", "lock-release"} {
		if strings.Contains(w.query, op) {
			return op
		}
	}
	return ""
}

// soakJournal is every controller's accepted writes, in one place.
type soakJournal struct {
	mu     sync.Mutex
	writes []soakWrite
}

func (j *soakJournal) add(w soakWrite) {
	j.mu.Lock()
	j.writes = append(j.writes, w)
	j.mu.Unlock()
}

// leader is the controller whose lock acquisition Nomad accepted last, and
// when ("" if none yet).
func (j *soakJournal) leader() (string, time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var who string
	var at time.Time
	for _, w := range j.writes {
		if w.lockOp() == "lock-acquire" && w.answered.After(at) {
			who, at = w.ctl, w.answered
		}
	}
	return who, at
}

// dualActs are the writes (other than the leader lock's own calls) that a
// controller sent after Nomad had granted the lock to the other one, and
// before it was granted the lock again itself: a write by a controller that
// no longer led, which Nomad accepted. The times are the proxy's, on one
// clock; only a write sent after the other's acquisition was answered
// counts, so a write in flight across a takeover is not one.
func (j *soakJournal) dualActs() []soakWrite {
	j.mu.Lock()
	writes := append([]soakWrite(nil), j.writes...)
	j.mu.Unlock()
	var acquires []soakWrite
	for _, w := range writes {
		if w.lockOp() == "lock-acquire" {
			acquires = append(acquires, w)
		}
	}
	sort.Slice(acquires, func(a, b int) bool { return acquires[a].answered.Before(acquires[b].answered) })
	var bad []soakWrite
	for _, w := range writes {
		if w.lockOp() != "" {
			continue
		}
		// The holder when w was sent: the last acquisition answered before.
		holder := ""
		for _, a := range acquires {
			if !a.answered.Before(w.sent) {
				break
			}
			holder = a.ctl
		}
		if holder != w.ctl {
			bad = append(bad, w)
		}
	}
	return bad
}

// count is how many writes the journal holds, lock calls included.
func (j *soakJournal) count() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.writes)
}
