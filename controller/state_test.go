package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

func TestStatePaths(t *testing.T) {
	cases := []struct{ id, state, record string }{
		{"train", "steward/jobs/train", "nomad/jobs/train"},
		{"my-job_2", "steward/jobs/my-job_2", "nomad/jobs/my-job_2"},
		{"web.v2", "steward/jobs/web~2ev2", ""},
		{"a/b", "steward/jobs/a~2fb", ""},
		{"ünï", "steward/jobs/~c3~bcn~c3~af", ""},
	}
	for _, tc := range cases {
		if got := statePath(tc.id); got != tc.state {
			t.Errorf("statePath(%q) = %q, want %q", tc.id, got, tc.state)
		}
		if got := recordPath(tc.id); got != tc.record {
			t.Errorf("recordPath(%q) = %q, want %q", tc.id, got, tc.record)
		}
		if got := unescapePath(escapePath(tc.id)); got != tc.id {
			t.Errorf("round trip of %q gave %q", tc.id, got)
		}
	}
}

func FuzzStatePath(f *testing.F) {
	for _, s := range []string{"train", "web.v2", "~", "~2", "a/b~zz", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		p := statePath(id)
		if !validVariablePath.MatchString(p) {
			t.Fatalf("statePath(%q) = %q is not a valid variable path", id, p)
		}
		if !strings.HasPrefix(p, statePrefix+"~~") {
			if got := unescapePath(p[len(statePrefix):]); got != id {
				t.Fatalf("round trip of %q gave %q", id, got)
			}
		}
		if r := recordPath(id); r != "" && !validVariablePath.MatchString(r) {
			t.Fatalf("recordPath(%q) = %q is not a valid variable path", id, r)
		}
		_, _ = decodeState(map[string]string{"state": id}) // never panics
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
	if back.Held["work"].Index != 7 || !back.draining("a1") || back.heldCount() != 1 || !back.Preemptions[0].Equal(t0) {
		t.Fatalf("round trip lost state: %+v", back)
	}
	if _, err := decodeState(map[string]string{"state": "{"}); err == nil {
		t.Fatal("bad JSON decoded")
	}
}
