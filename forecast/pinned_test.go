package forecast

import (
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestPinnedPlacement: the replay places work only on nodes its
// constraints pin it to (engine.Demand.Nodes), as Nomad does
// (nomadmodel.Fits). Placed on any node with room, work pinned to a busy
// node was forecast to start at once.
func TestPinnedPlacement(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pins     []string
		earliest time.Duration // P50 no earlier than t0 + this
		latest   time.Duration // and no later
	}{
		{"pinned to the busy node: starts when its work ends", []string{"n2"}, 20 * time.Minute, 40 * time.Minute},
		{"not pinned: starts now on the free node", nil, 0, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := waiting("b", "pinned", "training", 1, 2, time.Minute)
			d.Held, d.Nodes = false, tc.pins
			snap := &engine.Snapshot{Nodes: []engine.Node{node("n1", 8), node("n2", 4)},
				Allocs: []engine.Alloc{
					running("a", "long", "training", "n1", 6, time.Hour, 0),
					running("b", "short", "training", "n2", 4, 30*time.Minute, 0),
				},
				Waiting: []engine.Demand{d}}
			est := map[engine.JobRef]Estimate{ref("a", "long"): {Expected: 10 * time.Hour}, ref("b", "short"): {Expected: time.Hour}}
			_, _, res := forecastOf(t, snap, est)
			f := res.Jobs[ref("b", "pinned")]
			if f == nil || f.P50.Before(t0.Add(tc.earliest)) || f.P50.After(t0.Add(tc.latest)) {
				t.Fatalf("forecast %+v, want P50 between %s and %s from now", f, tc.earliest, tc.latest)
			}
		})
	}
}
