package devices

import (
	"context"
	"time"

	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// Statistic names, units and descriptions. The names are those of
// hashicorp/nomad-device-nvidia, so dashboards built on it keep working.
// The summary of every device is its GPU utilisation (the stock plugin's
// is the memory used). Steward's idle-GPU reclaim reads neither summary:
// it reads the "GPU utilization" statistic in %, which both plugins send
// (controller/gpuutil.go).
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

	// statsPerDevice is how many statistics each device reports.
	statsPerDevice = 5
	// intsPerDevice is how many integers they need at most.
	intsPerDevice = 7
)

// notAvailable is the value of a statistic a device does not report.
var notAvailable = "N/A"

// statsLoop collects statistics every interval and streams them.
func (p *Plugin) statsLoop(ctx context.Context, be backend, interval time.Duration, build statsBuild, out chan<- *device.StatsResponse) {
	defer close(out)
	if be == nil {
		return
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var buf []sample
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			timer.Reset(interval)
		}
		var resp *device.StatsResponse
		buf, resp = p.collectStats(be, buf, time.Now(), build)
		select {
		case <-ctx.Done():
			return
		case out <- resp:
		}
	}
}

// statsBuild converts one round of samples to Nomad's types.
type statsBuild func(samples []sample, ts time.Time) *device.StatsResponse

// statsBuilder is the conversion the configuration asks for: steward-gpu's
// own shape, or nomad-device-nvidia's for simulated GPUs standing in for it.
func statsBuilder(cfg Config) statsBuild {
	if cfg.Backend == BackendSim && cfg.SimStatsShape == StatsShapeStock {
		return buildStockStats
	}
	return buildStats
}

// collectStats runs one stats round: query the backend, update health,
// build Nomad's response. buf is reused between rounds.
func (p *Plugin) collectStats(be backend, buf []sample, now time.Time, build statsBuild) ([]sample, *device.StatsResponse) {
	buf = be.sample(buf)
	p.health.updateStats(buf)
	return buf, build(buf, now)
}

// buildStats converts one round of samples to Nomad's types. It allocates
// the values of all devices in a few slices rather than one by one: for 8
// GPUs a round costs about 25 heap allocations.
func buildStats(samples []sample, ts time.Time) *device.StatsResponse {
	n := len(samples)
	if n == 0 {
		return &device.StatsResponse{}
	}

	// Group by model, in order of first appearance (usually one group).
	var names [4]string
	models := names[:0]
	counts := [4]int{}
	for i := range samples {
		if !containsString(models, samples[i].Model) {
			models = append(models, samples[i].Model)
		}
	}
	if len(models) <= len(counts) {
		for i := range samples {
			counts[indexOf(models, samples[i].Model)]++
		}
	}

	groups := make([]device.DeviceGroupStats, len(models))
	resp := &device.StatsResponse{Groups: make([]*device.DeviceGroupStats, len(models))}
	for gi, m := range models {
		hint := n
		if len(models) <= len(counts) {
			hint = counts[gi]
		}
		groups[gi] = device.DeviceGroupStats{
			Vendor:        Vendor,
			Type:          DeviceType,
			Name:          m,
			InstanceStats: make(map[string]*device.DeviceStats, hint),
		}
		resp.Groups[gi] = &groups[gi]
	}

	devStats := make([]device.DeviceStats, n)
	objects := make([]structs.StatObject, n)
	values := make([]structs.StatValue, n*statsPerDevice)
	ints := make([]int64, n*intsPerDevice)
	for i := range samples {
		s := &samples[i]
		v := values[i*statsPerDevice : (i+1)*statsPerDevice : (i+1)*statsPerDevice]
		in := ints[i*intsPerDevice : (i+1)*intsPerDevice : (i+1)*intsPerDevice]

		gpuUtil, memUtil, memState, power, temp := &v[0], &v[1], &v[2], &v[3], &v[4]
		gpuUtil.Unit, gpuUtil.Desc = "%", descGPUUtilization
		memUtil.Unit, memUtil.Desc = "%", descMemoryUtilization
		if s.HasUtil {
			in[0], in[1] = int64(s.GPUUtil), int64(s.MemUtil)
			gpuUtil.IntNumeratorVal, memUtil.IntNumeratorVal = &in[0], &in[1]
		} else {
			gpuUtil.StringVal, memUtil.StringVal = &notAvailable, &notAvailable
		}
		memState.Unit, memState.Desc = structs.UnitMiB, descMemoryState
		if s.HasMem {
			in[2], in[3] = int64(s.MemUsedMiB), int64(s.MemTotalMiB)
			memState.IntNumeratorVal, memState.IntDenominatorVal = &in[2], &in[3]
		} else {
			memState.StringVal = &notAvailable
		}
		power.Unit, power.Desc = structs.UnitW, descPowerUsage
		if s.HasPower {
			in[4] = int64(s.PowerW)
			power.IntNumeratorVal = &in[4]
			if s.PowerLimitW > 0 {
				in[5] = int64(s.PowerLimitW)
				power.IntDenominatorVal = &in[5]
			}
		} else {
			power.StringVal = &notAvailable
		}
		temp.Unit, temp.Desc = "C", descTemperature
		if s.HasTemp {
			in[6] = int64(s.TempC)
			temp.IntNumeratorVal = &in[6]
		} else {
			temp.StringVal = &notAvailable
		}

		objects[i].Attributes = map[string]*structs.StatValue{
			StatGPUUtilization:    gpuUtil,
			StatMemoryUtilization: memUtil,
			StatMemoryState:       memState,
			StatPowerUsage:        power,
			StatTemperature:       temp,
		}
		devStats[i] = device.DeviceStats{Summary: gpuUtil, Stats: &objects[i], Timestamp: ts}
		groups[indexOf(models, s.Model)].InstanceStats[s.UUID] = &devStats[i]
	}
	return resp
}

func containsString(list []string, s string) bool {
	return indexOf(list, s) >= 0
}

func indexOf(list []string, s string) int {
	for i := range list {
		if list[i] == s {
			return i
		}
	}
	return -1
}
