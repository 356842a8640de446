package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// The preempt → hold → resume story the crash and fault tests replay on 4
// GPUs: train (training) runs; extra (training) arrives and is held for
// want of GPUs; nb (interactive) preempts train (checkpoint signal, grace,
// hold); nb ends and train, preempted mid-run, resumes ahead of extra.
// Whatever breaks on the way, it must end so: train running, extra held
// with a reason, and no GPU ever given to two running allocations.
type storyRun struct {
	c *cluster
	t *testing.T
	// step is called while waiting, so that the test can replace a crashed
	// controller.
	step func()
}

func (s storyRun) waitRunning(want map[string]int) {
	s.t.Helper()
	keys := []string{}
	for k := range want {
		keys = append(keys, k)
	}
	testnomad.WaitFor(s.t, 150*time.Second, fmt.Sprintf("running allocations %v", want), func() (bool, string) {
		s.step()
		var got []string
		ok := true
		for _, k := range keys {
			ns, job, _ := strings.Cut(k, "/")
			n := s.c.running(ns, job)
			got = append(got, fmt.Sprintf("%s=%d", k, n))
			ok = ok && n == want[k]
		}
		return ok, strings.Join(got, " ")
	})
}

func (s storyRun) play() {
	c, t := s.c, s.t
	c.work("train", "ml", "training", 4, 1, "priority", "40")
	s.waitRunning(map[string]int{"ml/train": 1})
	c.work("extra", "ml", "training", 4, 1, "priority", "40")
	testnomad.WaitFor(t, 90*time.Second, "extra held for want of GPUs", func() (bool, string) {
		s.step()
		rec := c.record("ml", "extra")
		return rec["steward_state"] == "held", fmt.Sprint(rec)
	})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	s.waitRunning(map[string]int{"ml/nb": 1, "ml/train": 0, "ml/extra": 0})
	if _, _, err := c.Client.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	s.waitRunning(map[string]int{"ml/train": 1, "ml/extra": 0})
	time.Sleep(3 * time.Second) // and it stays so
	s.waitRunning(map[string]int{"ml/train": 1, "ml/extra": 0})
	rec := c.record("ml", "extra")
	if rec["steward_state"] != "held" || rec["steward_reason"] == "" {
		t.Errorf("extra is not held with a reason: %v", rec)
	}
}

// watchDoubleBooking samples the node's allocations until the test ends
// and fails it if a GPU was ever given to two running allocations, or more
// GPUs ran than the node has.
func watchDoubleBooking(t *testing.T, c *cluster, gpus int) {
	var mu sync.Mutex
	var bad []string
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
			allocs, _, err := c.Client.Allocations().List(&api.QueryOptions{Namespace: "*", Params: map[string]string{"resources": "true"}})
			if err != nil {
				continue
			}
			owner := map[string]string{}
			n := 0
			for _, a := range allocs {
				if a.ClientStatus != "running" || a.AllocatedResources == nil {
					continue
				}
				for _, tr := range a.AllocatedResources.Tasks {
					for _, d := range tr.Devices {
						for _, id := range d.DeviceIDs {
							n++
							if o, ok := owner[id]; ok {
								mu.Lock()
								bad = append(bad, fmt.Sprintf("GPU %s given to %s and %s", id, o, a.ID))
								mu.Unlock()
							}
							owner[id] = a.ID
						}
					}
				}
			}
			if n > gpus {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("%d GPUs in running allocations on a node of %d", n, gpus))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Errorf("double booking: %v", bad)
		}
	})
}

const crashPolicy = twoTiers + `
preemption {
  min_runtime       = "0s"
  grace             = "3s"
  checkpoint_signal = "SIGUSR1"
  resume_order      = "preempted-first"
}
`

// TestControllerCrashAtEachStep (ACLs on, the shipped controller policy) kills the controller (it exits at once, as
// under SIGKILL) right after it recorded each step of the story and before
// the Nomad call that carries it out; a second controller takes over and
// the story must still end as it should.
func TestControllerCrashAtEachStep(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"holdback-recorded", "preempt-recorded", "signal-recorded", "hold-recorded", "resume-recorded"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			c := startShippedACLCluster(t, 4, "ml")
			watchDoubleBooking(t, c, 4)
			policy := writePolicy(t, crashPolicy)
			c.controllerEnv = []string{"STEWARD_CRASH_AT=" + step}
			crashy := c.startController("crashy", policy)
			c.controllerEnv = nil
			var healer *controllerProc
			storyRun{c: c, t: t, step: func() {
				if healer == nil && crashy.Exited() {
					healer = c.startController("healer", policy)
				}
			}}.play()
			if !crashy.Contains("crash point reached: exiting at once: step=" + step) {
				t.Errorf("the controller never reached step %s:\n%s", step, tail(crashy.Log(), 20))
			}
		})
	}
}

// faultyProxy forwards HTTP to Nomad, and answers 500 to the first n
// writes (PUT or POST) whose path matches a rule.
type faultyProxy struct {
	srv    *httptest.Server
	mu     sync.Mutex
	path   *regexp.Regexp
	left   int
	failed []string
}

func newFaultyProxy(t *testing.T, nomad, path string, n int) *faultyProxy {
	u, err := url.Parse(nomad)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // the event stream
	p := &faultyProxy{path: regexp.MustCompile(path), left: n}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		hit := p.left > 0 && (r.Method == http.MethodPut || r.Method == http.MethodPost) && p.path.MatchString(r.URL.Path)
		if hit {
			p.left--
			p.failed = append(p.failed, r.Method+" "+r.URL.Path)
		}
		p.mu.Unlock()
		if hit {
			http.Error(w, "injected fault", http.StatusInternalServerError)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *faultyProxy) injected() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.failed...)
}

// TestNomadCallFailsAtEachStep (ACLs on, the shipped controller policy): each Nomad call the story makes fails (500)
// the first times it is made; the controller retries on a fresh read and
// the story ends as it should.
func TestNomadCallFailsAtEachStep(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path string
		n          int
	}{
		{"state write", `^/v1/var/steward/jobs/`, 3},
		{"job record", `^/v1/var/nomad/jobs/`, 3},
		{"checkpoint signal", `^/v1/client/allocation/[^/]+/signal$`, 2},
		{"scale", `^/v1/job/[^/]+/scale$`, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := startShippedACLCluster(t, 4, "ml")
			watchDoubleBooking(t, c, 4)
			p := newFaultyProxy(t, c.Address, tc.path, tc.n)
			c.startControllerAt("ctl", writePolicy(t, crashPolicy), p.srv.URL)
			storyRun{c: c, t: t, step: func() {}}.play()
			if got := p.injected(); len(got) == 0 {
				t.Errorf("no %s call was made, so none failed", tc.name)
			} else {
				t.Logf("failed on purpose: %v", got)
			}
		})
	}
}
