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

	"github.com/gpu-steward/steward/policy/engine"
)

// Each bound of bounds.go flooded by one tenant, with enforcement going
// on for the others.

// floodRequests leaves n request variables in a namespace: ghosts names
// jobs that do not run (known from the path alone), hashed ones need a
// read to learn their job.
func floodRequests(f *fakeNomad, ns string, ghosts, hashed int) {
	for i := range ghosts {
		f.vars[fmt.Sprintf("%s:%sghost-%05d", ns, requestPrefix, i)] = map[string]string{"action": "pause", "job": "ghost"}
	}
	for i := range hashed {
		f.vars[fmt.Sprintf("%s:%s~~%040x", ns, requestPrefix, i)] = map[string]string{"action": "pause", "job": "x"}
	}
}

// A tenant's 2,000 request variables wait their turn in its namespace:
// another namespace's pause is carried out in the first round, and no
// round reads or deletes more than requestsPerNamespace of the flood.
func TestRequestFloodWaitsItsTurn(t *testing.T) {
	cases := []struct {
		name           string
		ghosts, hashed int
	}{
		{"requests for jobs that do not run", 2000, 0},
		{"requests whose path hides the job", 0, 2000},
		{"both", 1000, 1000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			floodRequests(f, "flood", tc.ghosts, tc.hashed)
			k := jobKey{"ml", "train"}
			f.vars["ml:"+requestPath("train")] = RequestItems(Request{Action: "pause", Job: "train"})
			f.index["ml:"+requestPath("train")] = 1
			r := roundWith([]*ObservedJob{job("ml", "train", "training", 40, 1, 1)}, []ObservedAlloc{alloc("a1", "train")})
			c.applyRequests(context.Background(), r)
			if st := c.states()[k]; st == nil || !st.Paused {
				t.Fatalf("ml/train not paused in the first round beside the flood: %+v", st)
			}
			handled := f.gets["flood"] + len(f.callsMatching("delete flood "))
			if f.gets["flood"] > requestsPerNamespace || len(f.callsMatching("delete flood ")) > requestsPerNamespace {
				t.Errorf("the flood's namespace cost %d reads and %d deletes in one round, more than %d",
					f.gets["flood"], len(f.callsMatching("delete flood ")), requestsPerNamespace)
			}
			if handled == 0 {
				t.Errorf("the flood is never drained")
			}
			if r.wakeAt.IsZero() {
				t.Errorf("requests left waiting, and no early round asked for")
			}
		})
	}
}

// Requests in 40 namespaces, on a Nomad that answers each read in 20 ms:
// the round spends about requestBudget on them, and reads no more than
// requestsPerRound, whatever is left.
func TestRequestsWithinRoundBudget(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	for i := range 40 {
		floodRequests(f, fmt.Sprintf("ns-%02d", i), 0, 40)
	}
	f.getDelay = 20 * time.Millisecond
	r := roundWith(nil, nil)
	start := time.Now()
	c.applyRequests(context.Background(), r)
	took := time.Since(start)
	reads := 0
	for _, n := range f.gets {
		reads += n
	}
	t.Logf("%d reads in %s", reads, took.Round(time.Millisecond))
	if took > requestBudget+200*time.Millisecond {
		t.Errorf("requests took %s of the round, more than %s", took, requestBudget)
	}
	if reads > requestsPerRound || reads == 0 {
		t.Errorf("%d reads: want between 1 and %d", reads, requestsPerRound)
	}
}

// requestTurns takes each namespace's first requests in turn, so that a
// namespace sorting first cannot use up the round's share.
func TestRequestTurnsRoundRobin(t *testing.T) {
	var refs []VarRef
	for i := range 100 {
		refs = append(refs, VarRef{Namespace: "a-flood", Path: fmt.Sprintf("p%03d", i)})
	}
	refs = append(refs, VarRef{Namespace: "b", Path: "p"}, VarRef{Namespace: "c", Path: "p"})
	left := 0
	got := requestTurns(refs, 4, &left)
	if len(got) != 6 || got[1].Namespace != "b" || got[2].Namespace != "c" || left != 96 {
		t.Errorf("turns %+v, %d left: want a, b, c first, 4 of a in all, 96 left", got, left)
	}
}

