package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

func TestStatePaths(t *testing.T) {
	long := strings.Repeat("j", 120)
	cases := []struct {
		name          string
		k             jobKey
		state, record string
	}{
		{"plain", jobKey{"ml", "train"}, "steward/jobs/ml/train", "nomad/jobs/train"},
		{"dash and underscore", jobKey{"team-a", "my-job_2"}, "steward/jobs/team-a/my-job_2", "nomad/jobs/my-job_2"},
		{"dot escaped", jobKey{"ml", "web.v2"}, "steward/jobs/ml/web~2ev2", ""},
		{"slash escaped", jobKey{"ml", "a/b"}, "steward/jobs/ml/a~2fb", ""},
		{"unicode escaped", jobKey{"ml", "ünï"}, "steward/jobs/ml/~c3~bcn~c3~af", ""},
		{"too long: hashed", jobKey{"ml", long}, "steward/jobs/~~", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := statePath(tc.k)
			if !strings.HasPrefix(got, tc.state) || (!strings.Contains(got, "~~") && got != tc.state) {
				t.Errorf("statePath(%v) = %q, want %q", tc.k, got, tc.state)
			}
			if got := recordPath(tc.k.ID); got != tc.record {
				t.Errorf("recordPath(%q) = %q, want %q", tc.k.ID, got, tc.record)
			}
			k, err := stateKey(got, &JobState{Namespace: tc.k.Namespace, ID: tc.k.ID})
			if err != nil || k != tc.k {
				t.Errorf("stateKey(%q) = %v, %v; want %v", got, k, err, tc.k)
			}
		})
	}
}

// TestStateIdentityFromPath: which job a state entry is about comes from
// its path; content that names another job is not believed.
func TestStateIdentityFromPath(t *testing.T) {
	long := strings.Repeat("j", 120)
	cases := []struct {
		name    string
		path    string
		content JobState
		want    jobKey
		wantErr bool
	}{
		{"the path names the job, whatever the content says", "steward/jobs/ml/train", JobState{Namespace: "other", ID: "victim"},
			jobKey{"ml", "train"}, false},
		{"a hashed path believes content that hashes to it", statePath(jobKey{"ml", long}), JobState{Namespace: "ml", ID: long},
			jobKey{"ml", long}, false},
		{"a hashed path refuses content naming another job", statePath(jobKey{"ml", long}), JobState{Namespace: "other", ID: long},
			jobKey{}, true},
		{"a non-canonical escape is refused", "steward/jobs/ml/tr~61in", JobState{}, jobKey{}, true},
		{"no namespace part", "steward/jobs/train", JobState{Namespace: "ml", ID: "train"}, jobKey{}, true},
		{"another prefix", "steward/requests/ml/train", JobState{}, jobKey{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, err := stateKey(tc.path, &tc.content)
			if (err != nil) != tc.wantErr || k != tc.want {
				t.Errorf("stateKey(%q) = %v, %v; want %v (error %v)", tc.path, k, err, tc.want, tc.wantErr)
			}
		})
	}
}

// FuzzStatePath: every job gets a valid variable path that names it back;
// decoding never panics.
func FuzzStatePath(f *testing.F) {
	for _, s := range []string{"train", "web.v2", "~", "~2", "a/b~zz", ""} {
		f.Add("ml", s)
	}
	f.Fuzz(func(t *testing.T, ns, id string) {
		k := jobKey{ns, id}
		p := statePath(k)
		if !validVariablePath.MatchString(p) {
			t.Fatalf("statePath(%v) = %q is not a valid variable path", k, p)
		}
		if ns != "" && id != "" {
			if got, err := stateKey(p, &JobState{Namespace: ns, ID: id}); err != nil || got != k {
				t.Fatalf("stateKey(statePath(%v)) = %v, %v", k, got, err)
			}
		}
		if r := recordPath(id); r != "" && !validVariablePath.MatchString(r) {
			t.Fatalf("recordPath(%q) = %q is not a valid variable path", id, r)
		}
		_, _ = decodeState(map[string]string{"state": id}) // never panics
		_, _ = requestJob(requestPrefix+id, map[string]string{"job": ns})
	})
}

