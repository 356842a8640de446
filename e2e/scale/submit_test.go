package scale

import (
	"math"
	"testing"
)

func TestSubmitLimit(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		gpus, ended, shortfall int
		want                   int
	}{
		{"10 nodes: 50 a tick, as before", 80, 0, 92, 50},
		{"250 nodes: the churn and a quarter of the shortfall, up to 1 job a 20 GPUs", 2000, 40, 300, 100},
		{"1,000 nodes: a tick's churn of 120 ended allocations is followed, with a quarter of the shortfall", 8000, 120, 200, 170},
		{"1,000 nodes: the fill's whole demand at once is bounded by 1 job a 20 GPUs", 8000, 0, 9200, 400},
		{"1,000 nodes: nothing ended and nothing short still allows the floor", 8000, 0, 0, 50},
		{"1,000 nodes: demand over its share (a negative shortfall) counts as none", 8000, 100, -500, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := submitLimit(tc.gpus, tc.ended, tc.shortfall); got != tc.want {
				t.Errorf("submitLimit(%d GPUs, %d ended, %d short) = %d, want %d", tc.gpus, tc.ended, tc.shortfall, got, tc.want)
			}
		})
	}
}

func TestBacklogRoom(t *testing.T) {
	for _, tc := range []struct {
		name          string
		gpus, backlog int
		want          int
	}{
		{"1,000 nodes, the server keeping up: 400 less what waits", 8000, 3, 397},
		{"1,000 nodes, thousands of evaluations ready: nothing more", 8000, 4677, 0},
		{"10 nodes: 50 less what waits", 80, 10, 40},
		{"the server did not say: no gate", 8000, -1, math.MaxInt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := backlogRoom(tc.gpus, tc.backlog); got != tc.want {
				t.Errorf("backlogRoom(%d GPUs, %d waiting) = %d, want %d", tc.gpus, tc.backlog, got, tc.want)
			}
		})
	}
}

func TestFillAndWindowBounds(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		nodes, gpus, flag     int
		full, high, decisions int
	}{
		{"10 nodes (make test): full at 2 free, no decisions required", 10, 80, -1, 2, 20, 0},
		{"250 nodes: full at 20 free, 50 decisions required", 250, 2000, -1, 20, 20, 50},
		{"1,000 nodes: full at 80 free, 40 high-tier a tick, 50 decisions required", 1000, 8000, -1, 80, 40, 50},
		{"1,000 nodes with -scale.min-decisions=0: none required", 1000, 8000, 0, 80, 40, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fullAt(tc.gpus); got != tc.full {
				t.Errorf("fullAt(%d) = %d, want %d", tc.gpus, got, tc.full)
			}
			if got := highLimit(tc.gpus); got != tc.high {
				t.Errorf("highLimit(%d) = %d, want %d", tc.gpus, got, tc.high)
			}
			if got := minDecisions(tc.nodes, tc.flag); got != tc.decisions {
				t.Errorf("minDecisions(%d, %d) = %d, want %d", tc.nodes, tc.flag, got, tc.decisions)
			}
		})
	}
}
