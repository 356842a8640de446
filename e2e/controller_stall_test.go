package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestLeaderWithHungNomadCallStepsDown: the leader reaches Nomad through a
// proxy that starts to stall every request but its leader lock's (a server
// that accepts and never answers; the lock's renewals still succeed). Each
// of its calls ends by its deadline (-nomad-timeout), no round finishes,
// and within -round-timeout it steps down and releases the lock: the other
// copy takes over and preempts for the waiting notebook. Before, the
// leader's first hung call froze its rounds for ever while its lease loop
// renewed the lock: no enforcement, and no failover.
func TestLeaderWithHungNomadCallStepsDown(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{}, "ml")
	p := newStallProxyTLS(t, c.Address, "/v1/var/steward/leader", c.TLS)
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	a := c.startControllerAt("a", policy, p.URL(), "-nomad-timeout", "3s", "-round-timeout", "15s")
	testnomad.WaitFor(t, 30*time.Second, "controller a leads", func() (bool, string) { return a.Contains("leading: this controller acts"), "" })
	b := c.startController("b", policy, "-nomad-timeout", "3s", "-round-timeout", "15s")
	testnomad.WaitFor(t, 30*time.Second, "controller b waits", func() (bool, string) { return b.Contains("waiting to lead"), "" })

	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	time.Sleep(3 * time.Second) // a's rounds see train
	p.Stall()
	stalled := time.Now()
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")

	testnomad.WaitFor(t, 60*time.Second, "a steps down", func() (bool, string) {
		return a.Contains("no round finished within the round timeout"), tail(a.Log(), 5)
	})
	testnomad.WaitFor(t, 30*time.Second, "b takes over", func() (bool, string) {
		return b.Contains("leading: this controller acts"), tail(b.Log(), 5)
	})
	c.waitRunning(90*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	t.Logf("the notebook runs %s after the leader's calls began to hang (round timeout 15s, nomad timeout 3s)",
		time.Since(stalled).Round(time.Second))
	if !b.Contains("preempt: job=ml/train") {
		t.Errorf("b did not preempt train:\n%s", tail(b.Log(), 20))
	}
	for _, act := range []string{"preempt: job=ml/train", "checkpoint signal sent"} {
		if a.Contains(act) {
			t.Errorf("a acted (%q) although its calls hung", act)
		}
	}
}

// stallProxy forwards HTTP to an agent (Nomad's, Consul's); once stalled,
// every request except those under a path prefix waits until its client
// gives up.
type stallProxy struct {
	srv     *http.Server
	url     string
	mu      sync.Mutex
	stalled bool
	closed  chan struct{}
}

func newStallProxy(t testing.TB, addr, except string) *stallProxy {
	return newStallProxyTLS(t, addr, except, nil)
}

// newStallProxyTLS is a stall proxy in front of an agent that speaks mTLS
// (a production-shaped cluster's, certs): it serves HTTPS with the
// agent's own certificate and requires a client certificate of the
// cluster's CA, as the agent does, and forwards over mTLS with the CLI
// certificate. It must see each request's path to stall all but some, so
// it ends TLS and makes its own, as a TLS-terminating load balancer would.
// certs nil: plain HTTP on both sides.
func newStallProxyTLS(t testing.TB, addr, except string, certs *testnomad.TLS) *stallProxy {
	target, err := url.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // the event stream, as it comes
	var serverTLS *tls.Config
	if certs != nil {
		pool := x509.NewCertPool()
		ca, err := os.ReadFile(certs.CA)
		if err != nil || !pool.AppendCertsFromPEM(ca) {
			t.Fatalf("stall proxy: the cluster's CA %s: %v", certs.CA, err)
		}
		cli, err := tls.LoadX509KeyPair(certs.CLICert, certs.CLIKey)
		if err != nil {
			t.Fatalf("stall proxy: the CLI certificate: %v", err)
		}
		agent, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
		if err != nil {
			t.Fatalf("stall proxy: the agent's certificate: %v", err)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cli}}
		rp.Transport = tr
		serverTLS = &tls.Config{Certificates: []tls.Certificate{agent}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	}
	p := &stallProxy{closed: make(chan struct{})}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		excepted := except != "" && strings.HasPrefix(r.URL.Path, except)
		if !excepted && p.wait(r) {
			return
		}
		if !excepted {
			// A request in flight when the stall begins gets no answer
			// either (a blocking query, the event stream).
			w = &stallWriter{ResponseWriter: w, p: p, r: r}
		}
		rp.ServeHTTP(w, r)
	})}
	ln := listenLoopback(t)
	p.url = "http://" + ln.Addr().String()
	if serverTLS != nil {
		ln = tls.NewListener(ln, serverTLS)
		p.url = "https://" + strings.TrimPrefix(p.url, "http://")
	}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { close(p.closed); _ = p.srv.Close() })
	return p
}

func (p *stallProxy) URL() string { return p.url }

// wait holds a request while the proxy stalls, and reports whether its
// client gave up meanwhile.
func (p *stallProxy) wait(r *http.Request) bool {
	p.mu.Lock()
	stalled := p.stalled
	p.mu.Unlock()
	if !stalled {
		return false
	}
	select {
	case <-r.Context().Done():
	case <-p.closed:
	}
	return true
}

// stallWriter holds a response while the proxy stalls, as a network that
// drops packets does.
type stallWriter struct {
	http.ResponseWriter
	p *stallProxy
	r *http.Request
}

func (s *stallWriter) WriteHeader(code int) {
	if s.p.wait(s.r) {
		return
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *stallWriter) Write(b []byte) (int, error) {
	if s.p.wait(s.r) {
		return 0, http.ErrAbortHandler
	}
	return s.ResponseWriter.Write(b)
}

func (s *stallWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Stall makes every request but the excepted ones hang, those in flight
// included.
func (p *stallProxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
