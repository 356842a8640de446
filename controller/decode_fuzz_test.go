package controller

import (
	"errors"
	"strings"
	"testing"
)

// Fuzzing what a controller reads back from Nomad: state entries and
// pause/resume requests are variables, and whoever can write a variable
// there chooses their path and content. Decoding must never panic, and a
// path is believed only if it is exactly the one Steward itself writes for
// the job it names (so no two paths name one job, and no content renames
// a path's job).

// FuzzDecodeState: decodeState and stateKey over any path and content.
func FuzzDecodeState(f *testing.F) {
	for _, seed := range []struct{ path, raw string }{
		{"steward/jobs/ml/train", `{"namespace":"ml","id":"train","held":{"work":{"count":1,"original":1}}}`},
		{"steward/jobs/ml/train", `{"namespace":"rnd","id":"victim"}`},
		{"steward/jobs/a~2fb/c~7e", `{}`},
		{"steward/jobs/A~2Fb/c", `{}`},
		{"steward/jobs/~~" + strings.Repeat("0", 40), `{"namespace":"ml","id":"x"}`},
		{"steward/jobs/train", `{"namespace":"ml","id":"train"}`}, // the old layout
		{"steward/jobs/ml/", `null`},
		{"steward/jobs/~zz/~", `{"draining":[{"allocs":["a"],"signal":"SIGKILL"}]}`},
		{"nomad/jobs/train", `{"held":null}`},
	} {
		f.Add(seed.path, seed.raw)
	}
	f.Fuzz(func(t *testing.T, path, raw string) {
		st, decodeErr := decodeState(map[string]string{"state": raw})
		if decodeErr != nil {
			if st != nil {
				t.Fatalf("decodeState failed (%v) and returned a state", decodeErr)
			}
			st = &JobState{}
		}
		if st == nil {
			t.Fatalf("decodeState(%q) returned no state and no error", raw)
		}
		k, err := stateKey(path, st)
		if err != nil {
			return
		}
		if k.Namespace == "" || k.ID == "" {
			t.Fatalf("stateKey(%q) accepted an empty job %v", path, k)
		}
		if got := statePath(k); got != path {
			t.Fatalf("stateKey(%q) = %v, whose path is %q: the path does not round-trip", path, k, got)
		}
		if !validVariablePath.MatchString(path) {
			t.Fatalf("stateKey accepted %q, which Nomad would not take as a path", path)
		}
		// Only a hashed path takes its job from the content, and then only
		// the job that hashes to it.
		if !strings.HasPrefix(path, statePrefix+"~~") {
			if _, err2 := stateKey(path, &JobState{Namespace: k.Namespace + "x", ID: "other"}); err2 != nil {
				t.Fatalf("stateKey(%q) depends on the content: %v", path, err2)
			}
		}
		// What decodes encodes again, and decodes to the same job.
		if decodeErr == nil {
			items, err := st.encode()
			if errors.Is(err, errStateTooBig) {
				return // refused before writing, by design (bounds.go)
			}
			if err != nil {
				t.Fatalf("encode a decoded state: %v", err)
			}
			if _, err := decodeState(items); err != nil {
				t.Fatalf("decode an encoded state: %v", err)
			}
		}
	})
}

// FuzzRequest: requestJob over any path and any content.
func FuzzRequest(f *testing.F) {
	for _, seed := range []struct{ path, job string }{
		{"steward/requests/train", ""},
		{"steward/requests/train", "victim"},
		{"steward/requests/web~2ev2", "web.v2"},
		{"steward/requests/web~2Ev2", "web.v2"},
		{"steward/requests/~~" + strings.Repeat("a", 40), "x"},
		{"steward/requests/", "x"},
		{"steward/requests/a/b", ""},
		{"steward/requests/~", "~"},
		{"nomad/jobs/train", "train"},
	} {
		f.Add(seed.path, seed.job)
	}
	f.Fuzz(func(t *testing.T, path, job string) {
		id, ok := requestJob(path, map[string]string{"job": job, "action": "pause"})
		if !ok {
			return
		}
		if id == "" {
			t.Fatalf("requestJob(%q) accepted an empty job", path)
		}
		if got := requestPath(id); got != path {
			t.Fatalf("requestJob(%q) = %q, whose path is %q: the path does not round-trip", path, id, got)
		}
		if !validVariablePath.MatchString(path) {
			t.Fatalf("requestJob accepted %q, which Nomad would not take as a path", path)
		}
		// The content names the job only for a hashed path.
		if !strings.HasPrefix(path, requestPrefix+"~~") && id != unescapePath(strings.TrimPrefix(path, requestPrefix)) {
			t.Fatalf("requestJob(%q) = %q: a plain path's job came from the content", path, id)
		}
	})
}
