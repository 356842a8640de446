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

// notifying gives the round runner's controller a policy with a notify
// block sending every event to url, and a notifier in a lead term; it
// returns the end of that term.
func notifying(t *testing.T, r *roundRunner, url string) (stop func()) {
	t.Helper()
	return notifyingWith(t, r, url, testPolicyText)
}

func notifyingWith(t *testing.T, r *roundRunner, url, base string) (stop func()) {
	t.Helper()
	p, diags := policy.ParseBytes("test.hcl", []byte(base+fmt.Sprintf(`
notify "ops" {
  url      = %q
  ui_url   = "https://nomad.example.com"
  attempts = 100
}
`, url)))
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

// accepted is what the receiver took (2xx) by decision ID, and the
// events of those decisions.
func (rc *receiver) accepted(t *testing.T) (map[string]int, map[string]string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	byID, events := map[string]int{}, map[string]string{}
	for i, req := range rc.got {
		if i >= len(rc.status) || rc.status[i] >= 300 {
			continue
		}
		var m Message
		if err := json.Unmarshal(rc.bodies[i], &m); err != nil {
			t.Fatalf("message %s: %v", rc.bodies[i], err)
		}
		if m.ID != req.Header.Get("Idempotency-Key") {
			t.Errorf("message %s has Idempotency-Key %q", m.ID, req.Header.Get("Idempotency-Key"))
		}
		byID[m.ID]++
		events[m.ID] = m.Event
	}
	return byID, events
}

// waitAccepted waits until the receiver took n messages.
func (rc *receiver) waitAccepted(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		byID, _ := rc.accepted(t)
		total := 0
		for _, c := range byID {
			total += c
		}
		if total >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver took %d messages, want %d", total, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func outboxLen(c *Controller) int {
	n := 0
	for _, st := range c.states() {
		n += len(st.Outbox)
	}
	return n
}

// The preemption story of TestWholeRound, told to a webhook: one message
// per decision (the hold of ml/nb and the preemption of ml/train at once,
// the resume of ml/nb after the grace), whatever happens to the receiver
// and the controller in between.
func TestOutboxExactlyOnce(t *testing.T) {
	tests := []struct {
		name string
		// down: the receiver answers 503 until after the restart.
		down bool
		// restartBefore is the round before which the controller is
		// replaced (1-based; 0: never); graceful ends the old one's term
		// as lead does (marking what was sent), else it just stops (a
		// crash).
		restartBefore int
		graceful      bool
		// repeats are the decisions the receiver may get twice (the
		// crash window), each time with the same Idempotency-Key.
		repeats int
	}{
		{name: "no restart"},
		{name: "graceful restart after the decisions were sent", restartBefore: 2, graceful: true},
		{name: "receiver down until a restart in the middle", down: true, restartBefore: 2},
		{name: "receiver down, graceful restart", down: true, restartBefore: 2, graceful: true},
		{name: "crash after sending, before marking: resent with the same key", restartBefore: 2, repeats: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, 200)
			if tt.down {
				rc.setScript(503)
			}
			f := newFakeNomad()
			preemptionCluster(f)
			r := newRoundRunner(t, f)
			stop := notifying(t, r, rc.srv.URL)
			for i, step := range preemptionSteps {
				if i == 0 {
					if _, err := r.round(step.after); err != nil {
						t.Fatal(err)
					}
					if n := outboxLen(r.c); n != 2 {
						t.Fatalf("after the first round: %d messages in the outbox, want 2 (hold, preempt)", n)
					}
					if !tt.down {
						rc.waitAccepted(t, 2)
					}
					continue
				}
				if i+1 == tt.restartBefore {
					if tt.graceful {
						stop()
						r.c.notices.flushOutbox(context.Background())
					} else {
						// A crash: nothing more is marked or saved.
						r.c.notices.notifier.takeFinished()
						stop()
					}
					rc.setScript(200)
					r.restart()
					stop = notifying(t, r, rc.srv.URL)
				}
				if _, err := r.round(step.after); err != nil {
					t.Fatalf("round at %s: %v", step.after, err)
				}
			}
			rc.waitAccepted(t, 3+tt.repeats)
			// A last round marks what was sent; the outbox is empty.
			if _, err := r.round(5 * time.Minute); err != nil {
				t.Fatal(err)
			}
			stop()
			r.c.notices.flushOutbox(context.Background())
			if n := outboxLen(r.c); n != 0 {
				t.Errorf("%d messages left in the outbox", n)
			}
			byID, events := rc.accepted(t)
			var kinds []string
			repeated := 0
			for id, n := range byID {
				kinds = append(kinds, events[id])
				if n > 1 {
					repeated += n - 1
				}
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, []string{"hold", "preempt", "resume"}) {
				t.Errorf("decisions received: %q, want one each of hold, preempt, resume", kinds)
			}
			if repeated != tt.repeats {
				t.Errorf("%d repeats received (%v), want %d", repeated, byID, tt.repeats)
			}
			// Restarted once more, the controller sends nothing again.
			before := rc.requests()
			r.restart()
			stop = notifying(t, r, rc.srv.URL)
			defer stop()
			if _, err := r.round(6 * time.Minute); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			if rc.requests() != before {
				t.Errorf("a restarted controller sent %d messages again", rc.requests()-before)
			}
		})
	}
}

