package devices

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// Device group attributes (constraints read them as ${device.attr.NAME}).
// memory, power and driver_version have the same names and units as in
// hashicorp/nomad-device-nvidia.
const (
	AttrMemory            = "memory"             // int, MiB
	AttrPower             = "power"              // int, W (enforced power limit)
	AttrDriverVersion     = "driver_version"     // string
	AttrCUDAVersion       = "cuda_version"       // string, e.g. "12.4"
	AttrComputeCapability = "compute_capability" // string, e.g. "8.0"
	AttrMIG               = "mig"                // bool: devices are MIG instances
	AttrSimulated         = "simulated"          // bool: devices are simulated
)

// fingerprintLoop enumerates GPUs every period, and at once when a device's
// health changes, and sends the device groups whenever they differ from
// the last ones sent.
func (p *Plugin) fingerprintLoop(ctx context.Context, be backend, period time.Duration, out chan<- *device.FingerprintResponse) {
	defer close(out)
	if be == nil {
		// Disabled, or NVML is unavailable (logged once when the backend
		// was started): no GPUs. Closing the stream tells Nomad so.
		return
	}

	timer := time.NewTimer(0)
	defer timer.Stop()
	var (
		last    inventory
		lastSig string
		sent    bool
	)
	changed := p.health.wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			timer.Reset(period)
		case <-changed:
		}
		// Take the next change channel before reading health, so a change
		// made while this round runs wakes the next one.
		changed = p.health.wait()

		inv, err := be.inventory()
		if err != nil {
			// Keep reporting the GPUs we knew, as unhealthy, rather than
			// dropping them or failing the stream.
			p.logger.Error("enumerating GPUs failed", "error", err)
			inv = last
			inv.GPUs = append([]gpu(nil), last.GPUs...)
			for i := range inv.GPUs {
				inv.GPUs[i].Err = err.Error()
			}
		}
		last = inv
		for _, g := range inv.GPUs {
			p.health.set(g.UUID, srcQuery, g.Err)
		}

		groups := p.deviceGroups(inv)
		sig := signature(groups)
		if sent && sig == lastSig {
			continue
		}
		p.logFingerprint(groups)
		select {
		case <-ctx.Done():
			return
		case out <- device.NewFingerprint(groups...):
		}
		sent, lastSig = true, sig
	}
}

// deviceGroups groups GPUs by model into Nomad device groups, sorted by
// name. Attributes come from the group's first GPU.
func (p *Plugin) deviceGroups(inv inventory) []*device.DeviceGroup {
	byModel := map[string]*device.DeviceGroup{}
	var names []string
	for _, g := range inv.GPUs {
		grp, ok := byModel[g.Model]
		if !ok {
			grp = &device.DeviceGroup{
				Vendor:     Vendor,
				Type:       DeviceType,
				Name:       g.Model,
				Attributes: groupAttributes(inv, g),
			}
			byModel[g.Model] = grp
			names = append(names, g.Model)
		}
		reason := p.health.reason(g.UUID)
		dev := &device.Device{
			ID:         g.UUID,
			Healthy:    reason == "",
			HealthDesc: reason,
		}
		if g.PCIBusID != "" {
			dev.HwLocality = &device.DeviceLocality{PciBusID: g.PCIBusID}
		}
		grp.Devices = append(grp.Devices, dev)
	}
	sort.Strings(names)
	groups := make([]*device.DeviceGroup, 0, len(names))
	for _, n := range names {
		groups = append(groups, byModel[n])
	}
	return groups
}

func groupAttributes(inv inventory, g gpu) map[string]*structs.Attribute {
	attrs := map[string]*structs.Attribute{
		AttrMIG:       structs.NewBoolAttribute(g.MIG),
		AttrSimulated: structs.NewBoolAttribute(g.Simulated),
	}
	if g.MemoryMiB > 0 {
		attrs[AttrMemory] = structs.NewIntAttribute(int64(g.MemoryMiB), structs.UnitMiB)
	}
	if g.PowerLimitW > 0 {
		attrs[AttrPower] = structs.NewIntAttribute(int64(g.PowerLimitW), structs.UnitW)
	}
	if inv.DriverVersion != "" {
		attrs[AttrDriverVersion] = structs.NewStringAttribute(inv.DriverVersion)
	}
	if inv.CUDADriverVersion != "" {
		attrs[AttrCUDAVersion] = structs.NewStringAttribute(inv.CUDADriverVersion)
	}
	if g.ComputeCapability != "" {
		attrs[AttrComputeCapability] = structs.NewStringAttribute(g.ComputeCapability)
	}
	g.Board.add(attrs)
	return attrs
}

// signature is a canonical text form of the groups, to detect changes.
func signature(groups []*device.DeviceGroup) string {
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "%s/%s/%s{", g.Vendor, g.Type, g.Name)
		keys := make([]string, 0, len(g.Attributes))
		for k := range g.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%s,", k, g.Attributes[k].GoString())
		}
		for _, d := range g.Devices {
			pci := ""
			if d.HwLocality != nil {
				pci = d.HwLocality.PciBusID
			}
			fmt.Fprintf(&b, "[%s %t %q %s]", d.ID, d.Healthy, d.HealthDesc, pci)
		}
		b.WriteString("}")
	}
	return b.String()
}

func (p *Plugin) logFingerprint(groups []*device.DeviceGroup) {
	total, unhealthy := 0, 0
	for _, g := range groups {
		for _, d := range g.Devices {
			total++
			if !d.Healthy {
				unhealthy++
				p.logger.Warn("GPU unhealthy", "id", d.ID, "model", g.Name, "reason", d.HealthDesc)
			}
		}
	}
	p.logger.Info("GPUs fingerprinted", "devices", total, "unhealthy", unhealthy, "groups", len(groups))
}
