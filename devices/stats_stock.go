package devices

import (
	"time"

	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// The stats of HashiCorp's nomad-device-nvidia, reproduced for simulated
// GPUs (sim_stats_shape = "nomad-device-nvidia") so that tests and demos
// cover the path of a cluster that runs the stock plugin without a GPU:
// its eleven statistics, with its names, units and descriptions, and its
// Summary, which is the memory used in MiB ("Memory state"), not the
// utilisation. Like it, MIG instances are left out of the stats. The
// devices stay labelled simulated (attribute simulated = true, driver
// version "simulated"); only the stats take the stock shape.
const (
	StatEncoderUtilization = "Encoder utilization"
	StatDecoderUtilization = "Decoder utilization"
	StatBAR1State          = "BAR1 buffer state"
	StatECCL1              = "ECC L1 errors"
	StatECCL2              = "ECC L2 errors"
	StatECCMemory          = "ECC memory errors"

	descEncoderUtilization = "Percent of time over the past sample period during which GPU Encoder was used"
	descDecoderUtilization = "Percent of time over the past sample period during which GPU Decoder was used"
	descBAR1State          = "UsedBAR1 / TotalBAR1"
	descECCL1              = "Requested L1Cache error counter for the device"
	descECCL2              = "Requested L2Cache error counter for the device"
	descECCMemory          = "Requested memory error counter for the device"

	// simBAR1UsedMiB is the BAR1 memory a simulated GPU has in use.
	simBAR1UsedMiB = 3
)

// buildStockStats converts one round of samples to nomad-device-nvidia's
// shape. Simulated GPUs only: it is built for fidelity, not for the
// allocation budget of buildStats.
func buildStockStats(samples []sample, ts time.Time) *device.StatsResponse {
	resp := &device.StatsResponse{}
	groups := map[string]*device.DeviceGroupStats{}
	for i := range samples {
		s := &samples[i]
		if s.MIG {
			continue // the stock plugin sends no stats for MIG instances
		}
		g := groups[s.Model]
		if g == nil {
			g = &device.DeviceGroupStats{Vendor: Vendor, Type: DeviceType, Name: s.Model, InstanceStats: map[string]*device.DeviceStats{}}
			groups[s.Model] = g
			resp.Groups = append(resp.Groups, g)
		}
		g.InstanceStats[s.UUID] = stockDeviceStats(s, ts)
	}
	return resp
}

// stockDeviceStats is one device's statistics in the stock shape; a figure
// the GPU did not report is "N/A", as there.
func stockDeviceStats(s *sample, ts time.Time) *device.DeviceStats {
	num := func(ok bool, v int64, unit, desc string) *structs.StatValue {
		if !ok {
			return &structs.StatValue{Unit: unit, Desc: desc, StringVal: &notAvailable}
		}
		return &structs.StatValue{Unit: unit, Desc: desc, IntNumeratorVal: &v}
	}
	frac := func(ok bool, v, of int64, unit, desc string) *structs.StatValue {
		sv := num(ok, v, unit, desc)
		if ok {
			sv.IntDenominatorVal = &of
		}
		return sv
	}
	memory := frac(s.HasMem, int64(s.MemUsedMiB), int64(s.MemTotalMiB), structs.UnitMiB, descMemoryState)
	return &device.DeviceStats{
		Summary: memory,
		Stats: &structs.StatObject{Attributes: map[string]*structs.StatValue{
			StatPowerUsage:         frac(s.HasPower && s.PowerLimitW > 0, int64(s.PowerW), int64(s.PowerLimitW), structs.UnitW, descPowerUsage),
			StatGPUUtilization:     num(s.HasUtil, int64(s.GPUUtil), "%", descGPUUtilization),
			StatMemoryUtilization:  num(s.HasUtil, int64(s.MemUtil), "%", descMemoryUtilization),
			StatEncoderUtilization: num(s.HasUtil, 0, "%", descEncoderUtilization),
			StatDecoderUtilization: num(s.HasUtil, 0, "%", descDecoderUtilization),
			StatTemperature:        num(s.HasTemp, int64(s.TempC), "C", descTemperature),
			StatMemoryState:        memory,
			StatBAR1State:          frac(true, simBAR1UsedMiB, int64(simBoard.BAR1MiB), structs.UnitMiB, descBAR1State),
			StatECCL1:              num(true, 0, "#", descECCL1),
			StatECCL2:              num(true, 0, "#", descECCL2),
			StatECCMemory:          num(true, 0, "#", descECCMemory),
		}},
		Timestamp: ts,
	}
}
