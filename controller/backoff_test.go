package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// nomadStatus is an error with Nomad's HTTP status, as
// api.UnexpectedResponseError carries it.
type nomadStatus struct {
	code int
	text string
}

func (e nomadStatus) Error() string {
	return fmt.Sprintf("Unexpected response code: %d (%s)", e.code, e.text)
}
func (e nomadStatus) StatusCode() int { return e.code }

// TestRefusedWriteBacksOff (issue 29, item 5): Nomad refuses, with a 403,
// the scale that holds ml/nb while ml/train's GPUs are freed for it. The
// round goes on for everyone else (ml/x's priority is reset in the same
// round, ml/train is signalled in the next) and does not fail; the job's
// record says what Nomad said, under a key of its own, and the decision
// that stands is kept; the status's recent decisions do not fill with the
// refusal; the write is not tried again before its backoff, and once it
// is, and Nomad takes it, the record forgets the refusal.
func TestRefusedWriteBacksOff(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	cl := f.cl()
	cl.nodes = append(cl.nodes, apiNode("n2", 1))
	x := apiJob("ml", "x", "training", 90, 1, 1)
	cl.jobs["ml/x"] = x
	cl.allocs = append(cl.allocs, apiAlloc("a-x", x, "n2", []string{"n2-gpu0"}, t0.Add(-time.Hour)))
	f.fail["scale ml/nb"] = nomadStatus{403, "Permission denied"}
	r := newRoundRunner(t, f)
	record := func(id string) map[string]string {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.vars["ml:nomad/jobs/"+id]
	}
	type step struct {
		name     string
		after    time.Duration
		allow    bool     // Nomad takes the scale from this round on
		want     []string // writes the round must make
		notWant  string   // a write the round must not make
		writeErr string   // in ml/nb's steward_write_error ("": none)
	}
	steps := []step{
		{name: "refused: the others are acted on", after: 0,
			want:     []string{"scale ml/nb work 0: Steward holds 1 allocation", "priority ml/x 40"},
			writeErr: "Nomad refused Steward's count of group work (1 times): Unexpected response code: 403 (Permission denied); the controller's ACL token lacks \"scale-job\"; tried again after 10s"},
		{name: "backed off: the preemption goes on", after: signalDelay,
			want: []string{"signal ml a-train SIGUSR1"}, notWant: "scale ml/nb", writeErr: "(1 times)"},
		{name: "still backed off", after: 5 * time.Second, notWant: "scale ml/nb", writeErr: "(1 times)"},
		{name: "tried again after its backoff, refused again: twice as long", after: refusedFirst,
			want: []string{"scale ml/nb work 0"}, writeErr: "(2 times): Unexpected response code: 403 (Permission denied); the controller's ACL token lacks \"scale-job\"; tried again after 20s"},
		{name: "within the longer backoff", after: refusedFirst + 15*time.Second, notWant: "scale ml/nb", writeErr: "(2 times)"},
		{name: "taken: the record forgets the refusal", after: 3*refusedFirst + time.Second, allow: true,
			want: []string{"scale ml/nb work 0"}},
	}
	for _, s := range steps {
		if s.allow {
			delete(f.fail, "scale ml/nb")
		}
		writes, err := r.round(s.after)
		if err != nil {
			t.Fatalf("%s: the round failed: %v", s.name, err)
		}
		if h := r.c.Health(); h.LastError != "" {
			t.Errorf("%s: /healthz would be 503: %q", s.name, h.LastError)
		}
		for _, w := range s.want {
			if !slices.ContainsFunc(writes, func(got string) bool { return strings.HasPrefix(got, w) }) {
				t.Errorf("%s: no write %q in %q", s.name, w, writes)
			}
		}
		if s.notWant != "" && slices.ContainsFunc(writes, func(got string) bool { return strings.HasPrefix(got, s.notWant) }) {
			t.Errorf("%s: %q tried again within its backoff: %q", s.name, s.notWant, writes)
		}
		rec := record("nb")
		if got := rec["steward_write_error"]; s.writeErr == "" && got != "" || !strings.Contains(got, s.writeErr) {
			t.Errorf("%s: steward_write_error %q, want %q", s.name, got, s.writeErr)
		}
		// The decision that stands is the record's reason, not the
		// refusal.
		if !strings.Contains(rec["steward_reason"], "GPUs are being freed for it") {
			t.Errorf("%s: steward_reason %q", s.name, rec["steward_reason"])
		}
	}
	if record("x")["steward_priority"] != "40" {
		t.Errorf("ml/x record %v: its priority reset is missing", record("x"))
	}
	for _, d := range r.c.decisions.list() {
		if d.Error != "" {
			t.Errorf("a refused write in the recent decisions: %+v", d)
		}
	}
}