// Only Steward's meta keys are kept, each cut: a job with 2,000 meta keys
// and a 60 KB tier costs a few hundred bytes in every copy's cache, and the
// tier is refused as any unknown one, with the cut value quoted.
func TestOnlyStewardMetaKept(t *testing.T) {
	j := apiJob("flood", "fat", "training", 40, 1, 1)
	for i := range 2000 {
		j.Meta[fmt.Sprintf("junk-%04d", i)] = strings.Repeat("x", 1000)
	}
	j.Meta["steward.tier"] = strings.Repeat("t", 60<<10)
	j.Meta["steward.gang"] = "true"
	oj := toObservedJob(j)
	size := 0
	for k, v := range oj.Meta {
		size += len(k) + len(v)
		if !strings.HasPrefix(k, "steward.") {
			t.Errorf("kept meta key %q", k)
		}
	}
	if len(oj.Meta) != 2 || size > 2*metaValueMax+64 {
		t.Errorf("kept %d keys, %d bytes: want steward.tier and steward.gang, under %d bytes", len(oj.Meta), size, 2*metaValueMax+64)
	}
	if oj.Meta["steward.gang"] != "true" {
		t.Errorf("a short Steward value was changed: %q", oj.Meta["steward.gang"])
	}
	set := testPolicy(t).ResolveJob("flood", oj.Meta)
	if len(set.Problems) == 0 || set.Tier != "training" && set.Tier == strings.Repeat("t", 60<<10) {
		t.Errorf("the cut tier was not refused: %+v", set)
	}
	for _, p := range set.Problems {
		if len(p) > 2*metaValueMax+200 {
			t.Errorf("a problem quotes %d bytes", len(p))
		}
	}
}

// Records written, and record errors, are forgotten with their jobs: a
// tenant that churns 5,000 job IDs leaves nothing behind.
func TestRecordsPrunedWhenJobsGo(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f, withConfig(func(cfg *Config) { cfg.JobRecords = true }))
	for i := range 5000 {
		k := jobKey{"flood", fmt.Sprintf("churn-%05d", i)}
		c.pub.records[k] = strings.Repeat("r", 200)
		c.pub.recordErr[k] = "permission denied"
		c.stateErr[k] = "too big"
	}
	keep := jobKey{"ml", "train"}
	c.pub.records[keep] = "{}"
	r := roundWith([]*ObservedJob{job("ml", "train", "training", 40, 1, 1)}, nil)
	c.pub.writeRecords(context.Background(), r, c.pol)
	if len(c.pub.recordErr) != 0 || len(c.stateErr) != 0 {
		t.Errorf("%d record errors and %d state errors of gone jobs kept", len(c.pub.recordErr), len(c.stateErr))
	}
	if len(c.pub.records) > 1 {
		t.Errorf("%d records of gone jobs kept", len(c.pub.records)-1)
	}
	if c.pub.records[keep] == "" {
		t.Errorf("the record of a job that runs was forgotten")
	}
}

