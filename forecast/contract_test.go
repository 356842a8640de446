package forecast

import (
	"testing"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel/contract"
)

// TestContract runs the contract of the one model of Nomad
// (policy/nomadmodel/contract) against the replay's way of carrying out
// plans (settle: apply, endRuns, placeQueued): each case's start state is
// the snapshot the controller would read (built in the model, as the
// controller's fake Nomad would show it), no run ends within the rounds,
// and a replay step at each of the contract's rounds. Every case must end
// where the controller's roundRunner over its fake Nomad ends (controller
// TestContract).
func TestContract(t *testing.T) {
	contract.Run(t, func(t *testing.T, p *policy.Policy, tc contract.Case) (contract.Side, string) {
		in := &Input{Engine: engine.New(p), Snapshot: contractSnapshot(t, tc), Now: contract.Start,
			Estimates: map[engine.JobRef]Estimate{}}
		for _, j := range tc.Jobs {
			in.Estimates[engine.JobRef{Namespace: j.Namespace, ID: j.ID}] = Estimate{Forever: true}
		}
		rs := &replaySide{r: newReplay(in, Options{}.withDefaults(), 1, 1)}
		rs.r.watch = func(s *engine.Snapshot, p *engine.Plan) {
			rs.planned = s
			rs.kinds = append(rs.kinds, contract.Kinds(p)...)
		}
		return rs, ""
	})
}

// replaySide is the replay under the contract: a replay step at each of
// the contract's rounds.
type replaySide struct {
	r       *replay
	planned *engine.Snapshot // what the last plan planned on
	kinds   []engine.Kind    // the kinds planned in this round
}

func (rs *replaySide) Round(t *testing.T, i int) (planned []string, kinds []engine.Kind) {
	rs.kinds = nil
	rs.r.stepStart, rs.r.now = rs.r.now, contract.Start.Add(contract.Rounds[i])
	rs.r.settle(i == 0)
	return contract.State(rs.planned), rs.kinds
}

func (rs *replaySide) End(*testing.T) []string { return contract.State(rs.r.snapshot()) }

// contractSnapshot is a case's start state as the controller reads it:
// the one model of Nomad's, which the controller's contract test holds to
// the controller's own reading.
func contractSnapshot(t *testing.T, tc contract.Case) *engine.Snapshot {
	t.Helper()
	c, err := contract.Model(tc)
	if err != nil {
		t.Fatal(err)
	}
	return c.Snapshot()
}
