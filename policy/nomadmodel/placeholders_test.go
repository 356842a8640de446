package nomadmodel

import (
	"maps"
	"slices"
	"testing"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestPlacingMarksUpToNeed: GPUs set aside for work placed now are its
// own up to what it asks for; the rest is free to a placeholder.
func TestPlacingMarksUpToNeed(t *testing.T) {
	nb, tr := engine.JobRef{Namespace: "ml", ID: "nb"}, engine.JobRef{Namespace: "ml", ID: "train"}
	marks := []engine.Earmark{
		{NodeID: "n1", GPUs: 3, For: nb, ForGroup: "work"},
		{NodeID: "n1", GPUs: 1, For: nb, ForGroup: "work"},
		{NodeID: "n2", GPUs: 4, For: nb, ForGroup: "work"},
		{NodeID: "n1", GPUs: 2, For: tr, ForGroup: "work"},
	}
	tests := []struct {
		name string
		need map[engine.JobRef]int
		want map[string]int
	}{
		{"not known: all of them", nil, map[string]int{"n1": 6, "n2": 4}},
		{"a 1-GPU job: 1 per node it may go on", map[engine.JobRef]int{nb: 1}, map[string]int{"n1": 3, "n2": 1}},
		{"asks for more than is set aside: all", map[engine.JobRef]int{nb: 8, tr: 8}, map[string]int{"n1": 6, "n2": 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PlacingMarks(marks, func(engine.Earmark) bool { return true }, func(m engine.Earmark) int { return tt.need[m.For] })
			if !maps.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestHolds: a placeholder keeps what it holds, up to what is set aside,
// and grows into what is free on its node, in order.
func TestHolds(t *testing.T) {
	tests := []struct {
		name     string
		hs       []Placeholder
		free     map[string]int
		want     []int
		wantFree map[string]int
	}{
		{"new: what is free", []Placeholder{{Node: "n1", Want: 3}}, map[string]int{"n1": 2}, []int{2}, map[string]int{"n1": 0}},
		{"grows into GPUs freed since", []Placeholder{{Node: "n1", Want: 3, Held: 1}}, map[string]int{"n1": 4}, []int{3},
			map[string]int{"n1": 2}},
		{"holds more than set aside: no more than that", []Placeholder{{Node: "n1", Want: 2, Held: 3}}, map[string]int{"n1": 4}, []int{2},
			map[string]int{"n1": 4}},
		{"in order, each its node's", []Placeholder{{Node: "n1", Want: 3}, {Node: "n1", Want: 3, Held: 1}, {Node: "n2", Want: 1}},
			map[string]int{"n1": 4}, []int{3, 2}, map[string]int{"n1": 0, "n2": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Holds(tt.hs, tt.free)
			if len(tt.want) < len(got) {
				tt.want = append(tt.want, make([]int, len(got)-len(tt.want))...)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("holds %v, want %v", got, tt.want)
			}
			for n, g := range tt.wantFree {
				if tt.free[n] != g {
					t.Errorf("free on %s %d, want %d", n, tt.free[n], g)
				}
			}
		})
	}
}
