package controller

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestActStopsWhenTheTermEnds: a leader whose term ends in the middle of
// acting on a plan (its lease lost: the round's context is cancelled)
// neither logs nor attempts the plan's remaining actions. e2e's
// TestLeaderPausedPastTTL found a leader resumed past its lease logging
// "hold:" for the next action of the plan it had been stopped in; the
// fence refused the write, but the log said a stale leader acted.
func TestActStopsWhenTheTermEnds(t *testing.T) {
	f := newFakeNomad()
	var buf bytes.Buffer
	c := testController(t, f, withLogger(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})))
	nb := job("ml", "nb", "interactive", 60, 1, 4)
	r := newRound(t0, &Observation{At: t0, Jobs: map[jobKey]*ObservedJob{{"ml", "nb"}: nb}}, c.states())
	r.plan = &engine.Plan{Actions: []engine.Action{{Kind: engine.Hold, Job: engine.JobRef{Namespace: "ml", ID: "nb"},
		Group: "work", Count: 1, Reason: engine.Reason{Rule: engine.RuleCapacity, Message: "capacity: none free"}}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	leaderPhases{c}.act(ctx, r, c.pol)
	if strings.Contains(buf.String(), "hold:") {
		t.Errorf("a leader whose term ended logged the plan's action:\n%s", buf.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) > 0 {
		t.Errorf("a leader whose term ended called Nomad: %q", f.calls)
	}
}
