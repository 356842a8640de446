//go:build cgo

package devices

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	hclog "github.com/hashicorp/go-hclog"
)

// readBoard queries what nomad-device-nvidia also fingerprints about a
// whole GPU (boardattrs.go). A query that fails leaves its attribute out
// and does not make the GPU unhealthy: these describe the board, they do
// not say whether it computes.
//
// The clocks are the maximum ones, where the stock plugin reads the clocks
// of the moment (it fingerprints once, so it keeps whatever the GPU ran at
// then): a current clock would change the fingerprint, and what a
// constraint on it matches, every time the GPU idles or boosts.
func readBoard(dev nvml.Device, logger hclog.Logger, uuid string) boardAttrs {
	var b boardAttrs
	skip := func(call string, ret nvml.Return) {
		if ret != nvml.ERROR_NOT_SUPPORTED {
			logger.Debug("GPU attribute left out", "gpu", uuid, "call", call, "error", ret.Error())
		}
	}
	if bar1, ret := dev.GetBAR1MemoryInfo(); ret == nvml.SUCCESS {
		b.BAR1MiB = bar1.Bar1Total / mib
	} else {
		skip("GetBAR1MemoryInfo", ret)
	}
	if mhz, ret := dev.GetMaxClockInfo(nvml.CLOCK_GRAPHICS); ret == nvml.SUCCESS {
		b.CoresClockMHz = mhz
	} else {
		skip("GetMaxClockInfo(graphics)", ret)
	}
	if mhz, ret := dev.GetMaxClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		b.MemoryClockMHz = mhz
	} else {
		skip("GetMaxClockInfo(memory)", ret)
	}
	gen, ret1 := dev.GetMaxPcieLinkGeneration()
	width, ret2 := dev.GetMaxPcieLinkWidth()
	switch {
	case ret1 != nvml.SUCCESS:
		skip("GetMaxPcieLinkGeneration", ret1)
	case ret2 != nvml.SUCCESS:
		skip("GetMaxPcieLinkWidth", ret2)
	default:
		b.PCIBandwidthMBs = pciBandwidthMBs(gen, width)
	}
	if st, ret := dev.GetDisplayMode(); ret == nvml.SUCCESS {
		b.DisplayState = enableState(int32(st))
	} else {
		skip("GetDisplayMode", ret)
	}
	if st, ret := dev.GetPersistenceMode(); ret == nvml.SUCCESS {
		b.PersistenceMode = enableState(int32(st))
	} else {
		skip("GetPersistenceMode", ret)
	}
	return b
}
