package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// Notifications end to end: a webhook receiver on 127.0.0.1 gets exactly
// one message per decision the controllers make, across a controller
// restart in the middle; an idle rule's warning reaches the allocation as a
// task event.

// hookMessage is what the receiver reads of a message.
type hookMessage struct {
	ID     string `json:"id"`
	Event  string `json:"event"`
	Action string `json:"action"`
	Job    struct {
		Namespace string `json:"namespace"`
		ID        string `json:"id"`
	} `json:"job"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	UIURL  string `json:"ui_url"`
	Time   string `json:"time"`
	key    string // the Idempotency-Key header
}

// hook is a webhook receiver on loopback. While down it answers 503.
type hook struct {
	t        *testing.T
	srv      *httptest.Server
	mu       sync.Mutex
	down     bool
	refused  int
	accepted []hookMessage
}

func newHook(t *testing.T) *hook {
	h := &hook{t: t}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.down {
			h.refused++
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var m hookMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Errorf("webhook message %s: %v", body, err)
		}
		m.key = r.Header.Get("Idempotency-Key")
		h.accepted = append(h.accepted, m)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) setDown(down bool) {
	h.mu.Lock()
	h.down = down
	h.mu.Unlock()
}

func (h *hook) messages() []hookMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.accepted)
}

func (h *hook) refusals() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refused
}

// decisionLine matches a controller's log line for a decision that
// notify blocks are told about.
var decisionLine = regexp.MustCompile(`steward: (preempt|idle-stop|hold|resume|move|promote|idle-warning): job=(\S+)`)

// decisions lists "kind job" for each such decision in the logs.
func decisions(logs ...string) []string {
	var out []string
	for _, l := range logs {
		for _, m := range decisionLine.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1]+" "+m[2])
		}
	}
	slices.Sort(out)
	return out
}

// received lists "action job" for each message taken, and fails on a
// decision received twice.
func (h *hook) received() []string {
	h.t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, m := range h.messages() {
		if seen[m.ID] {
			h.t.Errorf("decision %s (%s %s/%s) received twice", m.ID, m.Action, m.Job.Namespace, m.Job.ID)
		}
		seen[m.ID] = true
		if m.key != m.ID {
			h.t.Errorf("message %s came with Idempotency-Key %q", m.ID, m.key)
		}
		out = append(out, m.Action+" "+m.Job.Namespace+"/"+m.Job.ID)
	}
	slices.Sort(out)
	return out
}

const notifyPolicy = twoTiers + `
preemption {
  min_runtime       = "0s"
  grace             = "0s"
  checkpoint_signal = "SIGUSR1"
}
notify "ops" {
  url      = "%s"
  attempts = 100
}
`

// TestNotifyOncePerDecisionAcrossRestart: the receiver is down when the
// first controller preempts ml/train for ml/nb; that controller is stopped
// with the message unsent, the receiver comes back, and a second
// controller sends it. The notebook ends, the second controller resumes
// the trainer and says so. A third controller, started after the second is
// stopped, sends nothing again. Every decision of the controllers' logs is
// received exactly once, with its ID as Idempotency-Key, the reason with
// its numbers and the job's page in the Nomad UI.
func TestNotifyOncePerDecisionAcrossRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	h := newHook(t)
	h.setDown(true)
	pol := writePolicy(t, fmt.Sprintf(notifyPolicy, h.srv.URL))

	ctl1 := c.startController("ctl1", pol)
	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 2, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	testnomad.WaitFor(t, 30*time.Second, "the first controller tried to send the preemption", func() (bool, string) {
		return h.refusals() > 0, ctl1.Log()
	})
	ctl1.Stop()
	if got := h.received(); len(got) != 0 {
		t.Fatalf("the receiver was down, yet took %q", got)
	}
	made1 := decisions(ctl1.Log())
	if !slices.Contains(made1, "preempt ml/train") {
		t.Fatalf("the first controller's decisions %q lack the preemption of ml/train", made1)
	}

	h.setDown(false)
	ctl2 := c.startController("ctl2", pol)
	testnomad.WaitFor(t, 60*time.Second, "the second controller sent the first one's decisions", func() (bool, string) {
		got := h.received()
		return slices.Equal(got, made1), fmt.Sprintf("received %q, want %q", got, made1)
	})
	// The notebook ends: the trainer resumes, decided by the second.
	if _, _, err := c.Client.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	testnomad.WaitFor(t, 30*time.Second, "the resume sent", func() (bool, string) {
		return slices.Contains(h.received(), "resume ml/train"), fmt.Sprint(h.received())
	})
	ctl2.Stop()
	made := decisions(ctl1.Log(), ctl2.Log())

	ctl3 := c.startController("ctl3", pol)
	testnomad.WaitFor(t, 30*time.Second, "the third controller leads", func() (bool, string) {
		return ctl3.Contains("leading: this controller acts"), ""
	})
	time.Sleep(5 * time.Second) // rounds in which it could resend
	ctl3.Stop()
	made = append(made, decisions(ctl3.Log())...)
	slices.Sort(made)
	if got := h.received(); !slices.Equal(got, made) {
		t.Errorf("received %q\nwant one message per decision: %q", got, made)
	} else {
		t.Logf("one message per decision: %q", got)
	}
	for _, m := range h.messages() {
		if m.Action == "preempt" {
			if !strings.Contains(m.Reason, "yields 4 GPUs to ml/nb/work") || m.Rule != "priority" || m.Event != "preempt" {
				t.Errorf("preemption message: rule %q, reason %q", m.Rule, m.Reason)
			}
			if want := c.Address + "/ui/jobs/train@ml"; m.UIURL != want {
				t.Errorf("link %q, want %q", m.UIURL, want)
			}
			if _, err := time.Parse(time.RFC3339, m.Time); err != nil || !strings.HasPrefix(m.ID, "d-") {
				t.Errorf("time %q, id %q", m.Time, m.ID)
			}
		}
	}
}

// A notebook on steward-exec that does nothing with its GPU. Its template
// renders Steward's record into the file the driver reads, as
// docs/reference/driver.md says a jobspec must for idle warnings.
const idleNotebookJob = `
job "nb" {
  namespace = "ml"
  type      = "service"
  priority  = 60
  meta = {
    "steward.tier" = "interactive"
  }
  group "work" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "work" {
      driver       = "steward-exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sh"
        args    = ["-c", "for f in $(echo \"$STEWARD_SIM_ACTIVITY_FILES\" | tr ',' ' '); do echo 2 > \"$f\"; done; trap 'exit 0' INT TERM; while :; do sleep 1; done"]
      }
      template {
        destination = "local/steward-preemption.env"
        change_mode = "noop"
        wait {
          min = "100ms"
          max = "500ms"
        }
        data = <<-EOT
          {{- $path := printf "nomad/jobs/%s" (env "NOMAD_JOB_ID") -}}
          {{- if nomadVarExists $path }}{{ with nomadVar $path -}}
          reason={{ .steward_reason }}
          idle_warning={{ .steward_idle_warning }}
          idle_warning_at={{ .steward_idle_warning_at }}
          idle_warning_allocs={{ .steward_idle_warning_allocs }}
          {{ end }}{{ end -}}
        EOT
      }
      resources {
        cpu    = 20
        memory = 32
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
`

const idleWarnPolicy = twoTiers + `
idle "notebooks" {
  tiers       = ["interactive"]
  threshold   = 10
  after       = "30s"
  warn_before = "20s"
  mode        = "always"
  action      = "stop"
}
notify "ml" {
  url     = "%s"
  events  = ["idle_warning", "idle_reclaim"]
  tenants = []
}
`

// TestIdleWarningTaskEvent: a notebook idle at 2% gets, 20s before the
// idle rule would stop it, one "Idle warning" task event on its allocation
// (Allocations().Info TaskStates[...].Events) and one webhook message; at
// 30s it is stopped, and that is sent too.
func TestIdleWarningTaskEvent(t *testing.T) {
	t.Parallel()
	simDir, ckptRoot := t.TempDir(), t.TempDir()
	a := testnomad.Start(t, testnomad.Options{
		Plugins: []testnomad.Plugin{
			{Name: "steward-gpu", Config: fmt.Sprintf(`    backend       = "sim"
    sim_count     = 1
    sim_state_dir = %q
    stats_period  = "1s"`, simDir)},
			{Name: "steward-exec", Config: fmt.Sprintf(`    checkpoint_root   = %q
    gpu_sample_period = "1s"`, ckptRoot)},
		},
		LogLevel: "INFO",
	})
	c := &cluster{Agent: a, t: t, stateDir: simDir}
	for _, ns := range []string{"steward", "ml"} {
		if _, err := a.Client.Namespaces().Register(&api.Namespace{Name: ns}, nil); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	testnomad.WaitFor(t, 60*time.Second, "steward-exec healthy and a simulated GPU", func() (bool, string) {
		node := a.Node(t)
		if d := node.Drivers["steward-exec"]; d == nil || !d.Healthy {
			return false, "steward-exec not healthy yet"
		}
		return node.NodeResources != nil && len(node.NodeResources.Devices) > 0, "no devices yet"
	})
	h := newHook(t)
	c.startController("ctl", writePolicy(t, fmt.Sprintf(idleWarnPolicy, h.srv.URL)))

	job, err := a.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: idleNotebookJob, Canonicalize: true})
	if err != nil {
		t.Fatalf("parsing the notebook's jobspec: %v", err)
	}
	if _, _, err := a.Client.Jobs().Register(job, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatalf("registering the notebook: %v", err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1})
	alloc := c.allocIDs("ml", "nb")[0]

	const want = "Idle warning: GPU utilisation 2% (under 10%) for 10s (idle rule notebooks: after 30s, mode always): " +
		"its 1 GPU goes back in 20s unless it gets busy; the job is then stopped"
	warnings := func() []string {
		info, _, err := a.Client.Allocations().Info(alloc, &api.QueryOptions{Namespace: "ml"})
		if err != nil {
			return nil
		}
		var out []string
		for _, e := range info.TaskStates["work"].Events {
			if e.Type == "Driver" && strings.HasPrefix(e.DisplayMessage, "Idle warning: ") {
				out = append(out, e.DisplayMessage)
			}
		}
		return out
	}
	testnomad.WaitFor(t, 60*time.Second, "the idle warning on the allocation", func() (bool, string) {
		return len(warnings()) > 0, fmt.Sprint(warnings())
	})
	if got := warnings(); len(got) != 1 || !sameIdleWarning(got[0], want) {
		t.Errorf("task events %q\nwant one like %q", got, want)
	}
	rec := c.record("ml", "nb")
	if !strings.HasPrefix(rec["steward_idle_warning"], "GPU utilisation 2% (under 10%)") || !strings.HasPrefix(alloc, rec["steward_idle_warning_allocs"]) {
		t.Errorf("record %v: want the warning and the allocation it is about", rec)
	}
	c.waitRunning(90*time.Second, map[string]int{"ml/nb": 0})
	testnomad.WaitFor(t, 30*time.Second, "the warning and the release sent", func() (bool, string) {
		got := h.received()
		return slices.Equal(got, []string{"idle-stop ml/nb", "idle-warning ml/nb"}), fmt.Sprint(got)
	})
	if got := warnings(); len(got) != 1 {
		t.Errorf("task events %q: want one warning", got)
	}
}

// sameIdleWarning compares a warning with the expected text, allowing the
// seconds to differ by a sample or two (the controller samples GPU
// activity every second).
func sameIdleWarning(got, want string) bool {
	digits := regexp.MustCompile(`\d+s\b`)
	return digits.ReplaceAllString(got, "Ns") == digits.ReplaceAllString(want, "Ns")
}
