package nodesim

import (
	"fmt"
	"time"

	"github.com/hashicorp/nomad/client/hoststats"
	cstructs "github.com/hashicorp/nomad/client/structs"
	"github.com/hashicorp/nomad/nomad/structs"
	"github.com/hashicorp/nomad/plugins/device"
	psstructs "github.com/hashicorp/nomad/plugins/shared/structs"
)

// Device statistics as Steward's device plugin reports them (devices/
// stats.go), with its simulated backend's power and temperature model.
const (
	StatGPUUtilization    = "GPU utilization"
	StatMemoryUtilization = "Memory utilization"
	StatMemoryState       = "Memory state"
	StatPowerUsage        = "Power usage"
	StatTemperature       = "Temperature"

	descGPUUtilization    = "Percent of time over the past sample period during which one or more kernels were executing on the GPU."
	descMemoryUtilization = "Percentage of bandwidth used during the past sample period"
	descMemoryState       = "UsedMemory / TotalMemory"
	descPowerUsage        = "Power usage for this GPU in watts and its associated circuitry (e.g. memory) / Maximum GPU Power"
	descTemperature       = "Temperature of the Unit"

	// busyUtil is the default utilisation of a GPU a running allocation
	// holds.
	busyUtil = 90

	gpuIdlePowerW = 60
	gpuIdleTempC  = 30
	gpuMaxTempC   = 75
)

// clientStatsEndpoint serves the forwarded ClientStats RPCs.
type clientStatsEndpoint struct{ f *Fleet }

// allocationsEndpoint serves the forwarded Allocations RPCs.
type allocationsEndpoint struct{ f *Fleet }

// registerEndpoints registers what the server may forward to a node. One
// RPC server serves all nodes: every request names its node or
// allocation.
func (f *Fleet) registerEndpoints() error {
	if err := f.rpcServer.RegisterName("ClientStats", &clientStatsEndpoint{f}); err != nil {
		return fmt.Errorf("nodesim: register ClientStats endpoint: %w", err)
	}
	if err := f.rpcServer.RegisterName("Allocations", &allocationsEndpoint{f}); err != nil {
		return fmt.Errorf("nodesim: register Allocations endpoint: %w", err)
	}
	return nil
}

// Stats answers ClientStats.Stats: host stats with the GPUs' device stats.
func (e *clientStatsEndpoint) Stats(args *structs.NodeSpecificRequest, reply *cstructs.ClientStatsResponse) error {
	n := e.f.byID[args.NodeID]
	if n == nil {
		e.f.stats.refused.Add(1)
		return structs.NewErrUnknownNode(args.NodeID)
	}
	reply.HostStats = n.hostStats(time.Now())
	e.f.stats.statsServed.Add(1)
	return nil
}

// Stats answers Allocations.Stats: the device stats of the allocation's
// GPUs (no CPU or memory figures: nothing runs).
func (e *allocationsEndpoint) Stats(args *cstructs.AllocStatsRequest, reply *cstructs.AllocStatsResponse) error {
	n := e.f.ownerOf(args.AllocID)
	if n == nil {
		e.f.stats.refused.Add(1)
		return structs.NewErrUnknownAllocation(args.AllocID)
	}
	now := time.Now()
	n.mu.Lock()
	a := n.allocs[args.AllocID]
	var gpus, tasks []string
	if a != nil {
		gpus, tasks = a.gpus, a.tasks
	}
	n.mu.Unlock()
	if a == nil {
		e.f.stats.refused.Add(1)
		return structs.NewErrUnknownAllocation(args.AllocID)
	}
	usage := &cstructs.ResourceUsage{
		MemoryStats: &cstructs.MemoryStats{},
		CpuStats:    &cstructs.CpuStats{},
		DeviceStats: n.deviceStats(gpus, now),
	}
	ts := now.UnixNano()
	out := &cstructs.AllocResourceUsage{ResourceUsage: usage, Tasks: map[string]*cstructs.TaskResourceUsage{}, Timestamp: ts}
	for _, t := range tasks {
		if args.Task == "" || args.Task == t {
			out.Tasks[t] = &cstructs.TaskResourceUsage{ResourceUsage: usage, Timestamp: ts}
		}
	}
	reply.Stats = out
	e.f.stats.statsServed.Add(1)
	return nil
}