// A 70 KB job ID: its hold is saved (the ID as its hash), every other
// job's state is saved beside it, and a restarted controller finds the
// hold again once Nomad shows the job.
func TestHugeJobIDStateSaved(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f)
	huge := jobKey{"flood", strings.Repeat("j", 70<<10)}
	st := c.state(huge)
	st.hold("work", 1, 1, "limit", t0, 10)
	st.note(StatusHeld, engine.Reason{Rule: engine.RuleLimit, Message: "tenant flood over its limit: " + huge.String()}, t0)
	other := c.state(jobKey{"ml", "train"})
	other.hold("work", 1, 1, "capacity", t0, 10)
	other.note(StatusHeld, engine.Reason{Rule: engine.RuleCapacity, Message: "full"}, t0)
	r := roundWith([]*ObservedJob{job("ml", "train", "training", 40, 1, 1)}, nil)
	c.flush(context.Background(), r)
	if r.failed != 0 {
		t.Errorf("%d saves failed", r.failed)
	}
	items := f.vars["steward:"+statePath(huge)]
	if items == nil {
		t.Fatalf("the huge job's hold was not saved")
	}
	if n := len(items["state"]); n > 8<<10 {
		t.Errorf("its state is %d bytes", n)
	}
	if f.vars["steward:"+statePath(jobKey{"ml", "train"})] == nil {
		t.Errorf("another job's state was not saved")
	}

	c2 := testController(t, f)
	if err := c2.loadStates(context.Background()); err != nil {
		t.Fatal(err)
	}
	hj := job("flood", huge.ID, "training", 40, 1, 1)
	c2.resolveStates(roundWith([]*ObservedJob{hj}, nil).obs)
	back := c2.states()[huge]
	if back == nil || !back.holds("work") {
		t.Fatalf("the restarted controller lost the huge job's hold: %+v", back)
	}
	if err := c2.save(context.Background(), back); err != nil {
		t.Errorf("saving it again: %v", err)
	}
	if got := f.callsMatching("put steward"); len(got) != 2 {
		t.Errorf("writes %d: the reloaded state was written again unchanged", len(got))
	}
}

// A state that cannot fit is refused before Nomad is asked, with its size
// and the limit in the job's record; other jobs' states are saved, and the
// round does not fail for it (no retry could write it).
func TestOversizedStateRefusedInRecord(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f, withConfig(func(cfg *Config) { cfg.JobRecords = true }))
	big := jobKey{"ml", "big"}
	st := c.state(big)
	st.hold("work", 1, 1, "capacity", t0, 10)
	st.note(StatusHeld, engine.Reason{Rule: engine.RuleCapacity, Message: "full"}, t0)
	for i := range 3000 { // set aside for a beneficiary with a long name, on 3,000 nodes
		st.Marks = append(st.Marks, Mark{Node: fmt.Sprintf("%08x", i), GPUs: 1, For: "ml/" + strings.Repeat("b", 400), Until: t0.Add(time.Hour),
			Group: fmt.Sprintf("g%d", i)})
	}
	other := c.state(jobKey{"ml", "train"})
	other.hold("work", 1, 1, "capacity", t0, 10)
	other.note(StatusHeld, engine.Reason{Rule: engine.RuleCapacity, Message: "full"}, t0)
	r := roundWith([]*ObservedJob{job("ml", "big", "training", 40, 1, 1), job("ml", "train", "training", 40, 1, 1)}, nil)
	c.flush(context.Background(), r)
	if r.failed != 0 {
		t.Errorf("the round counts %d failures for a state no retry can write", r.failed)
	}
	if f.vars["steward:"+statePath(big)] != nil {
		t.Errorf("the oversized state was written")
	}
	if f.vars["steward:"+statePath(jobKey{"ml", "train"})] == nil {
		t.Errorf("another job's state was not saved beside it")
	}
	c.pub.writeRecords(context.Background(), r, c.pol)
	rec := f.vars["ml:nomad/jobs/big"]
	want := fmt.Sprintf("over the %d Steward writes", stateMaxBytes)
	if rec == nil || !strings.Contains(rec["steward_state_error"], want) || !strings.Contains(rec["steward_state_error"], "bytes") {
		t.Errorf("the job's record does not say why its state is not saved: %q", rec["steward_state_error"])
	}
}

