package nomadmodel_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
	"github.com/gpu-steward/steward/policy/nomadmodel/contract"
)

// TestPlace covers what the contract cannot (the controller's fake Nomad
// places first fit, with no pools, device classes or gangs): Nomad's
// queue order and binpack, gangs, device classes, node pools and pins.
func TestPlace(t *testing.T) {
	t0 := contract.Start
	nodes := []engine.Node{
		{ID: "a", NodePool: "default", GPUs: 8, Device: "H100"},
		{ID: "b", NodePool: "default", GPUs: 4, Device: "H100"},
		{ID: "c", NodePool: "cloud", GPUs: 4, Device: "A100"},
	}
	type grp struct {
		id      string
		prio    int
		gpus    int
		count   int
		gang    bool
		pool    string
		devices []string
		pins    []string
		since   time.Duration
	}
	for _, tc := range []struct {
		name   string
		groups []grp
		want   []string
	}{
		{"binpack: the fullest node that fits, not the first",
			[]grp{{id: "x", prio: 50, gpus: 4, count: 1}},
			[]string{"run ml/x/work on b ×1 (4 GPUs)"}},
		{"priority first, then the longest waiting",
			[]grp{{id: "low", prio: 40, gpus: 8, count: 1, since: time.Hour}, {id: "high", prio: 60, gpus: 8, count: 1}},
			[]string{"run ml/high/work on a ×1 (8 GPUs)", "wait ml/low/work ×1 (8 GPUs)"}},
		{"a gang all or nothing: four of five would fit",
			[]grp{{id: "g", prio: 50, gpus: 4, count: 5, gang: true}},
			[]string{"wait ml/g/work ×5 (4 GPUs)"}},
		{"not a gang: what fits runs",
			[]grp{{id: "g", prio: 50, gpus: 4, count: 5}},
			[]string{"run ml/g/work on a ×2 (4 GPUs)", "run ml/g/work on b ×1 (4 GPUs)", "run ml/g/work on c ×1 (4 GPUs)", "wait ml/g/work ×1 (4 GPUs)"}},
		{"a device class its request accepts",
			[]grp{{id: "x", prio: 50, gpus: 4, count: 1, devices: []string{"A100"}}},
			[]string{"run ml/x/work on c ×1 (4 GPUs)"}},
		{"its node pool",
			[]grp{{id: "x", prio: 50, gpus: 2, count: 1, pool: "cloud"}},
			[]string{"run ml/x/work on c ×1 (2 GPUs)"}},
		{"pinned to a node with room elsewhere",
			[]grp{{id: "x", prio: 50, gpus: 2, count: 1, pins: []string{"a"}}},
			[]string{"run ml/x/work on a ×1 (2 GPUs)"}},
		{"pinned to no node: never placed",
			[]grp{{id: "x", prio: 50, gpus: 2, count: 1, pins: []string{}}},
			[]string{"wait ml/x/work ×1 (2 GPUs)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := nomadmodel.New(nodes)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range tc.groups {
				_, err := c.AddGroup(nomadmodel.Group{Job: engine.Job{Ref: engine.JobRef{Namespace: "ml", ID: g.id}, Priority: g.prio, Gang: g.gang},
					Name: contract.Group, GPUsPerAlloc: g.gpus, Count: g.count, NodePool: g.pool, Devices: g.devices, Nodes: g.pins,
					Since: t0.Add(-g.since)})
				if err != nil {
					t.Fatal(err)
				}
			}
			c.Place(t0)
			var got []string
			for _, l := range contract.State(c.Snapshot()) {
				if l[:4] != "job " {
					got = append(got, l)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestBounds: a model is built from input tenants size.
func TestBounds(t *testing.T) {
	if _, err := nomadmodel.New([]engine.Node{{ID: "a", GPUs: nomadmodel.MaxGPUsPerNode + 1}}); err == nil {
		t.Error("a node of too many GPUs accepted")
	}
	if _, err := nomadmodel.New([]engine.Node{{ID: "a", GPUs: 1}, {ID: "a", GPUs: 1}}); err == nil {
		t.Error("a node ID twice accepted")
	}
	c, _ := nomadmodel.New([]engine.Node{{ID: "a", GPUs: 1}})
	for _, g := range []nomadmodel.Group{
		{Name: "w", GPUsPerAlloc: 0, Count: 1},
		{Name: "w", GPUsPerAlloc: 1, Count: -1},
		{Name: "w", GPUsPerAlloc: 1, Count: nomadmodel.MaxCount + 1},
	} {
		if _, err := c.AddGroup(g); err == nil {
			t.Errorf("group %+v accepted", g)
		}
	}
	g, err := c.AddGroup(nomadmodel.Group{Name: "w", GPUsPerAlloc: 2, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(g, "a", contract.Start); err == nil {
		t.Error("an allocation of 2 GPUs started on a node of 1")
	}
	if err := c.Apply(engine.Action{Kind: engine.Preempt, Allocs: []string{"nope"}}, contract.Start); err == nil {
		t.Error("a preemption of an allocation that does not run accepted")
	}
}
