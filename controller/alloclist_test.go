package controller

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// listedAllocStub is an allocation as Nomad lists it with its resources:
// a GPU task and a sidecar with CPU, memory and ports, each with the
// events of its life; the GPU task's driver's checkpoint messages when
// checkpoints is set.
func listedAllocStub(i int, gpus int, checkpoints bool) *api.AllocationListStub {
	ev := func(typ, msg string, at int64, details map[string]string) *api.TaskEvent {
		return &api.TaskEvent{Type: typ, Time: at, Message: msg, DisplayMessage: msg, Details: details}
	}
	events := []*api.TaskEvent{
		ev(api.TaskReceived, "Task received by client", 1_700_000_000_000_000_000, map[string]string{}),
		ev(api.TaskSetup, "Building Task Directory", 1_700_000_001_000_000_000, map[string]string{"message": "Building Task Directory"}),
		ev(api.TaskStarted, "Task started by client", 1_700_000_002_000_000_000, map[string]string{}),
		ev(api.TaskDriverMessage, "image pulled", 1_700_000_003_000_000_000, map[string]string{"image": "busybox"}),
	}
	if checkpoints {
		events = append(events,
			ev(api.TaskDriverMessage, "checkpoint saved", 1_700_000_100_000_000_000, map[string]string{"steward.event": checkpointEvent, checkpointAtField: "2023-11-14T22:15:00Z"}),
			ev(api.TaskDriverMessage, "checkpoint written", 1_700_000_200_000_000_000, map[string]string{"steward.event": checkpointDoneEvent, checkpointDoneAtField: "2023-11-14T22:16:40Z"}))
	}
	var ids []string
	for g := range gpus {
		ids = append(ids, fmt.Sprintf("GPU-%08d-%d", i, g))
	}
	task := func(devices bool) *api.AllocatedTaskResources {
		t := &api.AllocatedTaskResources{Cpu: api.AllocatedCpuResources{CpuShares: 500}, Memory: api.AllocatedMemoryResources{MemoryMB: 256},
			Networks: []*api.NetworkResource{{Mode: "host", IP: "10.0.0.1", DynamicPorts: []api.Port{{Label: "http", Value: 20000 + i%1000}}}}}
		if devices && gpus > 0 {
			t.Devices = []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H200", DeviceIDs: ids}}
		}
		return t
	}
	return &api.AllocationListStub{ID: fmt.Sprintf("a-%08d-0000-0000-0000-000000000000", i), EvalID: "e-0000", Name: fmt.Sprintf("job-%05d.work[0]", i),
		Namespace: "ml", NodeID: fmt.Sprintf("n-%04d", i%1000), NodeName: fmt.Sprintf("node-%04d", i%1000), JobID: fmt.Sprintf("job-%05d", i), JobType: "batch",
		JobVersion: 2, TaskGroup: "work", DesiredStatus: "run", ClientStatus: "running", ClientDescription: "Tasks are running",
		CreateIndex: 10, ModifyIndex: uint64(100 + i), CreateTime: 1_700_000_000_000_000_000 + int64(i), ModifyTime: 1_700_000_500_000_000_000,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"train": task(true), "sidecar": task(false)},
			Shared: api.AllocatedSharedResources{DiskMB: 300}},
		TaskStates: map[string]*api.TaskState{
			"train":   {State: "running", Events: events},
			"sidecar": {State: "pending", Events: events[:2]},
		},
	}
}