// One tenant's 60 KB values (a tier, a job ID) are cut where the status
// quotes them: the status stays under its limit, every tenant's line is
// kept, and what was cut says so.
func TestStatusQuotesTrimmed(t *testing.T) {
	huge := strings.Repeat("j", 70<<10)
	cases := []struct {
		name string
		fill func(s *Status)
	}{
		{"a 60 KB bad tier value", func(s *Status) {
			s.Warnings = append(s.Warnings, JobWarning{Job: "flood/x", Problem: "steward.tier " + strings.Repeat("t", 60<<10) + " is no tier"})
		}},
		{"a 70 KB job ID held and deciding", func(s *Status) {
			s.Held = append(s.Held, HeldStatus{Job: "flood/" + huge, Group: "work", Reason: "over its limit: flood/" + huge})
			s.Decisions = append(s.Decisions, Decision{Job: "flood/" + huge, Reason: "hold flood/" + huge})
			s.Queue = append(s.Queue, QueueEntry{Job: "flood/" + huge, ID: huge, Reason: "waits"})
		}},
		{"2,000 warnings of 1 KB each", func(s *Status) {
			for i := range 2000 {
				s.Warnings = append(s.Warnings, JobWarning{Job: fmt.Sprintf("flood/j%04d", i), Problem: strings.Repeat("p", 1000)})
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := Status{Updated: t0, Policy: "p", Tenants: []TenantStatus{{Tenant: "ml", Limit: 4}, {Tenant: "flood", Limit: 2}}}
			tc.fill(&s)
			full := fitStatus(&s, statusMaxBytes)
			if len(full) > statusMaxBytes {
				t.Fatalf("%d bytes, over %d", len(full), statusMaxBytes)
			}
			var back Status
			if err := json.Unmarshal(full, &back); err != nil {
				t.Fatal(err)
			}
			if len(back.Tenants) != 2 {
				t.Errorf("tenants lost: %+v", back.Tenants)
			}
			if !strings.Contains(string(full), "bytes cut)") && back.Trimmed == "" {
				t.Errorf("nothing says what was cut")
			}
			t.Logf("%d bytes; trimmed %q", len(full), back.Trimmed)
		})
	}
}

// Whole rounds over the fake cluster while one tenant floods: 2,000
// request variables, a job with 2,000 meta keys and a 60 KB tier, and a
// job whose ID is 70 KB. Another tenant's preemption goes exactly as
// without the flood (TestWholeRound's writes), no round reads more than
// requestsPerNamespace of the flood, and the status is published in every
// round that changed it, within its limit.
func TestTenantFloodsDoNotStarveRound(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	floodRequests(f, "flood", 1000, 1000)
	fat := apiJob("flood", "fat", "training", 40, 1, 0)
	for i := range 2000 {
		fat.Meta[fmt.Sprintf("junk-%04d", i)] = strings.Repeat("x", 1000)
	}
	fat.Meta["steward.tier"] = strings.Repeat("t", 60<<10)
	huge := strings.Repeat("j", 70<<10)
	long := apiJob("flood", huge, strings.Repeat("u", 60<<10), 40, 1, 0)
	f.cl().jobs["flood/fat"], f.cl().jobs["flood/"+huge] = fat, long
	r := newRoundRunner(t, f)
	for _, step := range preemptionSteps {
		f.mu.Lock()
		f.gets = nil
		f.mu.Unlock()
		got, err := r.round(step.after)
		if err != nil {
			t.Fatalf("round at %s: %v", step.after, err)
		}
		if !slices.Equal(got, step.want) {
			t.Fatalf("round at %s: writes\n%q\nwant\n%q", step.after, got, step.want)
		}
		f.mu.Lock()
		reads, deletes := f.gets["flood"], 0
		for _, call := range f.calls {
			if strings.HasPrefix(call, "delete flood "+requestPrefix) {
				deletes++
			}
		}
		f.mu.Unlock()
		if reads > requestsPerNamespace || deletes > requestsPerNamespace {
			t.Errorf("round at %s: %d reads and %d deletes of the flood's requests, more than %d", step.after, reads, deletes, requestsPerNamespace)
		}
		status := f.vars["steward:"+StatusPath]["status"]
		if status == "" || len(status) > statusMaxBytes {
			t.Fatalf("round at %s: status %d bytes (0: never published)", step.after, len(status))
		}
	}
	if !strings.Contains(f.vars["steward:"+StatusPath]["status"], "bytes cut)") {
		t.Errorf("the status does not say that it cut the flood's values")
	}
}

// A waiting job whose ID is 70 KB, which a preemption is for: the
// victim's state names it by a hash (compactRef), so the preemption goes
// exactly as for any job (TestWholeRound's writes), across a restart of the
// controller between the signal and the stop too, and the round never
// fails for it.
func TestHugeBeneficiaryIDPreemptsAsAnyJob(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			f := newFakeNomad()
			preemptionCluster(f)
			huge := strings.Repeat("n", 70<<10)
			cl := f.cl()
			nb := cl.jobs["ml/nb"]
			nb.ID = &huge
			delete(cl.jobs, "ml/nb")
			delete(cl.summary, "ml/nb")
			cl.jobs["ml/"+huge] = nb
			ev, sum := apiBlockedEval(nb, 1, t0.Add(-time.Second))
			cl.evals, cl.summary["ml/"+huge] = []*api.Evaluation{ev}, sum
			r := newRoundRunner(t, f)
			steps := preemptionSteps
			if restart {
				// The signal's time is not saved by itself: the restarted
				// controller signals again, with a whole grace, and
				// finishes the preemption a grace later.
				steps = append(slices.Clone(preemptionSteps[:2]), roundStep{signalDelay + 2*time.Minute, []string{"signal ml a-train SIGUSR1"}})
				for _, s := range preemptionSteps[2:] {
					steps = append(steps, roundStep{s.after + 2*time.Minute, s.want})
				}
			}
			for i, step := range steps {
				if restart && i == 2 {
					r.restart()
				}
				got, err := r.round(step.after)
				if err != nil {
					t.Fatalf("round at %s: %v", step.after, err)
				}
				var want []string
				for _, w := range step.want {
					want = append(want, strings.ReplaceAll(w, "ml/nb", "ml/"+huge))
				}
				// (Reasons read back are cut to reasonMax: the
				// restarted controller's messages are, after 2 KiB.)
				if !slices.Equal(prefixes(got), prefixes(want)) {
					t.Fatalf("round at %s: writes\n%q\nwant\n%q", step.after, prefixes(got), prefixes(want))
				}
				if h := r.c.health; h.LastError != "" {
					t.Errorf("round at %s failed: %q", step.after, h.LastError)
				}
				for k, items := range f.vars {
					if strings.HasPrefix(k, "steward:"+statePrefix) && len(items["state"]) > 8<<10 {
						t.Errorf("round at %s: %s is %d bytes", step.after, clip(k, 80), len(items["state"]))
					}
				}
			}
			if r.running("ml", huge) != 1 || r.running("ml", "train") != 0 {
				t.Errorf("end: the long-ID job runs %d, the victim %d", r.running("ml", huge), r.running("ml", "train"))
			}
			// The victim, preempted, now waits: its record waits for its
			// first place and forecast when a forecast that includes it
			// is still running as the round publishes (recordplace.go), a
			// race the last round may lose. The next round, the forecast
			// done, writes it, as a live controller's next round does.
			r.c.awaitForecast(t)
			if _, err := r.round(steps[len(steps)-1].after + placeWait); err != nil {
				t.Fatalf("the round after: %v", err)
			}
			// The victim's record is written, its reason cut.
			rec := f.vars["ml:nomad/jobs/train"]
			if rec == nil || rec["steward_state"] != StatusPreempted || len(rec["steward_reason"]) > reasonMax {
				t.Errorf("the victim's record: state %q, reason of %d bytes", rec["steward_state"], len(rec["steward_reason"]))
			}
		})
	}
}

func prefixes(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = s[:min(len(s), 1024)]
	}
	return out
}
