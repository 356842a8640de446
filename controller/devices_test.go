package controller

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func gpuNode(id, pool, model string, memMiB int64, gpus int) ObservedNode {
	mem, unit := memMiB, "MiB"
	return ObservedNode{ID: id, NodePool: pool, GPUs: gpus, GPUGroups: []GPUGroup{{
		Vendor: "nvidia", Type: "gpu", Name: model, Healthy: gpus,
		Attributes: map[string]*api.Attribute{"memory": {IntVal: &mem, Unit: unit}},
	}}}
}

func gpuReq(name string, count uint64, cons ...*api.Constraint) *api.RequestedDevice {
	return &api.RequestedDevice{Name: name, Count: &count, Constraints: cons}
}

// TestDeviceMatcher: which node classes a group's device requests accept,
// with Nomad's own rules for device names and constraints.
func TestDeviceMatcher(t *testing.T) {
	nodes := []ObservedNode{
		gpuNode("h1", "default", "H100 80GB HBM3", 81920, 8),
		gpuNode("h2", "default", "H100 80GB HBM3", 81920, 8),
		gpuNode("a1", "default", "A100-SXM4-40GB", 40960, 8),
	}
	h100, a100 := deviceClass(nodes[0].GPUGroups), deviceClass(nodes[2].GPUGroups)
	cases := []struct {
		name string
		reqs []*api.RequestedDevice
		want []string
	}{
		{"no request: any GPU", nil, nil},
		{"gpu", []*api.RequestedDevice{gpuReq("gpu", 1)}, []string{a100, h100}},
		{"nvidia/gpu", []*api.RequestedDevice{gpuReq("nvidia/gpu", 2)}, []string{a100, h100}},
		{"nvidia/gpu/<model>", []*api.RequestedDevice{gpuReq("nvidia/gpu/H100 80GB HBM3", 1)}, []string{h100}},
		{"another vendor", []*api.RequestedDevice{gpuReq("amd/gpu", 1)}, []string{}},
		{"memory constraint", []*api.RequestedDevice{gpuReq("nvidia/gpu", 1,
			&api.Constraint{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "60 GiB"})}, []string{h100}},
		{"model regexp", []*api.RequestedDevice{gpuReq("nvidia/gpu", 1,
			&api.Constraint{LTarget: "${device.model}", Operand: "regexp", RTarget: "A100"})}, []string{a100}},
		{"unknown attribute", []*api.RequestedDevice{gpuReq("nvidia/gpu", 1,
			&api.Constraint{LTarget: "${device.attr.nvlink}", Operand: "=", RTarget: "true"})}, []string{}},
	}
	m := newDeviceMatcher(nodes)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := m.accepts(c.reqs)
			if !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
				t.Fatalf("accepts %v, want %v", got, c.want)
			}
			if again := m.accepts(c.reqs); len(got) > 0 && &again[0] != &got[0] {
				t.Errorf("requests that ask alike get different slices")
			}
		})
	}
	if got := deviceModel(nodes[0].GPUGroups); got != "H100 80GB HBM3" {
		t.Errorf("model %q", got)
	}
	for name, want := range map[string]float64{
		"NVIDIA A100-SXM4-40GB MIG 1g.5gb": 1.0 / 7, "NVIDIA H100 80GB HBM3 MIG 3g.40gb": 3.0 / 7,
		"NVIDIA A30 MIG 2g.12gb": 0.5, "NVIDIA A100-SXM4-40GB MIG 7g.40gb": 0, "NVIDIA A100-SXM4-40GB": 0,
		"Simulated A100 MIG 1g.10gb": 1.0 / 7,
	} {
		if got := deviceShare([]GPUGroup{{Name: name}}); got != want {
			t.Errorf("share of %q: %v, want %v", name, got, want)
		}
	}
	if got := asks([]*api.RequestedDevice{gpuReq("nvidia/gpu", 1,
		&api.Constraint{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "60 GiB"})}); got != "nvidia/gpu (${device.attr.memory} >= 60 GiB)" {
		t.Errorf("asks %q", got)
	}
}

// TestSnapshotDevices: the snapshot carries each node's device class and
// model, and each waiting group the classes its request accepts.
func TestSnapshotDevices(t *testing.T) {
	obs := &Observation{
		Nodes: []ObservedNode{gpuNode("h1", "gpu", "H100", 81920, 2), gpuNode("a1", "gpu", "A100", 40960, 2)},
		Jobs: map[jobKey]*ObservedJob{{"ml", "nb"}: {Namespace: "ml", ID: "nb", Type: "batch", NodePool: "gpu",
			Groups: map[string]GroupSpec{"main": {Count: 1, GPUsPerAlloc: 1,
				GPURequests: []*api.RequestedDevice{gpuReq("nvidia/gpu/H100", 1)}}}}},
		Queued: map[jobKey]map[string]QueuedGroup{{"ml", "nb"}: {"main": {Count: 1}}},
	}
	s := buildSnapshot(testPolicy(t), obs, nil, nil)
	if len(s.Nodes) != 2 || s.Nodes[0].Model != "H100" || s.Nodes[0].Device == s.Nodes[1].Device {
		t.Fatalf("nodes %+v", s.Nodes)
	}
	if len(s.Waiting) != 1 || !slices.Equal(s.Waiting[0].Devices, []string{s.Nodes[0].Device}) ||
		s.Waiting[0].Asks != "nvidia/gpu/H100" {
		t.Fatalf("waiting %+v", s.Waiting)
	}
}