// TestAllocListNarrow: the allocation list of a full read is decoded
// into only what the observer reads (alloclist.go): every allocation
// observes the same (toObservedAlloc) and carries the same modify index
// as decoded whole, and nothing else of it is kept.
func TestAllocListNarrow(t *testing.T) {
	noResources := listedAllocStub(3, 1, false)
	noResources.AllocatedResources, noResources.TaskStates = nil, nil
	pending := listedAllocStub(4, 2, false)
	pending.ClientStatus, pending.TaskStates["train"].State = "pending", "pending"
	cases := []struct {
		name  string
		alloc *api.AllocationListStub
	}{
		{"a running GPU allocation with a sidecar", listedAllocStub(1, 2, false)},
		{"one whose driver reported checkpoints", listedAllocStub(2, 1, true)},
		{"one listed without resources or task states", noResources},
		{"a pending one", pending},
		{"one without GPUs", listedAllocStub(5, 0, true)},
	}
	var allocs []*api.AllocationListStub
	for _, tc := range cases {
		allocs = append(allocs, tc.alloc)
	}
	for i := range 2 * listPage { // more than a page
		allocs = append(allocs, listedAllocStub(100+i, 1+i%8, i%3 == 0))
	}
	c := listServer(t, "/v1/allocations", allocs)
	whole, _, err := paginate(readOpts(context.Background(), api.AllNamespacesNamespace, false), c.Allocations().List)
	if err != nil {
		t.Fatal(err)
	}
	n := &nomadClient{c: c}
	narrow, index, err := n.ListAllocs(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if index != 42 || len(narrow) != len(allocs) || len(whole) != len(allocs) {
		t.Fatalf("%d allocations narrow, %d whole, at index %d; want %d at 42", len(narrow), len(whole), index, len(allocs))
	}
	byID := map[string]*api.AllocationListStub{}
	for _, a := range whole {
		byID[a.ID] = a
	}
	for _, a := range narrow {
		w := byID[a.ID]
		if got, want := toObservedAlloc(a), toObservedAlloc(w); !reflect.DeepEqual(got, want) || a.ModifyIndex != w.ModifyIndex {
			t.Fatalf("%s observed narrow as %+v (index %d), whole as %+v (%d)", a.ID, got, a.ModifyIndex, want, w.ModifyIndex)
		}
	}
	narrowByID := map[string]*api.AllocationListStub{}
	for _, a := range narrow {
		narrowByID[a.ID] = a
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := narrowByID[tc.alloc.ID]
			if a == nil {
				t.Fatalf("%s not listed", tc.alloc.ID)
			}
			if a.NodeName != "" || a.ClientDescription != "" || a.EvalID != "" {
				t.Errorf("fields the observer does not read were kept: %+v", a)
			}
			if a.AllocatedResources != nil {
				for name, tr := range a.AllocatedResources.Tasks {
					if tr.Memory.MemoryMB != 0 || tr.Networks != nil {
						t.Errorf("task %s: resources other than GPUs kept: %+v", name, tr)
					}
				}
			}
			for name, ts := range a.TaskStates {
				for _, ev := range ts.Events {
					if ev.Type != api.TaskDriverMessage || ev.Message != "" || ev.Details["steward.event"] == "" {
						t.Errorf("task %s: an event the observer does not read was kept: %+v", name, ev)
					}
				}
			}
		})
	}
}

// BenchmarkResyncAllocList is a full read's allocation list at 1,000
// nodes of the scale harness (8,000 GPU allocations), decoded whole as
// the api package does and narrow (alloclist.go), then observed as
// readAll does: the bytes allocated, and the live heap the list holds
// once decoded (what a GC during the read sees).
//
//	go test -run '^$' -bench ResyncAllocList -benchtime 5x -count 3 ./controller
func BenchmarkResyncAllocList(b *testing.B) {
	var allocs []*api.AllocationListStub
	for i := range 8_000 {
		allocs = append(allocs, listedAllocStub(i, 1+i%4, i%4 == 0))
	}
	c := listServer(b, "/v1/allocations", allocs)
	n := &nomadClient{c: c}
	for _, v := range []struct {
		name string
		list func(*api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error)
	}{
		{"api", c.Allocations().List},
		{"narrow", n.listAllocs},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			var held float64
			for range b.N {
				base := liveHeap()
				stubs, _, err := paginate(readOpts(context.Background(), api.AllNamespacesNamespace, false), v.list)
				if err != nil {
					b.Fatal(err)
				}
				held += liveHeap() - base
				observed := make(map[string]ObservedAlloc, len(stubs))
				for _, a := range stubs {
					observed[a.ID] = toObservedAlloc(a)
				}
				runtime.KeepAlive(stubs)
				runtime.KeepAlive(observed)
			}
			b.ReportMetric(held/float64(b.N)/(1<<20), "MiB-held")
		})
	}
}
