package sim

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestParseNodes(t *testing.T) {
	tests := []struct {
		in         string
		perNode    int
		want       []int
		wantList   bool
		err        string
		wantModels []string
	}{
		{"3", 8, []int{8, 8, 8}, false, "", nil},
		{" 2 ", 4, []int{4, 4}, false, "", nil},
		{"2x8,3x4", 8, []int{8, 8, 4, 4, 4}, true, "", nil},
		{"1X2, 1x1", 8, []int{2, 1}, true, "", nil},
		{"4x8", 8, []int{8, 8, 8, 8}, true, "", nil},
		{"0", 8, nil, false, "-nodes must be at least 1", nil},
		{"2", 128, nil, false, "-gpus-per-node between 1 and 127", nil},
		{"", 8, nil, false, "-nodes is empty", nil},
		{"4x", 8, nil, true, `"4x" is not COUNTxGPUS`, nil},
		{"4*8", 8, nil, true, `"4*8" is not COUNTxGPUS`, nil},
		{"2x8,,1x4", 8, nil, true, `"" is not COUNTxGPUS`, nil},
		{"0x8", 8, nil, true, `"0x8" needs at least 1 node`, nil},
		{"1x128", 8, nil, true, `"1x128" needs at least 1 node of 1 to 127 GPUs`, nil},
		{"2x8:H100,1x4:A100 40GB", 8, []int{8, 8, 4}, true, "", []string{"H100", "H100", "A100 40GB"}},
		{"2x8:H100,1x4", 8, nil, true, "some terms name a GPU model and some do not", nil},
		{"2x8:", 8, nil, true, `"2x8:" is not COUNTxGPUS[:MODEL]`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, models, list, err := ParseNodes(tc.in, tc.perNode)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) || list != tc.wantList || !slices.Equal(models, tc.wantModels) {
				t.Fatalf("got %v %q, list %v, %v; want %v %q, list %v", got, models, list, err, tc.want, tc.wantModels, tc.wantList)
			}
		})
	}
}

func TestShapes(t *testing.T) {
	tests := []struct {
		gpus []int
		want string
	}{
		{[]int{8, 8}, "2 nodes × 8 GPUs"},
		{[]int{8, 8, 4, 4, 4}, "2 nodes × 8 GPUs + 3 nodes × 4 GPUs (28 GPUs)"},
		{[]int{4, 8, 4}, "2 nodes × 4 GPUs + 1 node × 8 GPUs (16 GPUs)"},
	}
	for _, tc := range tests {
		if got := describeShapes(Shapes(tc.gpus, nil)); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.gpus, got, tc.want)
		}
	}
	if got, want := describeShapes(Shapes([]int{8, 8, 8}, []string{"H100", "A100", "H100"})),
		"2 nodes × 8 H100 GPUs + 1 node × 8 A100 GPUs (24 GPUs)"; got != want {
		t.Errorf("models: %q, want %q", got, want)
	}
}

