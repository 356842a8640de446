package contract

import (
	"slices"
	"testing"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// Side is one model of Nomad held to the contract (the model, the
// controller over its fake Nomad, the simulator, the forecast's replay),
// carrying out a case's rounds its own way.
type Side interface {
	// Round runs round i, at Start+Rounds[i]: it lets the side's Nomad
	// move on to then, plans and carries the plan out. It returns the
	// state the round planned on (nil: none to check) and the kinds of
	// the actions it planned.
	Round(t *testing.T, i int) (planned []string, kinds []engine.Kind)
	// End is the state once the rounds are over.
	End(t *testing.T) []string
}

// Run runs every case against the side that start builds for it under
// the contract's policy; start returns a nil Side and the reason where a
// case has no meaning for that side, which is logged and not counted.
// It checks what every side must: the state its rounds plan on where
// PlansOnNext, an action of the case's kind among the plans, and the
// state at the end. It returns how many cases ran.
func Run(t *testing.T, start func(t *testing.T, p *policy.Policy, tc Case) (Side, string)) (ran int) {
	t.Helper()
	p, diags := policy.ParseBytes("contract.hcl", []byte(Policy))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	for _, tc := range Cases {
		t.Run(tc.Name, func(t *testing.T) {
			side, why := start(t, p, tc)
			if side == nil {
				t.Logf("not applicable: %s", why)
				return
			}
			ran++
			var kinds []engine.Kind
			for i := range Rounds {
				planned, k := side.Round(t, i)
				kinds = append(kinds, k...)
				if PlansOnNext(i) && planned != nil && !slices.Equal(planned, tc.Next) {
					t.Errorf("state round %d plans on:\n got  %q\n want %q", i, planned, tc.Next)
				}
			}
			if !slices.Contains(kinds, tc.Kind) {
				t.Errorf("no %s in the plans: %v", tc.Kind, kinds)
			}
			if got := side.End(t); !slices.Equal(got, tc.Want) {
				t.Errorf("state after the rounds:\n got  %q\n want %q", got, tc.Want)
			}
		})
	}
	return ran
}
