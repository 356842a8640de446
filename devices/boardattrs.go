package devices

import (
	"strconv"

	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// Attributes HashiCorp's nomad-device-nvidia fingerprints that steward-gpu
// sends too, with the same names and units, so that a jobspec constraint
// written for one plugin (${device.attr.bar1} >= 16 GiB) matches under the
// other (docs/reference/devices.md, "Switching from nomad-device-nvidia").
const (
	AttrBAR1            = "bar1"             // int, MiB: BAR1 memory
	AttrCoresClock      = "cores_clock"      // int, MHz: graphics clock
	AttrMemoryClock     = "memory_clock"     // int, MHz: memory clock
	AttrPCIBandwidth    = "pci_bandwidth"    // int, MB/s: PCIe link
	AttrDisplayState    = "display_state"    // string: "1" on, "0" off
	AttrPersistenceMode = "persistence_mode" // string: "1" on, "0" off
)

// boardAttrs are a GPU board's properties for those attributes. Zero or
// empty means unknown: the attribute is left out, as the stock plugin
// leaves out what NVML does not report.
type boardAttrs struct {
	BAR1MiB         uint64
	CoresClockMHz   uint32
	MemoryClockMHz  uint32
	PCIBandwidthMBs uint32
	// DisplayState and PersistenceMode are NVML's enable states as the
	// stock plugin prints them: "1" (enabled) or "0" (disabled).
	DisplayState    string
	PersistenceMode string
}

// add puts the known attributes in attrs.
func (b boardAttrs) add(attrs map[string]*structs.Attribute) {
	ints := []struct {
		name string
		v    uint64
		unit string
	}{
		{AttrBAR1, b.BAR1MiB, structs.UnitMiB},
		{AttrCoresClock, uint64(b.CoresClockMHz), structs.UnitMHz},
		{AttrMemoryClock, uint64(b.MemoryClockMHz), structs.UnitMHz},
		{AttrPCIBandwidth, uint64(b.PCIBandwidthMBs), structs.UnitMBPerS},
	}
	for _, a := range ints {
		if a.v > 0 {
			attrs[a.name] = structs.NewIntAttribute(int64(a.v), a.unit)
		}
	}
	if b.DisplayState != "" {
		attrs[AttrDisplayState] = structs.NewStringAttribute(b.DisplayState)
	}
	if b.PersistenceMode != "" {
		attrs[AttrPersistenceMode] = structs.NewStringAttribute(b.PersistenceMode)
	}
}

// enableState prints an NVML enable state (0 disabled, 1 enabled) as the
// stock plugin does: it formats go-nvml's EnableState, a number with no
// names, with %v. (Releases before its move to go-nvml said "Enabled" and
// "Disabled".)
func enableState(v int32) string { return strconv.Itoa(int(v)) }

// pciBandwidthMBs is a PCIe link's bandwidth in MB/s as the stock plugin
// computes it from the link's maximum generation and width: per lane 1024
// MB/s for generation 3, 2048 for 4, 3072 for 5, 4096 for 6; 0 (unknown)
// for other generations. The same figures keep constraints on
// pci_bandwidth matching after a switch.
func pciBandwidthMBs(generation, width int) uint32 {
	perLane := map[int]int{3: 1 << 10, 4: 2 << 10, 5: 3 << 10, 6: 4 << 10}[generation]
	if width <= 0 {
		return 0
	}
	return uint32(perLane * width)
}