// A message whose decision was not saved (the state write failed) is not
// sent: no decision was recorded.
func TestOutboxUnsavedDecisionNotSent(t *testing.T) {
	rc := newReceiver(t, 200)
	f := newFakeNomad()
	preemptionCluster(f)
	f.fail = map[string]error{"put steward steward/jobs/ml/train": errInjected}
	r := newRoundRunner(t, f)
	stop := notifying(t, r, rc.srv.URL)
	defer stop()
	if _, err := r.round(0); err != nil {
		t.Fatal(err)
	}
	for _, st := range r.c.states() {
		for _, n := range st.Outbox {
			if n.Event == policy.NotifyPreempt {
				t.Errorf("the preemption's message is in the outbox though its decision was not saved")
			}
		}
	}
}

// An idle rule's warning, through whole rounds: given once, recorded in
// the job's state (so a restarted controller does not give it again) and
// record (for the task's template), sent to the webhook, and withdrawn
// from the record when the notebook gets busy.
func TestIdleWarningRounds(t *testing.T) {
	rc := newReceiver(t, 200)
	f := newFakeNomad()
	cl := f.cl()
	cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
	nb := apiJob("ml", "nb", "interactive", 60, 1, 2)
	cl.jobs["ml/nb"] = nb
	gpus := []string{"n1-gpu0", "n1-gpu1"}
	cl.allocs = []*api.AllocationListStub{apiAlloc("a-nb", nb, "n1", gpus, t0.Add(-time.Hour))}
	cl.stats["n1"] = gpuStats(gpus, 1)
	r := newRoundRunner(t, f)
	testPolicyWarn := strings.Replace(testPolicyText, `after     = "15m"`, "after     = \"15m\"\n  warn_before = \"5m\"\n  mode = \"always\"", 1)
	stop := notifyingWith(t, r, rc.srv.URL, testPolicyWarn)
	defer func() { stop() }()

	sweepAt := func(at time.Duration) {
		r.clock = t0.Add(at)
		r.c.sampler.sweepStats(context.Background(), r.c.usage.targetsNow())
	}
	if _, err := r.round(-11 * time.Minute); err != nil {
		t.Fatal(err)
	}
	sweepAt(-11 * time.Minute)
	sweepAt(0)
	warnings := func() []Decision {
		var out []Decision
		for _, d := range r.c.decisions.list() {
			if d.Kind == idleWarningAction {
				out = append(out, d)
			}
		}
		return out
	}
	if _, err := r.round(0); err != nil {
		t.Fatal(err)
	}
	want := "GPU utilisation 1% (under 10%) for 11m (idle rule notebooks: after 15m, mode always): its 2 GPUs go back in 4m unless it gets busy; the job is then requeued, held until its owner resumes it"
	if w := warnings(); len(w) != 1 || w[0].Reason != want || w[0].Job != "ml/nb" {
		t.Fatalf("warnings %+v, want one for ml/nb: %s", w, want)
	}
	record, _, _ := f.GetVar(context.Background(), "ml", "nomad/jobs/nb")
	if record["steward_idle_warning"] != want || record["steward_idle_warning_allocs"] != "a-nb" || record["steward_idle_warning_at"] != t0.Format(time.RFC3339Nano) {
		t.Errorf("record %v: want the warning, its allocation and its time", record)
	}
	rc.waitAccepted(t, 1)
	_, events := rc.accepted(t)
	for _, e := range events {
		if e != policy.NotifyIdleWarning {
			t.Errorf("webhook got %q, want idle_warning", e)
		}
	}
	// Restarted, still idle: no second warning.
	stop()
	r.c.notices.flushOutbox(context.Background())
	r.restart()
	stop = notifyingWith(t, r, rc.srv.URL, testPolicyWarn)
	sweepAt(time.Minute)
	if _, err := r.round(time.Minute); err != nil {
		t.Fatal(err)
	}
	if w := warnings(); len(w) != 0 {
		t.Fatalf("a restarted controller warned again: %+v", w)
	}
	// Busy again: the warning is withdrawn from the record.
	cl.stats["n1"] = gpuStats(gpus, 80)
	sweepAt(2 * time.Minute)
	if _, err := r.round(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	record, _, _ = f.GetVar(context.Background(), "ml", "nomad/jobs/nb")
	if _, ok := record["steward_idle_warning"]; ok {
		t.Errorf("busy again, the record still warns: %v", record)
	}
	if len(warnings()) != 0 || rc.requests() != 1 {
		t.Errorf("busy again: %d warnings, %d messages; want none more", len(warnings()), rc.requests()-1)
	}
}

// A job's outbox keeps at most maxOutbox messages: a receiver down for
// long must not grow the job's state until it can no longer be written.
func TestOutboxBounded(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	st := c.state(jobKey{"ml", "nb"})
	for i := range maxOutbox + 5 {
		c.notices.addNotice(st, &Notice{ID: fmt.Sprintf("d-%02d", i), To: []string{"ops"}, Event: "hold"})
	}
	if len(st.Outbox) != maxOutbox || st.Outbox[0].ID != "d-05" || st.Outbox[maxOutbox-1].ID != fmt.Sprintf("d-%02d", maxOutbox+4) {
		t.Errorf("outbox holds %d, from %s: want the newest %d", len(st.Outbox), st.Outbox[0].ID, maxOutbox)
	}
}

// Allocations of one job warned in turn join the warning that stands, under
// its first time (the driver's name for it: an allocation told already is
// not told again); each leaves it when it is busy again or gone, and the
// warning goes with the last.
func TestIdleWarningJoinsAndLeaves(t *testing.T) {
	c := testController(t, newFakeNomad())
	nb := job("ml", "nb", "interactive", 60, 2, 1)
	a1, a2 := alloc("a1aaaaaaaa", "nb"), alloc("a2aaaaaaaa", "nb")
	r := roundWith([]*ObservedJob{nb}, []ObservedAlloc{a1, a2})
	idleFrom := func(id string, since time.Time, busy bool) {
		var s []engine.Sample
		for at := since; !at.After(r.now); at = at.Add(time.Minute) {
			s = append(s, engine.Sample{At: at, Util: 1})
		}
		if busy {
			s = append(s, engine.Sample{At: r.now, Util: 90})
		}
		c.usage.mu.Lock()
		c.usage.byAlloc[id] = s
		c.usage.mu.Unlock()
	}
	warn := func(id string) {
		c.warnIdle(context.Background(), r, c.pol, engine.IdleWarning{Job: engine.JobRef{Namespace: "ml", ID: "nb"}, Group: "work",
			Allocs: []string{id}, GPUs: 1, Reason: engine.Reason{Rule: engine.RuleIdle, Message: "idle " + id}})
	}
	st := c.state(jobKey{"ml", "nb"})
	idleFrom(a1.ID, t0.Add(-20*time.Minute), false)
	idleFrom(a2.ID, t0.Add(-20*time.Minute), false)
	warn(a1.ID)
	first := r.now
	r.now = r.now.Add(time.Minute)
	warn(a2.ID)
	c.pruneIdleWarnings(r, c.pol)
	items := map[string]string{}
	idleWarningItems(st, items)
	if items["steward_idle_warning_allocs"] != "a1aaaaaa,a2aaaaaa" || items["steward_idle_warning_at"] != first.Format(time.RFC3339Nano) ||
		items["steward_idle_warning"] != "idle a2aaaaaaaa" {
		t.Fatalf("record items %v: want both allocations under the first warning's time", items)
	}
	idleFrom(a1.ID, t0.Add(-20*time.Minute), true) // a1 busy again
	c.pruneIdleWarnings(r, c.pol)
	if st.IdleWarning == nil || !slices.Equal(st.IdleWarning.Allocs, []string{"a2aaaaaa"}) {
		t.Fatalf("a1 busy: warning %+v, want a2 alone", st.IdleWarning)
	}
	gone := roundWith([]*ObservedJob{nb}, []ObservedAlloc{a1})
	gone.now = r.now
	c.pruneIdleWarnings(gone, c.pol)
	if st.IdleWarning != nil || len(st.Warned) != 1 {
		t.Fatalf("a2 gone: warning %+v, warned %v; want no warning and a1's time alone", st.IdleWarning, st.Warned)
	}
}
