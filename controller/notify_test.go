package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpu-steward/steward/policy"
)

// receiver is a webhook on loopback: it answers each request with the
// next status of its script (the last one from then on) and keeps what
// it got.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	script []int
	got    []*http.Request
	bodies [][]byte
	status []int // the answer to each request
	// hang: requests wait until the test ends.
	hang chan struct{}
}

func newReceiver(t *testing.T, script ...int) *receiver {
	rc := &receiver{t: t, script: script}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, req)
		rc.bodies = append(rc.bodies, body)
		status := http.StatusOK
		if len(rc.script) > 0 {
			status = rc.script[0]
			if len(rc.script) > 1 {
				rc.script = rc.script[1:]
			}
		}
		rc.status = append(rc.status, status)
		hang := rc.hang
		rc.mu.Unlock()
		if hang != nil {
			<-hang
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(func() {
		rc.mu.Lock()
		if rc.hang != nil {
			close(rc.hang)
			rc.hang = nil
		}
		rc.mu.Unlock()
		rc.srv.Close()
	})
	return rc
}

func (rc *receiver) requests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

// setScript replaces the answers to come.
func (rc *receiver) setScript(script ...int) {
	rc.mu.Lock()
	rc.script = script
	rc.mu.Unlock()
}

// testNotifier is a notifier with waits of a few milliseconds, whose
// finished messages are signalled on done.
func testNotifier(t *testing.T) (*notifier, chan noticeKey) {
	n := newNotifier(hclog.NewNullLogger(), func() bool { return true }, newNotifyMetrics())
	n.base, n.max = time.Millisecond, 8*time.Millisecond
	done := make(chan noticeKey, 100)
	n.delivered = func() {
		for k := range n.takeFinished() {
			done <- k
		}
	}
	stop := n.run(context.Background())
	t.Cleanup(func() { stop(time.Second) })
	return n, done
}

// waitFor returns the next finished message, or fails the test after a
// long while (a hang, not a slow run).
func waitFor(t *testing.T, done chan noticeKey) noticeKey {
	t.Helper()
	select {
	case k := <-done:
		return k
	case <-time.After(30 * time.Second):
		t.Fatal("no message finished")
		return noticeKey{}
	}
}

func testDelivery(url, id string, attempts int) *delivery {
	return &delivery{key: noticeKey{job: jobKey{"ml", "train"}, id: id, to: "ops"}, url: url,
		headers: map[string]string{"Authorization": "Bearer s3cret"}, body: []byte(`{"id":"` + id + `"}`),
		timeout: 5 * time.Second, attempts: attempts}
}

func TestNotifierDelivery(t *testing.T) {
	tests := []struct {
		name     string
		script   []int
		attempts int
		want     int // requests the receiver gets
		sent     bool
	}{
		{"first attempt", []int{200}, 8, 1, true},
		{"retried after two failures", []int{503, 500, 204}, 8, 3, true},
		{"429 and 408 are retried", []int{429, 408, 200}, 8, 3, true},
		{"given up after its attempts", []int{503}, 3, 3, false},
		{"a 4xx is not retried", []int{400}, 8, 1, false},
		{"a redirect is not followed", []int{302}, 8, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, tt.script...)
			n, done := testNotifier(t)
			if !n.enqueue(testDelivery(rc.srv.URL, "d-1", tt.attempts)) {
				t.Fatal("enqueue refused")
			}
			if k := waitFor(t, done); k.id != "d-1" {
				t.Fatalf("finished %v", k)
			}
			if got := rc.requests(); got != tt.want {
				t.Errorf("receiver got %d requests, want %d", got, tt.want)
			}
			sent := testutil.ToFloat64(n.metrics.sent.WithLabelValues("ops"))
			failed := testutil.ToFloat64(n.metrics.failed.WithLabelValues("ops"))
			if tt.sent && (sent != 1 || failed != 0) || !tt.sent && (sent != 0 || failed != 1) {
				t.Errorf("sent %v failed %v, want sent=%v", sent, failed, tt.sent)
			}
			if r := testutil.ToFloat64(n.metrics.retries.WithLabelValues("ops")); int(r) != tt.want-1 {
				t.Errorf("retries %v, want %d", r, tt.want-1)
			}
			for _, req := range rc.got {
				if req.Header.Get("Idempotency-Key") != "d-1" || req.Header.Get("Authorization") != "Bearer s3cret" ||
					req.Header.Get("Content-Type") != "application/json" || req.Method != http.MethodPost {
					t.Errorf("request %s %v", req.Method, req.Header)
				}
			}
			if n.busy(noticeKey{job: jobKey{"ml", "train"}, id: "d-1", to: "ops"}) {
				t.Error("a finished message is still on its way")
			}
		})
	}
}