// Best fit over nodes of mixed sizes: an allocation only fits nodes at
// least its size, and the fullest such node wins.
func TestClusterMixedSizes(t *testing.T) {
	tests := []struct {
		name       string
		nodes      []int
		taken      map[int]int // node -> GPUs already taken
		g, count   int
		want       []int
		wantPlaced bool
	}{
		{"8 fits only the big node", []int{4, 8, 4}, nil, 8, 1, []int{1}, true},
		{"small goes to the small node", []int{8, 4}, nil, 4, 1, []int{1}, true},
		{"two of 4 on the big node after the small", []int{8, 4}, nil, 4, 3, []int{1, 0, 0}, true},
		{"wider than every node", []int{4, 4}, nil, 5, 1, nil, false},
		{"enough GPUs, not enough room", []int{8, 4, 4}, map[int]int{0: 2}, 8, 1, nil, false},
		{"fullest node that fits", []int{8, 4, 8}, map[int]int{2: 5}, 3, 1, []int{2}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(tc.nodes, nil)
			for n, g := range tc.taken {
				c.take(n, g, 99)
			}
			got, ok := c.plan(tc.g, tc.count, anyModel, make([]int, len(tc.nodes)))
			if ok != tc.wantPlaced || !slices.Equal(got, tc.want) {
				t.Fatalf("plan %d × %d: %v, %v; want %v, %v", tc.count, tc.g, got, ok, tc.want, tc.wantPlaced)
			}
			if c.totalFree != sum(tc.nodes)-sum(mapValues(tc.taken)) {
				t.Errorf("total free %d", c.totalFree)
			}
		})
	}
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func mapValues(m map[int]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// Derive re-splits to the largest node and drops what no arrangement of
// the nodes can hold.
func TestDeriveMixedNodes(t *testing.T) {
	pol := mustPolicy(t, tinyPolicy)
	tr := mustTrace(t, `
job,submit,gpus,allocs,run_time
wide,0,16,1,300
fits-big,0,8,1,300
two-big,0,8,2,300
gang-of-4,0,4,4,300
too-many-4s,0,4,5,300
too-wide,0,8,3,300`)
	// One 8-GPU node and two 4-GPU nodes: 16 GPUs, room for one 8 or four 4s.
	d, err := Derive(tr, DeriveOptions{Seed: 1, Policy: pol, NodeGPUs: []int{8, 4, 4}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int{}
	for _, j := range tr.Jobs {
		got[j.ID] = [2]int{j.Allocs, j.GPUs}
	}
	want := map[string][2]int{"fits-big": {1, 8}, "gang-of-4": {4, 4}}
	if len(got) != len(want) || got["fits-big"] != want["fits-big"] || got["gang-of-4"] != want["gang-of-4"] {
		t.Errorf("kept %v, want %v", got, want)
	}
	// wide (2 × 8 after the re-split), two-big, too-many-4s, too-wide.
	if d.Reshaped != 1 || d.Dropped != 4 || d.Capacity != 16 {
		t.Errorf("re-split %d, dropped %d, capacity %d; want 1, 4, 16", d.Reshaped, d.Dropped, d.Capacity)
	}
}

// A whole comparison on nodes of mixed sizes: the report names the shapes,
// and utilisation is over the real capacity.
func TestCompareMixedNodes(t *testing.T) {
	pol := mustPolicy(t, tinyPolicy)
	tr := mustTrace(t, `
job,submit,gpus,allocs,run_time,tenant,tier,idle_after
big,0,8,1,3600,ml,training,never
small,0,4,1,3600,ml,training,never
last,3600,4,1,60,ml,training,never`)
	rep, err := Compare(tr, Options{Config: Config{Policy: pol, NodeGPUs: []int{8, 4}}, Policies: []PolicyKind{FIFO}})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	// Both first jobs run at once (8 on the big node, 4 on the small): all
	// 12 GPUs allocated for the hour of the arrival window.
	if r.Completed != 3 || r.UtilAllocated != 1 {
		t.Errorf("completed %d, allocated %.3f; want 3, 1", r.Completed, r.UtilAllocated)
	}
	if rep.Nodes != 2 || rep.GPUsPerNode != 0 || rep.GPUs != 12 {
		t.Errorf("nodes %d, gpus per node %d, GPUs %d; want 2, 0, 12", rep.Nodes, rep.GPUsPerNode, rep.GPUs)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "on 1 node × 8 GPUs + 1 node × 4 GPUs (12 GPUs);") {
		t.Errorf("header does not name the shapes:\n%s", table.String())
	}
	var js strings.Builder
	if err := WriteJSON(&js, []*Report{rep}); err != nil {
		t.Fatal(err)
	}
	var back []struct {
		Shapes  []NodeShape `json:"node_shapes"`
		PerNode *int        `json:"gpus_per_node"`
	}
	if err := json.Unmarshal([]byte(js.String()), &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back[0].Shapes, []NodeShape{{Count: 1, GPUs: 8}, {Count: 1, GPUs: 4}}) || back[0].PerNode != nil {
		t.Errorf("results.json node_shapes %v, gpus_per_node %v", back[0].Shapes, back[0].PerNode)
	}
	// Config without NodeGPUs still means Nodes × GPUsPerNode.
	cfg := Config{Nodes: 3, GPUsPerNode: 2}
	if g, err := cfg.nodeGPUs(); err != nil || !slices.Equal(g, []int{2, 2, 2}) {
		t.Errorf("uniform config: %v, %v", g, err)
	}
	if _, err := (&Config{NodeGPUs: []int{8, 0}}).nodeGPUs(); err == nil {
		t.Error("a node of 0 GPUs accepted")
	}
}