// Signal answers Allocations.Signal: counted and passed to
// Config.OnSignal; nothing runs to receive it.
func (e *allocationsEndpoint) Signal(args *structs.AllocSignalRequest, reply *structs.GenericResponse) error {
	n := e.f.ownerOf(args.AllocID)
	if n == nil {
		e.f.stats.refused.Add(1)
		return structs.NewErrUnknownAllocation(args.AllocID)
	}
	e.f.stats.signals.Add(1)
	e.f.logger.Debug("signal to simulated allocation", "node", n.name, "alloc", args.AllocID, "task", args.Task, "signal", args.Signal)
	if e.f.cfg.OnSignal != nil {
		e.f.cfg.OnSignal(n.id, args.AllocID, args.Task, args.Signal)
	}
	return nil
}

// hostStats are the node's host stats: fixed memory figures and the
// device stats of all its GPUs.
func (n *node) hostStats(now time.Time) *hoststats.HostStats {
	total := uint64(nodeMemoryMB) << 20
	return &hoststats.HostStats{
		Memory: &hoststats.MemoryStats{
			Total:     total,
			Available: total,
			Free:      total,
		},
		CPU:         []*hoststats.CPUStats{},
		DiskStats:   []*hoststats.DiskStats{},
		DeviceStats: n.deviceStats(n.gpus, now),
		Uptime:      uint64(time.Since(n.f.started).Seconds()),
		Timestamp:   now.UnixNano(),
	}
}

// deviceStats is one device group with the stats of the given GPUs.
func (n *node) deviceStats(gpus []string, now time.Time) []*device.DeviceGroupStats {
	if len(gpus) == 0 {
		return []*device.DeviceGroupStats{}
	}
	utils := n.utilisation(gpus)
	grp := &device.DeviceGroupStats{
		Vendor:        GPUVendor,
		Type:          GPUType,
		Name:          GPUModel,
		InstanceStats: make(map[string]*device.DeviceStats, len(gpus)),
	}
	for i, id := range gpus {
		grp.InstanceStats[id] = gpuStats(utils[i], now)
	}
	return []*device.DeviceGroupStats{grp}
}

// utilisation returns each GPU's utilisation in percent: from
// Config.Activity, else busyUtil for GPUs running allocations hold and 0
// for the others.
func (n *node) utilisation(gpus []string) []int {
	out := make([]int, len(gpus))
	n.mu.Lock()
	for i, g := range gpus {
		if _, ok := n.held[g]; ok {
			out[i] = busyUtil
		}
	}
	n.mu.Unlock()
	if act := n.f.cfg.Activity; act != nil {
		for i, g := range gpus {
			if u, ok := act(n.id, g); ok {
				out[i] = min(max(u, 0), 100)
			}
		}
	}
	return out
}

// gpuStats are one GPU's stats, with the simulated backend's model.
func gpuStats(util int, now time.Time) *device.DeviceStats {
	u := int64(util)
	memUsed := int64(gpuMemoryMiB) * u / 100
	ints := []int64{u, u * 6 / 10, memUsed, gpuMemoryMiB,
		gpuIdlePowerW + u*(gpuPowerLimitW-gpuIdlePowerW)/100, gpuPowerLimitW,
		gpuIdleTempC + u*(gpuMaxTempC-gpuIdleTempC)/100}
	gpuUtil := &psstructs.StatValue{IntNumeratorVal: &ints[0], Unit: "%", Desc: descGPUUtilization}
	return &device.DeviceStats{
		Summary: gpuUtil,
		Stats: &psstructs.StatObject{Attributes: map[string]*psstructs.StatValue{
			StatGPUUtilization:    gpuUtil,
			StatMemoryUtilization: {IntNumeratorVal: &ints[1], Unit: "%", Desc: descMemoryUtilization},
			StatMemoryState:       {IntNumeratorVal: &ints[2], IntDenominatorVal: &ints[3], Unit: psstructs.UnitMiB, Desc: descMemoryState},
			StatPowerUsage:        {IntNumeratorVal: &ints[4], IntDenominatorVal: &ints[5], Unit: psstructs.UnitW, Desc: descPowerUsage},
			StatTemperature:       {IntNumeratorVal: &ints[6], Unit: "C", Desc: descTemperature},
		}},
		Timestamp: now,
	}
}
