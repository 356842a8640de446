package controller

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"

	log "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/hashicorp/nomad/nomad/structs"
	psstructs "github.com/hashicorp/nomad/plugins/shared/structs"
	"github.com/hashicorp/nomad/scheduler/feasible"
)

// A mixed fleet: nodes with different GPU models, and jobs whose device
// request names one ("nvidia/gpu/H100") or constrains its attributes
// (${device.attr.memory} >= 80 GiB). The engine must free GPUs for a
// waiting group only where its request would then be met, so it gets, per
// node, a device class (nodes of one class offer the same GPUs to every
// request), and per demand the classes its request accepts. The matching
// is Nomad's own: its scheduler's device checker, run on a node made of
// one class's device group.

// GPUGroup is one GPU device group a node fingerprints: vendor, type,
// model, attributes, and its healthy instances.
type GPUGroup struct {
	Vendor, Type, Name string
	Attributes         map[string]*api.Attribute
	Healthy            int
}

// ID is the group's device ID as jobspecs name it: "nvidia/gpu/H100".
func (g GPUGroup) ID() string { return g.Vendor + "/" + g.Type + "/" + g.Name }

// gpuGroups returns a node's GPU device groups with healthy instances,
// sorted by ID.
func gpuGroups(devs []*api.NodeDeviceResource) []GPUGroup {
	var out []GPUGroup
	for _, d := range devs {
		if d == nil || d.Type != "gpu" {
			continue
		}
		g := GPUGroup{Vendor: d.Vendor, Type: d.Type, Name: d.Name, Attributes: d.Attributes}
		for _, inst := range d.Instances {
			if inst != nil && inst.Healthy {
				g.Healthy++
			}
		}
		if g.Healthy > 0 {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID() < out[k].ID() })
	return out
}

// deviceClass names what a node's GPUs offer: each group's ID and
// attributes. Nodes with equal classes meet the same requests.
func deviceClass(groups []GPUGroup) string {
	var b strings.Builder
	for i, g := range groups {
		if i > 0 {
			b.WriteString(" + ")
		}
		b.WriteString(g.ID())
		keys := make([]string, 0, len(g.Attributes))
		for k := range g.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.WriteString(" " + k + "=" + attrString(g.Attributes[k]))
		}
	}
	return b.String()
}

// deviceShare is the part of a whole GPU each of a node's devices is (the
// engine's Node.Share, engine.ShareOf). A node with several groups counts
// as whole GPUs: the engine gives a node one share, and whole is the one
// that never lets a limit be passed.
func deviceShare(groups []GPUGroup) float64 {
	if len(groups) != 1 {
		return 0
	}
	return engine.ShareOf(groups[0].Name)
}

// deviceModel is a node's GPU model for reasons: the groups' names.
func deviceModel(groups []GPUGroup) string {
	names := make([]string, 0, len(groups))
	for _, g := range groups {
		names = append(names, g.Name)
	}
	return strings.Join(slices.Compact(names), " + ")
}

func attrString(a *api.Attribute) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// deviceMatcher says which device classes a group's GPU requests accept.
// One is built per snapshot from the nodes' classes; answers are kept per
// request, and demands that ask alike share one slice (the engine interns
// them).
type deviceMatcher struct {
	classes map[string][]GPUGroup
	names   []string // the classes, sorted
	memo    map[string][]string
	checker *feasible.DeviceChecker
	ctx     *feasible.EvalContext
}

// newDeviceMatcher builds a matcher for the nodes' device classes. It is
// not safe for concurrent use.
func newDeviceMatcher(nodes []ObservedNode) *deviceMatcher {
	ctx := feasible.NewEvalContext(nil, nil, nil, log.NewNullLogger())
	m := &deviceMatcher{classes: map[string][]GPUGroup{}, memo: map[string][]string{},
		ctx: ctx, checker: feasible.NewDeviceChecker(ctx)}
	for _, n := range nodes {
		class := deviceClass(n.GPUGroups)
		if _, ok := m.classes[class]; !ok {
			m.classes[class] = n.GPUGroups
			m.names = append(m.names, class)
		}
	}
	sort.Strings(m.names)
	return m
}

