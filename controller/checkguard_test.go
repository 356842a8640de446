package controller

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// guardFor is a check guard with small bounds, in front of next.
func guardFor(rate float64, burst, slots int, maxBody int64, next http.Handler) (*checkGuard, http.Handler) {
	g := newCheckGuard(Config{CheckRate: rate, CheckBurst: burst, CheckConcurrency: slots, CheckMaxBody: maxBody})
	g.wait = 50 * time.Millisecond
	return g, g.wrap(next)
}

func post(h http.Handler, token, body string, chunked bool) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/job/check", strings.NewReader(body))
	if chunked {
		req.ContentLength = -1
	}
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

// TestJobCheckFloodFromOneTokenIsRateLimited: a token that floods checks
// gets its burst, then 429 with Retry-After and the numbers, while the
// flood goes on; another token is still served at once.
func TestJobCheckFloodFromOneTokenIsRateLimited(t *testing.T) {
	_, h := guardFor(1, 3, 4, 1<<20, okHandler)
	codes := map[int]int{}
	var last *httptest.ResponseRecorder
	for range 50 {
		last = post(h, "flooder", "{}", false)
		codes[last.Code]++
	}
	if codes[http.StatusOK] != 3 || codes[http.StatusTooManyRequests] != 47 {
		t.Fatalf("flood of 50 with burst 3: %v, want 3 OK and 47 refused", codes)
	}
	if last.Header().Get("Retry-After") == "" || !strings.Contains(last.Body.String(), "1 a second, bursts of 3") {
		t.Errorf("a refused check says neither when to retry nor the bound: %v %s", last.Header(), last.Body)
	}
	for _, who := range []string{"other", ""} {
		if rec := post(h, who, "{}", false); rec.Code != http.StatusOK {
			t.Errorf("token %q during another's flood: %d %s", who, rec.Code, rec.Body)
		}
	}
}

// TestJobCheckConcurrencyBounded: with every slot held by slow checks, a
// further check waits briefly and gets 503 naming the limit; the slots
// held never exceed the limit, and checks are served again once they
// free.
func TestJobCheckConcurrencyBounded(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		mu.Unlock()
	})
	_, h := guardFor(1000, 1000, 2, 1<<20, slow)
	var wg sync.WaitGroup
	results := make(chan int, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- post(h, fmt.Sprintf("flooder-%d", i), "{}", false).Code
		}()
	}
	busy := 0
	deadline := time.After(5 * time.Second)
	for busy < 18 {
		select {
		case code := <-results:
			if code != http.StatusServiceUnavailable {
				t.Fatalf("a check beyond the limit got %d, want 503", code)
			}
			busy++
		case <-deadline:
			t.Fatalf("only %d of 18 checks beyond the limit were turned away", busy)
		}
	}
	rec := post(h, "late", "{}", false)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "2 checks in flight") {
		t.Errorf("while busy: %d %s, want 503 naming the limit", rec.Code, rec.Body)
	}
	close(release)
	wg.Wait()
	if most != 2 {
		t.Errorf("%d checks ran at once, limit 2", most)
	}
	_, h2 := guardFor(1000, 1000, 2, 1<<20, okHandler)
	if rec := post(h2, "late", "{}", false); rec.Code != http.StatusOK {
		t.Errorf("once free: %d", rec.Code)
	}
}

// TestJobCheckBodyBounded: a body over the limit is refused with 413 and
// the numbers, whether it declares its length or not; one within is read.
func TestJobCheckBodyBounded(t *testing.T) {
	c := &Controller{}
	c.web = newEndpoints(c)
	_, h := guardFor(1000, 1000, 4, 1024, http.HandlerFunc(c.web.serveCheck))
	big := `{"Job":{"ID":"` + strings.Repeat("x", 4096) + `"}}`
	cases := []struct {
		name     string
		body     string
		chunked  bool
		wantCode int
		want     string
	}{
		{name: "declared length over the limit", body: big, wantCode: http.StatusRequestEntityTooLarge, want: "more than the 1024 a check takes"},
		{name: "chunked body over the limit", body: big, chunked: true, wantCode: http.StatusRequestEntityTooLarge, want: "larger than the 1024 bytes"},
		{name: "small body is read", body: `{"Job":null}`, wantCode: http.StatusBadRequest, want: "carries no job"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := post(h, "tok", tc.body, tc.chunked)
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("%d %s, want %d %q", rec.Code, rec.Body, tc.wantCode, tc.want)
			}
		})
	}
}

// TestJobCheckMadeUpTokensBounded: a flood of distinct made-up tokens
// keeps at most the bound of limiters, and holds no token in clear.
func TestJobCheckMadeUpTokensBounded(t *testing.T) {
	g, h := guardFor(1, 1, 4, 1<<20, okHandler)
	g.maxKeep = 10
	for i := range 100 {
		post(h, fmt.Sprintf("made-up-%d", i), "{}", false)
	}
	if len(g.tokens) > 10 {
		t.Errorf("%d limiters kept, bound 10", len(g.tokens))
	}
}

// TestValidateCheckListener: checks carry callers' tokens, so a listener
// that serves them off loopback needs TLS; loopback and TLS are accepted.
func TestValidateCheckListener(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{name: "default loopback", edit: func(*Config) {}},
		{name: "host IP without TLS refused", edit: func(c *Config) { c.Listen = "10.1.2.3:9646" },
			wantErr: "-listen 10.1.2.3:9646 serves /v1/job/check off loopback without TLS"},
		{name: "every interface without TLS refused", edit: func(c *Config) { c.Listen = ":9646" }, wantErr: "without TLS"},
		{name: "check listener off loopback without TLS refused", edit: func(c *Config) { c.CheckListen = "10.1.2.3:0" },
			wantErr: "-check-listen 10.1.2.3:0"},
		{name: "metrics off loopback, checks on loopback", edit: func(c *Config) { c.Listen, c.CheckListen = "10.1.2.3:9646", "127.0.0.1:0" }},
		{name: "checks off loopback with TLS", edit: func(c *Config) { c.CheckListen, c.TLSCert, c.TLSKey = "10.1.2.3:0", "c.pem", "k.pem" }},
		{name: "cert without key refused", edit: func(c *Config) { c.TLSCert = "c.pem" }, wantErr: "go together"},
		{name: "localhost", edit: func(c *Config) { c.Listen = "localhost:9646" }},
		{name: "IPv6 loopback", edit: func(c *Config) { c.Listen = "[::1]:9646" }},
		{name: "advertised cleartext off loopback refused", edit: func(c *Config) { c.Advertise = "http://ctl.example:9646" },
			wantErr: "advertise an https URL"},
		{name: "advertised https", edit: func(c *Config) { c.Advertise = "https://ctl.example:9646" }},
		{name: "zero concurrency refused", edit: func(c *Config) { c.CheckConcurrency = 0 }, wantErr: "at least 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.PolicyFiles = []string{"p.hcl"}
			tc.edit(&cfg)
			err := cfg.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
