package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// TestPerJobNotify: per-user routing. Three running jobs name recipients
// in their meta: ada an allowed address, eve one outside the block's
// allowlist, and mallory one with a header injection in it. The per-job
// block is sent ada's start once (the recipient in the body and in the
// operator's header, the URL the operator's), then, once ada's job is
// stopped, its finish once, across a restart; eve's and mallory's jobs
// send nothing, mallory's record says why, and the operator's block that
// takes every event is not sent starts or finishes.
func TestPerJobNotify(t *testing.T) {
	users, ops := newReceiver(t, 200), newReceiver(t, 200)
	f := newFakeNomad()
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 3)}
	for i, j := range []struct{ id, to string }{{"ada", "ada@example.com"}, {"eve", "eve@evil.example.org"}, {"mallory", "m@example.com\r\nX-Evil: 1"}} {
		job := apiJob("ml", j.id, "training", 40, 1, 1)
		job.Meta[policy.RecipientMetaKey] = j.to
		cl.jobs["ml/"+j.id] = job
		cl.allocs = append(cl.allocs, apiAlloc("a-"+j.id, job, "n1", []string{fmt.Sprintf("n1-gpu%d", i)}, t0.Add(-time.Minute)))
	}
	r := newRoundRunner(t, f)
	start := func() (stop func()) {
		p, diags := policy.ParseBytes("test.hcl", []byte(testPolicyText+fmt.Sprintf(`
notify "users" {
  url              = %q
  events           = ["start", "finish"]
  per_job          = true
  recipient_header = "X-Steward-Recipient"
  recipients       = "[a-z0-9.-]+@example\\.com"
  attempts         = 100
}
notify "ops" {
  url      = %q
  attempts = 100
}
`, users.srv.URL, ops.srv.URL)))
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		r.c.pol, r.c.eng = p, engine.New(p)
		n := newNotifier(r.c.log(), r.c.lease.valid, newNotifyMetrics())
		n.base, n.max = time.Millisecond, 5*time.Millisecond
		r.c.notices.notifier = n
		end := n.run(context.Background())
		return func() { end(5 * time.Second) }
	}
	stop := start()
	for _, at := range []time.Duration{0, time.Minute} {
		if _, err := r.round(at); err != nil {
			t.Fatal(err)
		}
	}
	users.waitAccepted(t, 1)
	stop()
	r.c.notices.flushOutbox(context.Background())
	r.restart() // a new controller sends no second start
	stop = start()
	if _, err := r.round(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	cl.jobs["ml/ada"].Stop = ptr(true)
	cl.allocs = slices.DeleteFunc(cl.allocs, func(a *api.AllocationListStub) bool { return a.JobID == "ada" })
	for _, at := range []time.Duration{3 * time.Minute, 4 * time.Minute} {
		if _, err := r.round(at); err != nil {
			t.Fatal(err)
		}
	}
	users.waitAccepted(t, 2)
	time.Sleep(20 * time.Millisecond)
	stop()

	users.mu.Lock()
	var got []string
	for i, req := range users.got {
		var m Message
		if err := json.Unmarshal(users.bodies[i], &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %s header=%s reason=%q", m.Event, m.Job.ID, m.Recipient, req.Header.Get("X-Steward-Recipient"), m.Reason))
	}
	users.mu.Unlock()
	want := []string{
		`start ada ada@example.com header=ada@example.com reason="its GPU work started: 1 allocation running with 1 GPU"`,
		`finish ada ada@example.com header=ada@example.com reason="its GPU work ended: stopped"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("the per-job block got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	ops.mu.Lock()
	for i := range ops.got {
		t.Errorf("the operator's block (every event) got %s", ops.bodies[i])
	}
	ops.mu.Unlock()
	if w := f.vars["ml:nomad/jobs/mallory"]["steward_warning"]; !strings.Contains(w, "steward.notify is refused (only letters, digits") || strings.Contains(w, "X-Evil") {
		t.Errorf("mallory's record: steward_warning %q", w)
	}
}
