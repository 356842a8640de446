package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// userHook is a webhook receiver on loopback that keeps, per message, its
// event, job, body recipient and recipient header.
type userHook struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string
}

func newUserHook(t *testing.T) *userHook {
	h := &userHook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			Event     string `json:"event"`
			Recipient string `json:"recipient"`
			Reason    string `json:"reason"`
			Job       struct{ Namespace, ID string }
		}
		_ = json.Unmarshal(body, &m)
		h.mu.Lock()
		h.got = append(h.got, fmt.Sprintf("%s %s/%s to=%s header=%s (%s)", m.Event, m.Job.Namespace, m.Job.ID, m.Recipient,
			r.Header.Get("X-Steward-Recipient"), m.Reason))
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *userHook) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// TestPerUserNotify: on the production-shaped cluster, two of research's
// jobs name their recipients in their meta (steward.notify). ada's batch
// job names an address the operator's per-job block allows: the block's
// receiver gets its start and, once it completed, its finish, each once,
// with the recipient in the body and in the operator's header, at the
// operator's URL. eve's job names an address outside the allowlist: no
// message. The operator's block that takes every event gets neither start
// nor finish.
func TestPerUserNotify(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{}, "research", "ml")
	users, ops := newUserHook(t), newUserHook(t)
	pol := tenantPolicy + fmt.Sprintf(`
notify "users" {
  url              = %q
  events           = ["start", "finish", "preempt"]
  per_job          = true
  recipient_header = "X-Steward-Recipient"
  recipients       = "[a-z]+@example\\.com"
}
notify "ops" {
  url = %q
}
`, users.srv.URL, ops.srv.URL)
	c.startController("ctl", writePolicy(t, pol))

	src, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(t), "jobs", "gpu-work.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	submit := func(name, typ, to string) {
		vars := fmt.Sprintf("name = %q\nnamespace = \"research\"\ntier = \"training\"\ngpus = 2\ncount = 1\ntype = %q\nbusy_seconds = 4\n", name, typ)
		job, err := c.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars, Canonicalize: true})
		if err != nil {
			t.Fatal(err)
		}
		job.Meta["steward.notify"] = to
		if _, _, err := c.Client.Jobs().Register(job, nil); err != nil {
			t.Fatal(err)
		}
	}
	submit("ada", "batch", "ada@example.com")
	submit("eve", "service", "eve@evil.example.org")
	want := []string{
		"start research/ada to=ada@example.com header=ada@example.com (its GPU work started: 1 allocation running with 2 GPUs)",
		"finish research/ada to=ada@example.com header=ada@example.com (its GPU work ended: completed)",
	}
	testnomad.WaitFor(t, 60*time.Second, "ada's start and finish", func() (bool, string) {
		got := users.messages()
		return len(got) >= 2, strings.Join(got, "\n")
	})
	c.waitRunning(30*time.Second, map[string]int{"research/eve": 1})
	time.Sleep(3 * time.Second) // a few more rounds: nothing sent twice, nothing for eve
	if got := users.messages(); !slices.Equal(got, want) {
		t.Errorf("the per-job block got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, m := range ops.messages() {
		if strings.HasPrefix(m, "start ") || strings.HasPrefix(m, "finish ") {
			t.Errorf("the operator's every-event block got %s", m)
		}
	}
}
