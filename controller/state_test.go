package controller

import (
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

func TestCompactUsage(t *testing.T) {
	var in []engine.Sample
	for s := 0; s < 180; s += 10 { // 3 minutes, one sample every 10 s
		util := 2.0
		if s == 70 {
			util = 95 // one busy sample in the second minute
		}
		in = append(in, engine.Sample{At: t0.Add(time.Duration(s) * time.Second), Util: util})
	}
	out := compactUsage(in)
	if len(out) != 3 || out[0].Util != 2 || out[1].Util != 95 || out[2].Util != 2 {
		t.Fatalf("compacted %+v", out)
	}
	// A compacted history never makes work idle for longer than it was.
	since, ok := engine.IdleSince(out, 10)
	if raw, _ := engine.IdleSince(in, 10); !ok || since.Before(raw.Truncate(time.Minute)) {
		t.Fatalf("idle since %s from compacted, %s from raw", since, raw)
	}
	var long []engine.Sample
	for m := 0; m < 500; m++ {
		long = append(long, engine.Sample{At: t0.Add(time.Duration(m) * time.Minute)})
	}
	if got := compactUsage(long); len(got) != usageBuckets || !got[len(got)-1].At.Equal(long[499].At) {
		t.Fatalf("kept %d buckets, want the newest %d", len(got), usageBuckets)
	}
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