// TestRefusedReregistrationNamesVolumeRight: a 403 on re-registering a job
// that mounts volumes names the volume rights Nomad checks (not
// submit-job, which the token has); other writes name their capability.
func TestRefusedReregistrationNamesVolumeRight(t *testing.T) {
	vol := func(vs ...VolumeUse) *ObservedJob {
		j := job("ml", "train", "training", 100, 1, 1)
		g := j.Groups["work"]
		g.Volumes = vs
		j.Groups["work"] = g
		return j
	}
	tests := []struct {
		name  string
		job   *ObservedJob
		write string
		code  int
		want  string
	}{
		{"priority of a job with a host volume", vol(VolumeUse{Type: "host", Source: "data"}), "priority", 403,
			`host_volume "data" "mount-readwrite" (re-registering a job with volumes needs its submitter's volume rights)`},
		{"a read-only host volume", vol(VolumeUse{Type: "host", Source: "models", ReadOnly: true}), "move", 403,
			`host_volume "models" "mount-readonly"`},
		{"a CSI volume", vol(VolumeUse{Type: "csi", Source: "scratch"}), "priority", 403,
			`"csi-mount-volume" in namespace ml and plugin "read"`},
		{"a scale may be a registration (an active deployment)", vol(VolumeUse{Type: "host", Source: "data"}), "scale work", 403,
			`"scale-job", or host_volume "data" "mount-readwrite"`},
		{"priority of a job without volumes", vol(), "priority", 403, `"submit-job"`},
		{"a stop", vol(VolumeUse{Type: "host", Source: "data"}), "stop", 403, `"alloc-lifecycle"`},
		{"not a 403: no right to name", vol(VolumeUse{Type: "host", Source: "data"}), "priority", 400, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := missingRight(tc.job, tc.write, tc.code)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("missingRight = %q, want %q", got, tc.want)
			}
		})
	}
	// The volumes come from the job as Nomad returns it.
	j := apiJob("ml", "train", "training", 100, 1, 1)
	j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"d": {Name: "d", Type: "host", Source: "data"}}
	if vs := toObservedJob(j).Groups["work"].Volumes; !slices.Equal(vs, []VolumeUse{{Type: "host", Source: "data"}}) {
		t.Errorf("observed volumes %+v", vs)
	}
}

// TestOnlyEffectivePreemptionsCount (issue 29, item 8): a preemption whose
// scale Nomad refused or failed does not count toward the eviction cap
// (counted, a job whose scale kept failing reached the cap and was exempt
// from its tenant's limit for the hour); it counts once Nomad shows the
// lower count, and at once when the scale is taken.
func TestOnlyEffectivePreemptionsCount(t *testing.T) {
	ctx := t.Context()
	k := jobKey{"ml", "train"}
	train := func(count int) *ObservedJob { return job("ml", "train", "training", 40, count, 1) }
	for _, tc := range []struct {
		name string
		fail error
	}{
		{"Nomad refuses the scale (403)", nomadStatus{403, "Permission denied"}},
		{"the scale fails (503)", nomadStatus{503, "Service Unavailable"}},
		{"the scale is taken", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			if tc.fail != nil {
				f.fail["scale ml/train"] = tc.fail
			}
			d := &Drain{Group: "work", Allocs: []string{"a1"}, Kind: "preempt", Requeue: true, Rule: "priority", Reason: "for ml/nb"}
			st := &JobState{Namespace: "ml", ID: "train", Draining: []*Drain{d}}
			c.states()[k] = st
			err := c.drains.finishDrain(ctx, roundWith([]*ObservedJob{train(1)}, []ObservedAlloc{alloc("a1", "train")}), st, d)
			if tc.fail == nil {
				if err != nil || len(st.Preemptions) != 1 || !st.Held["work"].Evicts.IsZero() {
					t.Fatalf("taken: err %v, preemptions %v, held %+v: want it counted at once", err, st.Preemptions, st.Held["work"])
				}
				return
			}
			if err == nil || len(st.Preemptions) != 0 || st.Held["work"].Evicts.IsZero() {
				t.Fatalf("err %v, preemptions %v, held %+v: want it not counted, waiting in its hold", err, st.Preemptions, st.Held["work"])
			}
			// Nomad shows the lower count (the hold applied later): it counts.
			delete(f.fail, "scale ml/train")
			c.syncHolds(ctx, roundWith([]*ObservedJob{train(0)}, nil))
			if len(st.Preemptions) != 1 || !st.Held["work"].Evicts.IsZero() {
				t.Fatalf("applied: preemptions %v, held %+v: want it counted now", st.Preemptions, st.Held["work"])
			}
		})
	}
}

// TestWriteToPurgedJobNotBackedOff (issue 36): the job Steward resumes was
// purged by its owner in the same moment, and Nomad answers 404. That is
// no refusal to back off: backed off, the owner's job registered again
// under the same ID waited 10 s for its next write (a preemption, in the
// benchmark). The round does not fail, nothing is recorded against the
// job, and the next round writes at once.
func TestWriteToPurgedJobNotBackedOff(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	f.fail["scale ml/nb"] = nomadStatus{404, `job "nb" not found`}
	r := newRoundRunner(t, f)
	steps := []struct {
		name  string
		after time.Duration
	}{
		{"the write meets a purged job", 0},
		{"the next round writes again at once", time.Second},
	}
	for _, s := range steps {
		writes, err := r.round(s.after)
		if err != nil {
			t.Fatalf("%s: the round failed: %v", s.name, err)
		}
		if h := r.c.Health(); h.LastError != "" {
			t.Errorf("%s: /healthz would be 503: %q", s.name, h.LastError)
		}
		if !slices.ContainsFunc(writes, func(got string) bool { return strings.HasPrefix(got, "scale ml/nb") }) {
			t.Errorf("%s: no write to ml/nb in %q", s.name, writes)
		}
		if len(r.c.writes.refused) != 0 {
			t.Errorf("%s: backed off: %v", s.name, r.c.writes.refused)
		}
		f.mu.Lock()
		rec := f.vars["ml:nomad/jobs/nb"]
		f.mu.Unlock()
		if got := rec["steward_write_error"]; got != "" {
			t.Errorf("%s: steward_write_error %q", s.name, got)
		}
	}
}