// accepts returns the classes whose every GPU group meets every one of
// reqs (a node with several GPU models counts for a request only if all
// of them would do: the engine does not track which of its GPUs are
// free). nil when reqs is empty: any GPU.
func (m *deviceMatcher) accepts(reqs []*api.RequestedDevice) []string {
	if len(reqs) == 0 {
		return nil
	}
	key, err := json.Marshal(reqs)
	if err != nil {
		return nil
	}
	if out, ok := m.memo[string(key)]; ok {
		return out
	}
	out := []string{}
	for _, class := range m.names {
		if m.meets(m.classes[class], reqs) {
			out = append(out, class)
		}
	}
	m.memo[string(key)] = out
	return out
}

// meets runs Nomad's device checker for each request against a node that
// holds only one of groups, with as many healthy instances as asked: so
// that only the device's ID and constraints decide, as in Nomad's
// nodeDeviceMatches; the engine does the counting.
func (m *deviceMatcher) meets(groups []GPUGroup, reqs []*api.RequestedDevice) bool {
	for _, r := range reqs {
		req := toStructsRequest(r)
		m.checker.SetTaskGroup(&structs.TaskGroup{Tasks: []*structs.Task{{Resources: &structs.Resources{
			Devices: []*structs.RequestedDevice{req}}}}})
		for _, g := range groups {
			node := &structs.Node{NodeResources: &structs.NodeResources{Devices: []*structs.NodeDeviceResource{
				toStructsDevice(g, int(req.Count))}}}
			if !m.checker.Feasible(node) {
				return false
			}
		}
	}
	return true
}

func toStructsRequest(r *api.RequestedDevice) *structs.RequestedDevice {
	req := &structs.RequestedDevice{Name: r.Name, Count: 1}
	if r.Count != nil && *r.Count > 0 {
		req.Count = *r.Count
	}
	for _, c := range r.Constraints {
		if c != nil {
			req.Constraints = append(req.Constraints, &structs.Constraint{LTarget: c.LTarget, RTarget: c.RTarget, Operand: c.Operand})
		}
	}
	return req
}

func toStructsDevice(g GPUGroup, healthy int) *structs.NodeDeviceResource {
	d := &structs.NodeDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: g.Name,
		Attributes: make(map[string]*psstructs.Attribute, len(g.Attributes))}
	for k, a := range g.Attributes {
		if a != nil {
			d.Attributes[k] = &psstructs.Attribute{Float: a.FloatVal, Int: a.IntVal, String: a.StringVal,
				Bool: a.BoolVal, Unit: a.Unit}
		}
	}
	for i := 0; i < healthy; i++ {
		d.Instances = append(d.Instances, &structs.NodeDevice{ID: "x" + string(rune('a'+i%26)), Healthy: true})
	}
	return d
}

// gpuRequests returns a task's GPU device requests.
func gpuRequests(t *api.Task) []*api.RequestedDevice {
	if t.Resources == nil {
		return nil
	}
	var out []*api.RequestedDevice
	for _, d := range t.Resources.Devices {
		if d != nil && isGPURequest(d.Name) {
			out = append(out, d)
		}
	}
	return out
}

// asks describes GPU requests for reasons: "nvidia/gpu/H100", with its
// constraints ("nvidia/gpu (${device.attr.memory} >= 80 GiB)").
func asks(reqs []*api.RequestedDevice) string {
	parts := make([]string, 0, len(reqs))
	for _, r := range reqs {
		s := r.Name
		var cs []string
		for _, c := range r.Constraints {
			if c != nil {
				cs = append(cs, strings.TrimSpace(c.LTarget+" "+c.Operand+" "+c.RTarget))
			}
		}
		if len(cs) > 0 {
			s += " (" + strings.Join(cs, ", ") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " and ")
}
