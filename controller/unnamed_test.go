package controller

import (
	"testing"
)

// TestUnnamedNamespaceGetsTheDefaultTier: a job in a namespace no tenant
// block names is planned in the policy's default tier whatever tier its
// meta asks for (it cannot take a higher tier's priority and preempt
// others with it), and its record says why; a named tenant's request is
// passed on as asked.
func TestUnnamedNamespaceGetsTheDefaultTier(t *testing.T) {
	p := testPolicy(t)
	for _, tc := range []struct {
		name, ns, asks string
		planned        string
		problem        string
	}{
		{"unnamed namespace asks for the top tier: planned as the default", "scratch", "interactive", "training",
			"tier interactive is not allowed in namespace scratch, which no tenant block names (only the default tier, training): runs as training"},
		{"unnamed namespace asks for the default tier: honoured", "scratch", "training", "training", ""},
		{"named tenant asks for the top tier: honoured", "ml", "interactive", "interactive", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := job(tc.ns, "nb", tc.asks, 60, 1, 1)
			if got := engineJob(p, j, nil).Tier; got != tc.planned {
				t.Fatalf("planned in tier %q, want %q", got, tc.planned)
			}
			set := p.ResolveJob(j.Namespace, j.Meta)
			got := ""
			if len(set.Problems) > 0 {
				got = set.Problems[0]
			}
			if got != tc.problem {
				t.Fatalf("record's problem %q, want %q", got, tc.problem)
			}
		})
	}
}
