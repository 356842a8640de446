package command

import (
	"reflect"
	"strings"
	"testing"
)

// Job IDs match by prefix as in `nomad job status`: one match wins, an
// exact ID wins among several in one namespace, anything else is listed.
func TestMatchJob(t *testing.T) {
	jobs := []jobRef{{"research", "train"}, {"research", "train-big"}, {"research", "notebook"},
		{"ml", "train"}, {"ml", "nb"}, {"research", "sweep-1"}, {"research", "sweep-2"}}
	research := func(ids ...string) []jobRef {
		var out []jobRef
		for _, id := range ids {
			out = append(out, jobRef{"research", id})
		}
		return out
	}
	cases := []struct {
		name       string
		candidates []jobRef
		prefix     string
		want       jobRef
		ok         bool
		matches    []jobRef
	}{
		{name: "unique prefix", candidates: jobs[:3], prefix: "no", want: jobRef{"research", "notebook"}, ok: true},
		{name: "exact ID among longer ones", candidates: jobs[:3], prefix: "train", want: jobRef{"research", "train"}, ok: true},
		{name: "ambiguous prefix", candidates: jobs[:3], prefix: "tr", matches: research("train", "train-big")},
		{name: "ambiguous, no exact", candidates: jobs, prefix: "sweep", matches: research("sweep-1", "sweep-2")},
		{name: "exact ID in two namespaces", candidates: jobs, prefix: "train",
			matches: []jobRef{{"ml", "train"}, {"research", "train"}, {"research", "train-big"}}},
		{name: "no match", candidates: jobs, prefix: "zzz"},
		{name: "the whole ID", candidates: jobs, prefix: "train-big", want: jobRef{"research", "train-big"}, ok: true},
		{name: "duplicates count once", candidates: []jobRef{{"ml", "nb"}, {"ml", "nb"}}, prefix: "n", want: jobRef{"ml", "nb"}, ok: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, matches, ok := matchJob(tc.candidates, tc.prefix)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("matchJob(%q) = %v, %t; want %v, %t", tc.prefix, got, ok, tc.want, tc.ok)
			}
			if !ok && !reflect.DeepEqual(matches, tc.matches) {
				t.Errorf("matches = %v, want %v", matches, tc.matches)
			}
		})
	}
}

// An ambiguous prefix lists the jobs it matched, as `nomad job status`.
func TestErrAmbiguousListsMatches(t *testing.T) {
	msg := errAmbiguous{"tr", []jobRef{{"research", "train"}, {"research", "train-big"}}}.Error()
	for _, want := range []string{`Prefix "tr" matched multiple jobs`, "ID         Namespace", "train      research", "train-big  research"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}