// TestNodeEventAttributes: a node event's device attributes keep their
// values. The api package's own event decoder drops them (it ignores the
// JSON names: "Int" for IntVal), and a node updated by an event then met
// no memory constraint: an H100 waiter asking for 60 GiB found "no node".
func TestNodeEventAttributes(t *testing.T) {
	const stream = `{"Events":[{"Topic":"Node","Type":"NodeRegistration","Key":"n1","Index":8,"Payload":{"Node":{
	  "ID":"n1","Name":"gpu-1","NodePool":"h100","Status":"ready","SchedulingEligibility":"eligible",
	  "NodeResources":{"Devices":[{"Vendor":"nvidia","Type":"gpu","Name":"H100",
	    "Attributes":{"memory":{"Int":81920,"Unit":"MiB"},"mig":{"Bool":false}},
	    "Instances":[{"ID":"GPU-0","Healthy":true},{"ID":"GPU-1","Healthy":true}]}]}}}}]}`
	var evs api.Events
	if err := json.Unmarshal([]byte(stream), &evs); err != nil {
		t.Fatal(err)
	}
	e := &evs.Events[0]
	if n, err := e.Node(); err == nil && n.NodeResources.Devices[0].Attributes["memory"].IntVal != nil {
		t.Log("the api package's decoder keeps attribute values now: nodeOfEvent may go")
	}
	n, err := nodeOfEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	cn := nodeFromAPI(n)
	if len(cn.node.GPUGroups) != 1 || cn.node.GPUs != 2 {
		t.Fatalf("node %+v", cn.node)
	}
	mem := cn.node.GPUGroups[0].Attributes["memory"]
	if mem == nil || mem.IntVal == nil || *mem.IntVal != 81920 || mem.Unit != "MiB" {
		t.Fatalf("memory attribute %v", mem)
	}
	m := newDeviceMatcher([]ObservedNode{cn.node})
	got := m.accepts([]*api.RequestedDevice{gpuReq("nvidia/gpu", 1,
		&api.Constraint{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "60 GiB"})})
	if len(got) != 1 {
		t.Fatalf("a 60 GiB request accepts %v", got)
	}
}

// TestJobEventFields: a job event keeps the fields the api package's own
// decoder drops (their mapstructure tags differ from their JSON names):
// the node pool the pool precedence moves jobs between, and the parent of
// a periodic child, which the controller leaves out.
func TestJobEventFields(t *testing.T) {
	const stream = `{"Events":[{"Topic":"Job","Type":"JobRegistered","Key":"next","Index":9,"Payload":{"Job":{
	  "ID":"next","Namespace":"ml","Type":"batch","NodePool":"onprem","ParentID":"nightly","Priority":40,
	  "TaskGroups":[{"Name":"work","Count":1,"Tasks":[{"Name":"work","Driver":"raw_exec",
	    "Resources":{"Devices":[{"Name":"nvidia/gpu","Count":1,"Constraints":[{"LTarget":"${device.attr.memory}","RTarget":"60 GiB","Operand":">="}]}]}}]}]}}}]}`
	var evs api.Events
	if err := json.Unmarshal([]byte(stream), &evs); err != nil {
		t.Fatal(err)
	}
	body, err := decodeEvent(&evs.Events[0])
	if err != nil {
		t.Fatal(err)
	}
	j := body.Job
	if deref(j.NodePool) != "onprem" || deref(j.ParentID) != "nightly" {
		t.Fatalf("node pool %q, parent %q", deref(j.NodePool), deref(j.ParentID))
	}
	oj := toObservedJob(j)
	reqs := oj.Groups["work"].GPURequests
	if oj.NodePool != "onprem" || len(reqs) != 1 || len(reqs[0].Constraints) != 1 || reqs[0].Constraints[0].RTarget != "60 GiB" {
		t.Fatalf("observed job %+v, requests %+v", oj, reqs)
	}
	if old, _, err := evs.Events[0].DeregisteredJob(); err == nil && deref(old.NodePool) == "onprem" {
		t.Log("the api package's decoder keeps the node pool now: decodeEvent may go")
	}
}