// Each wait lies within [d/2, d] for d the base doubled per attempt up to
// the cap, whatever the draw; the draws spread it over that range.
func TestBackoffJitterBounds(t *testing.T) {
	base, max := time.Second, 5*time.Minute
	for attempt := 1; attempt <= 20; attempt++ {
		d := base << (attempt - 1)
		if attempt > 10 || d > max {
			d = max
		}
		for _, f := range []float64{0, 0.25, 0.5, 0.999999} {
			got := backoffDelay(attempt, base, max, f)
			if got < d/2 || got > d {
				t.Errorf("attempt %d, draw %v: %s outside [%s, %s]", attempt, f, got, d/2, d)
			}
		}
		if lo, hi := backoffDelay(attempt, base, max, 0), backoffDelay(attempt, base, max, 0.999999); hi-lo < d/2-d/1000 {
			t.Errorf("attempt %d: draws span %s..%s, want about half the wait", attempt, lo, hi)
		}
	}
	n := newNotifier(hclog.NewNullLogger(), func() bool { return true }, newNotifyMetrics())
	seen := map[time.Duration]bool{}
	for range 50 {
		got := n.backoff(3)
		if got < 2*time.Second || got > 4*time.Second {
			t.Fatalf("backoff(3) = %s, want within [2s, 4s]", got)
		}
		seen[got] = true
	}
	if len(seen) < 10 {
		t.Errorf("50 waits took %d values: not jittered", len(seen))
	}
}

// A full queue drops (counted), and neither enqueue nor anything else
// waits for a receiver that does not answer.
func TestNotifierQueueFullNeverBlocks(t *testing.T) {
	rc := newReceiver(t, 200)
	rc.hang = make(chan struct{})
	n := newNotifier(hclog.NewNullLogger(), func() bool { return true }, newNotifyMetrics())
	n.queue = make(chan *delivery, 2)
	n.workers = 1
	stop := n.run(context.Background())
	defer stop(0)
	type result struct {
		taken   int
		dropped []noticeKey
	}
	finished := make(chan result)
	go func() {
		var res result
		for i := range 10 {
			d := testDelivery(rc.srv.URL, fmt.Sprintf("d-%d", i), 1)
			if n.enqueue(d) {
				res.taken++
			} else {
				res.dropped = append(res.dropped, d.key)
			}
		}
		finished <- res
	}()
	var res result
	select {
	case res = <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("enqueue blocked on a receiver that does not answer")
	}
	// One is being sent (the worker waits on the receiver), two are
	// queued; at most one more may have slipped in before the worker took
	// the first.
	if res.taken < 2 || res.taken > 3 {
		t.Errorf("queue of 2 with one worker took %d of 10", res.taken)
	}
	if dropped := testutil.ToFloat64(n.metrics.dropped); int(dropped) != 10-res.taken {
		t.Errorf("dropped %v, want %d", dropped, 10-res.taken)
	}
	// A dropped message is not on its way: a later round queues it again.
	for _, k := range res.dropped {
		if n.busy(k) {
			t.Errorf("dropped message %s counts as on its way", k.id)
		}
	}
}

