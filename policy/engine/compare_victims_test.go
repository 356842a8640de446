package engine_test

import (
	"github.com/gpu-steward/steward/policy/engine"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// TestEngineCompareVictims (issue 32, item 3): why one job's work is given up
// before another's, as a plan begins: the first criterion of the victim
// order that tells them apart, with each side's fact; a job no preemption
// takes, or one not running, says so.
func TestEngineCompareVictims(t *testing.T) {
	p := testPolicy(func(p *policy.Policy) {
		p.Tenants["product"] = tenant("product", 4, policy.Unlimited)
		p.Tenants["research"] = tenant("research", 0, policy.Unlimited)
	})
	h := newHarness(t, p)
	h.node("n1", "default", 8)
	h.node("n2", "default", 8)
	h.submit("research", "train", "training", 2, 1)
	h.submit("research", "nb", "interactive", 2, 1)
	h.submit("product", "train", "training", 2, 1)
	h.submit("product", "serve", "inference", 2, 1)
	h.advance(time.Hour)
	h.submit("research", "young", "training", 2, 1)
	h.advance(time.Minute)
	ref := func(ns, id string) engine.JobRef { return engine.JobRef{Namespace: ns, ID: id} }
	cases := []struct {
		name string
		x, y engine.JobRef
		want string // in the explanation
		err  string
	}{
		{name: "past min_runtime before younger work", x: ref("research", "young"), y: ref("research", "train"),
			want: "research/train is given up before research/young by criterion 1, class"},
		{name: "a tenant over its reservation before one within it", x: ref("product", "train"), y: ref("research", "train"),
			want: "research/train is given up before product/train by criterion 2, reservation (tenants over their reservation before tenants within it): research/train has its tenant is over its reservation; product/train has its tenant is within its reservation"},
		{name: "the lower priority first", x: ref("research", "nb"), y: ref("research", "train"),
			want: "research/train is given up before research/nb by criterion 3, priority"},
		{name: "a non-preemptible tier is never a victim", x: ref("product", "serve"), y: ref("research", "train"),
			err: "product/serve runs only in non-preemptible tiers"},
		{name: "a job not running", x: ref("lab", "ghost"), y: ref("research", "train"),
			err: "lab/ghost runs no work with GPUs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.e.CompareVictims(h.snapshot(), h.now, tc.x, tc.y)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want %q", err, tc.err)
				}
			case err != nil:
				t.Errorf("error %v", err)
			case !strings.Contains(got.String(), tc.want):
				t.Errorf("got %q\nwant it to contain %q", got, tc.want)
			}
		})
	}
}
