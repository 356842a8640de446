package controller

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPressureDefersPublish: over the fake Nomad, a round during which
// new work blocks leaves the jobs' records and the status to the next
// round, which starts at once (issue 33: at 250 nodes the new work
// waited for the publish phase of the round running when it blocked);
// the states are written as before; past publishDefer since they were
// last written, they are written anyway. Failed before: the round wrote
// them whatever came meanwhile.
func TestPressureDefersPublish(t *testing.T) {
	// ml/nb's record (ml/train's is written with its preemption) and the
	// status.
	deferrable := func(call string) bool {
		return call == "put ml nomad/jobs/nb" || strings.HasSuffix(call, " steward/status")
	}
	cases := []struct {
		name       string
		blocks     bool          // new work blocks while the round runs
		published  time.Duration // since the records and status were last written
		wantFirst  bool          // the first round writes them
		wantSecond bool          // the round after writes them
	}{
		{name: "nothing new: the round writes them", published: 100 * time.Millisecond, wantFirst: true},
		{name: "work blocks meanwhile: the next round writes them", blocks: true, published: 100 * time.Millisecond, wantSecond: true},
		{name: "work blocks, but they wait already publishDefer: written", blocks: true, published: publishDefer, wantFirst: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			preemptionCluster(f)
			r := newRoundRunner(t, f)
			var calls []string
			f.siteHook = func(call string) {
				calls = append(calls, call)
				if tc.blocks && strings.HasPrefix(call, "scale ml/nb") {
					r.c.pressure(time.Now()) // an event: new work blocked
				}
			}
			r.c.pub.published = time.Now().Add(-tc.published)
			if _, err := r.round(0); err != nil {
				t.Fatal(err)
			}
			first := calls
			calls = nil
			if !slices.Contains(first, "put steward steward/jobs/ml/nb") {
				t.Errorf("the round did not save ml/nb's state: %q", first)
			}
			if got := slices.ContainsFunc(first, deferrable); got != tc.wantFirst {
				t.Errorf("first round wrote records or status: %v, want %v (%q)", got, tc.wantFirst, first)
			}
			r.c.takePressure() // the next round takes it
			if _, err := r.round(time.Second); err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(calls, "put steward steward/status"); got != tc.wantSecond {
				t.Errorf("second round wrote the status: %v, want %v (%q)", got, tc.wantSecond, calls)
			}
			if tc.wantSecond && !slices.Contains(calls, "put ml nomad/jobs/nb") {
				t.Errorf("second round did not write ml/nb's record: %q", calls)
			}
		})
	}
}