// Only the leader sends: a notifier whose lease has lapsed sends nothing,
// and leaves the message for the next leader (not finished, not busy).
func TestNotifierOnlyLeaderSends(t *testing.T) {
	rc := newReceiver(t, 200)
	leading := false
	var mu sync.Mutex
	n := newNotifier(hclog.NewNullLogger(), func() bool { mu.Lock(); defer mu.Unlock(); return leading }, newNotifyMetrics())
	stop := n.run(context.Background())
	defer stop(time.Second)
	d := testDelivery(rc.srv.URL, "d-1", 3)
	n.enqueue(d)
	deadline := time.Now().Add(30 * time.Second)
	for n.busy(d.key) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if rc.requests() != 0 || len(n.takeFinished()) != 0 || n.busy(d.key) {
		t.Fatalf("not leading: %d requests sent, want none, and the message left for the next leader", rc.requests())
	}
	// Between lead terms nothing is queued at all.
	stop(time.Second)
	if n.enqueue(d) {
		t.Error("a notifier out of its lead term took a message")
	}
}

// The message a receiver gets: the job, the action, the reason with its
// numbers, the rule, the time, the decision's ID and the UI link.
func TestMessage(t *testing.T) {
	c := &Controller{wiring: wiring{config: &Config{UIURL: "https://nomad.example.com/"}}}
	c.notices = &outbox{wiring: c.wiring}
	nt := &Notice{ID: "d-1", Event: "idle_warning", Action: idleWarningAction, At: t0, Group: "work", GPUs: 2,
		Tenant: "ml", Tier: "interactive", Rule: "idle", Reason: "GPU utilisation 2% (under 10%) for 10m", ReclaimAt: t0.Add(5 * time.Minute)}
	nb := &notifyBlockForTest
	m := c.notices.message(nb, jobKey{"ml", "nb/1"}, nt)
	b, _ := json.Marshal(m)
	var got map[string]any
	_ = json.Unmarshal(b, &got)
	want := map[string]any{
		"id": "d-1", "event": "idle_warning", "action": "idle-warning", "time": "2026-11-22T12:00:00Z",
		"job":    map[string]any{"namespace": "ml", "id": "nb/1", "group": "work"},
		"tenant": "ml", "tier": "interactive", "gpus": float64(2), "rule": "idle",
		"reason": "GPU utilisation 2% (under 10%) for 10m", "reclaim_at": "2026-11-22T12:05:00Z",
		"ui_url": "https://nomad.example.com/ui/jobs/nb%2F1@ml", "notify": "ops",
		"text": "ml/nb/1/work idle warning: GPU utilisation 2% (under 10%) for 10m https://nomad.example.com/ui/jobs/nb%2F1@ml",
	}
	gk, wk := mapKeys(got), mapKeys(want)
	if !slices.Equal(gk, wk) {
		t.Fatalf("keys %v, want %v", gk, wk)
	}
	for k, v := range want {
		gb, _ := json.Marshal(got[k])
		wb, _ := json.Marshal(v)
		if string(gb) != string(wb) {
			t.Errorf("%s = %s, want %s", k, gb, wb)
		}
	}
	nb2 := notifyBlockForTest
	nb2.UIURL = "http://ui.example.com:4646"
	if u := c.notices.message(&nb2, jobKey{"ml", "nb"}, nt).UIURL; u != "http://ui.example.com:4646/ui/jobs/nb@ml" {
		t.Errorf("block's ui_url: link %s", u)
	}
}

var notifyBlockForTest = policy.Notify{Name: "ops", URL: "http://127.0.0.1/", Timeout: time.Second, Attempts: 3}

func mapKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A webhook's URL may be a secret (url_env): a failed attempt's error,
// which is logged, does not name it.
func TestNotifierKeepsURLOutOfErrors(t *testing.T) {
	rc := newReceiver(t, 200)
	secret := rc.srv.URL + "/hooks/T000/B000/s3cretT0ken"
	rc.srv.Close() // nothing answers there any more
	n := newNotifier(hclog.NewNullLogger(), func() bool { return true }, newNotifyMetrics())
	err := n.post(testDelivery(secret, "d-1", 1))
	if err == nil {
		t.Fatal("a post to a closed server succeeded")
	}
	if strings.Contains(err.Error(), "s3cretT0ken") {
		t.Errorf("error %q names the webhook's URL", err)
	}
}