// Idle timers survive a restart: an allocation idle for a minute or more
// is saved with since when (one write as it goes idle, none as it stays
// idle), and a new controller resumes its timer from there; a GPU that
// flickers is never saved, and one busy again is dropped.
func TestIdleTimers(t *testing.T) {
	nbJob := job("ml", "nb", "interactive", 60, 1, 1)
	a := alloc("a1-5678-90ab", "nb")
	tests := []struct {
		name      string
		utils     []float64 // one sample every 10 s, the last at t0
		wantSince time.Duration
		want      bool
	}{
		{"idle for 20 minutes", repeat(2, 121), -20 * time.Minute, true},
		{"idle for 30 s: not saved yet", append(repeat(90, 10), repeat(2, 4)...), 0, false},
		{"busy again", append(repeat(2, 60), 95), 0, false},
		{"idle again after a busy spell", append(append(repeat(2, 60), 95), repeat(3, 7)...), -time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			for i, u := range tt.utils {
				c.usage.add(a.ID, engine.Sample{At: t0.Add(time.Duration(i-len(tt.utils)+1) * 10 * time.Second), Util: u})
			}
			r := roundWith([]*ObservedJob{nbJob}, []ObservedAlloc{a})
			c.flush(context.Background(), r)
			st := c.states()[jobKey{"ml", "nb"}]
			idle, ok := IdleSince{}, false
			if st != nil {
				idle, ok = st.Idle[shortID(a.ID)]
			}
			if ok != tt.want || ok && !idle.Since.Equal(t0.Add(tt.wantSince)) {
				t.Fatalf("saved idle timer %+v (%v), want since %s (%v)", idle, ok, tt.wantSince, tt.want)
			}
			if !ok {
				return
			}
			puts := len(f.callsMatching("put "))
			c.usage.add(a.ID, engine.Sample{At: t0.Add(10 * time.Second), Util: 2.5})
			c.flush(context.Background(), r)
			if n := len(f.callsMatching("put ")); n != puts {
				t.Errorf("staying idle wrote the state again (%d writes, then %d)", puts, n)
			}

			c2 := testController(t, f)
			if err := c2.loadStates(context.Background()); err != nil {
				t.Fatal(err)
			}
			c2.usage.setObservation(r.obs, nil)
			c2.usage.add(a.ID, engine.Sample{At: t0.Add(20 * time.Second), Util: 2})
			since, idleNow := engine.IdleSince(c2.usage.history(a.ID), 10)
			if !idleNow || !since.Equal(t0.Add(tt.wantSince)) {
				t.Errorf("after a restart: idle since %s (%v), want %s", since.Sub(t0), idleNow, tt.wantSince)
			}
		})
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestStateEncodeRoundTrip(t *testing.T) {
	st := &JobState{Namespace: "ml", ID: "train", Preemptions: []time.Time{t0},
		Held:     map[string]*Held{"work": {Count: 1, Original: 2, Since: t0, Rule: "reclaim", Index: 7}},
		Draining: []*Drain{{Group: "work", Allocs: []string{"a1"}, Deadline: t0.Add(time.Minute), Requeue: true, Kind: "preempt"}}}
	items, err := st.encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeState(items)
	if err != nil {
		t.Fatal(err)
	}
	if back.Held["work"].Index != 7 || back.draining("a1") == nil || back.heldCount() != 1 || !back.Preemptions[0].Equal(t0) {
		t.Fatalf("round trip lost state: %+v", back)
	}
	if _, err := decodeState(map[string]string{"state": "{"}); err == nil {
		t.Fatal("bad JSON decoded")
	}
}
