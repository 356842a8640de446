//go:build cgo

// The NVML backend needs cgo: go-nvml loads libnvidia-ml.so.1 with dlopen
// through C. A build without cgo gets nvml_nocgo.go instead, whose backend
// refuses to start and says why.

package devices

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/device"
)

// nvmlLib is the part of go-nvml's nvml.Interface the plugin uses. The real
// library (nvml.New()) satisfies it, and so do the mocks in
// github.com/NVIDIA/go-nvml/pkg/nvml/mock, which is how the tests drive it.
type nvmlLib interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	EventSetCreate() (nvml.EventSet, nvml.Return)
}

var _ nvmlLib = nvml.Interface(nil)

// openNVML is the real library (it is loaded at Init).
func openNVML() nvmlLib { return nvml.New() }

// NVMLBuiltIn reports whether this binary has the NVML backend (built
// with cgo).
const NVMLBuiltIn = true

// errNVMLUnavailable is returned when NVML cannot be initialised, typically
// because no NVIDIA driver (libnvidia-ml.so.1) is installed.
var errNVMLUnavailable = errors.New("NVML unavailable")

// applicationXids are Xid errors caused by the workload rather than the
// GPU (the same list as NVIDIA's Kubernetes device plugin); they do not make
// a device unhealthy.
var applicationXids = map[uint64]bool{
	13:  true, // graphics engine exception
	31:  true, // GPU memory page fault
	43:  true, // GPU stopped processing
	45:  true, // preemptive cleanup, due to previous errors
	68:  true, // video processor exception
	109: true, // context switch timeout
}

const (
	mib = 1 << 20
	// xidWaitMillis is how long one wait for NVML events blocks.
	xidWaitMillis = 2000
	// noInstanceID is NVML's "not a MIG instance" GPU/compute instance ID.
	noInstanceID = 0xFFFFFFFF
)

// nvmlBackend reports the GPUs NVML sees.
type nvmlBackend struct {
	lib     nvmlLib
	logger  hclog.Logger
	ignored map[string]struct{}
	// unhealthy is told about critical Xid events.
	unhealthy func(uuid, reason string)

	mu sync.RWMutex
	// handles are the devices of the last inventory, in inventory order.
	// The slice is replaced, never modified, so stats can use a snapshot.
	handles []nvmlHandle
	byUUID  map[string]struct{}
	// indexUUID remembers which UUID each index had, so a GPU that stops
	// answering is still reported (as unhealthy) under its ID.
	indexUUID map[int]string
	// models remembers each UUID's model for the same reason.
	models map[string]string

	events     nvml.EventSet
	registered map[string]bool // UUIDs registered for Xid events
	stop       chan struct{}
	done       chan struct{}
	closeOnce  sync.Once
}

// nvmlHandle is one schedulable device and what stats need about it.
type nvmlHandle struct {
	uuid        string
	model       string
	dev         nvml.Device
	mig         bool
	parentUUID  string
	giID        uint32 // MIG only: GPU instance ID
	memTotalMiB uint64
	powerLimitW uint32
}

// newNVMLBackend initialises NVML. It returns an error wrapping
// errNVMLUnavailable when the library cannot be initialised.
func newNVMLBackend(lib nvmlLib, logger hclog.Logger, cfg Config, unhealthy func(uuid, reason string)) (*nvmlBackend, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvmlInit: %s", errNVMLUnavailable, ret.Error())
	}
	b := &nvmlBackend{
		lib:        lib,
		logger:     logger,
		ignored:    cfg.IgnoredGPUIDs,
		unhealthy:  unhealthy,
		byUUID:     map[string]struct{}{},
		indexUUID:  map[int]string{},
		models:     map[string]string{},
		registered: map[string]bool{},
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		logger.Warn("NVML event set unavailable: critical Xid errors will not mark GPUs unhealthy", "error", ret.Error())
		close(b.done)
		return b, nil
	}
	b.events = set
	go b.watchXid()
	return b, nil
}

func (b *nvmlBackend) close() {
	b.closeOnce.Do(func() {
		close(b.stop)
		<-b.done
		if b.events != nil {
			b.events.Free()
		}
		if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
			b.logger.Warn("nvmlShutdown failed", "error", ret.Error())
		}
	})
}

func nvmlErr(call string, ret nvml.Return) string {
	return fmt.Sprintf("nvml %s: %s", call, ret.Error())
}

func (b *nvmlBackend) isIgnored(uuid string) bool {
	_, ok := b.ignored[uuid]
	return ok
}

// inventory enumerates whole GPUs, or their MIG instances where MIG is on.
func (b *nvmlBackend) inventory() (inventory, error) {
	var inv inventory
	if v, ret := b.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	}
	if v, ret := b.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		inv.CUDADriverVersion = fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
	}
	count, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return inv, fmt.Errorf("counting GPUs: %s", nvmlErr("DeviceGetCount", ret))
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	var handles []nvmlHandle
	for i := 0; i < count; i++ {
		dev, ret := b.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			inv.GPUs = b.appendLost(inv.GPUs, i, nvmlErr("DeviceGetHandleByIndex", ret))
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			inv.GPUs = b.appendLost(inv.GPUs, i, nvmlErr("GetUUID", ret))
			continue
		}
		b.indexUUID[i] = uuid
		if b.isIgnored(uuid) {
			continue
		}
		g, h := b.describe(dev, uuid)
		migOn, migErr := migEnabled(dev)
		if migErr != "" && g.Err == "" {
			g.Err = migErr
		}
		if migOn && g.Err == "" {
			gs, hs := b.migInstances(dev, g)
			inv.GPUs = append(inv.GPUs, gs...)
			handles = append(handles, hs...)
			continue
		}
		inv.GPUs = append(inv.GPUs, g)
		handles = append(handles, h)
	}
	b.handles = handles
	b.byUUID = make(map[string]struct{}, len(inv.GPUs))
	for _, g := range inv.GPUs {
		b.byUUID[g.UUID] = struct{}{}
	}
	for _, h := range handles {
		b.registerXid(h)
	}
	return inv, nil
}

// appendLost reports a GPU that no longer answers under the UUID it had at
// that index, unhealthy. A GPU never seen before cannot be named and is
// only logged.
func (b *nvmlBackend) appendLost(gpus []gpu, index int, reason string) []gpu {
	uuid, ok := b.indexUUID[index]
	if !ok {
		b.logger.Warn("skipping GPU that cannot be identified", "index", index, "error", reason)
		return gpus
	}
	if b.isIgnored(uuid) {
		return gpus
	}
	return append(gpus, gpu{UUID: uuid, Model: b.modelOf(uuid, ""), Err: reason})
}

// modelOf returns name, remembering it, or the last known model of uuid.
func (b *nvmlBackend) modelOf(uuid, name string) string {
	if name != "" {
		b.models[uuid] = name
		return name
	}
	if m, ok := b.models[uuid]; ok {
		return m
	}
	return "Unknown NVIDIA GPU"
}

// describe queries a whole GPU's static properties.
func (b *nvmlBackend) describe(dev nvml.Device, uuid string) (gpu, nvmlHandle) {
	g := gpu{UUID: uuid}
	var errs []string
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		errs = append(errs, nvmlErr("GetName", ret))
	}
	g.Model = b.modelOf(uuid, name)
	if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
		g.MemoryMiB = mem.Total / mib
	} else {
		errs = append(errs, nvmlErr("GetMemoryInfo", ret))
	}
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		g.PCIBusID = cString(pci.BusId[:])
	} else {
		errs = append(errs, nvmlErr("GetPciInfo", ret))
	}
	if major, minor, ret := dev.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	} else {
		errs = append(errs, nvmlErr("GetCudaComputeCapability", ret))
	}
	if mw, ret := dev.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		g.PowerLimitW = mw / 1000
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		errs = append(errs, nvmlErr("GetEnforcedPowerLimit", ret))
	}
	g.Board = readBoard(dev, b.logger, uuid)
	g.Err = strings.Join(errs, "; ")
	return g, nvmlHandle{uuid: uuid, model: g.Model, dev: dev, memTotalMiB: g.MemoryMiB, powerLimitW: g.PowerLimitW}
}

// migEnabled reports whether MIG mode is currently on.
func migEnabled(dev nvml.Device) (bool, string) {
	current, _, ret := dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		return current == nvml.DEVICE_MIG_ENABLE, ""
	case nvml.ERROR_NOT_SUPPORTED:
		return false, ""
	default:
		return false, nvmlErr("GetMigMode", ret)
	}
}

// migInstances lists the MIG devices of a GPU in MIG mode; each is its own
// Nomad device and inherits the parent's PCI bus ID and compute capability.
func (b *nvmlBackend) migInstances(parent nvml.Device, p gpu) ([]gpu, []nvmlHandle) {
	max, ret := parent.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		p.Err = nvmlErr("GetMaxMigDeviceCount", ret)
		return []gpu{p}, nil
	}
	var gs []gpu
	var hs []nvmlHandle
	for i := 0; i < max; i++ {
		dev, ret := parent.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // no MIG device at this index
		}
		if ret != nvml.SUCCESS {
			b.logger.Warn("skipping MIG device that cannot be opened", "gpu", p.UUID, "index", i, "error", ret.Error())
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			b.logger.Warn("skipping MIG device without UUID", "gpu", p.UUID, "index", i, "error", ret.Error())
			continue
		}
		if b.isIgnored(uuid) {
			continue
		}
		g := gpu{
			UUID:              uuid,
			PCIBusID:          p.PCIBusID,
			ComputeCapability: p.ComputeCapability,
			MIG:               true,
			ParentUUID:        p.UUID,
			Board:             p.Board, // as the stock plugin: the parent's
		}
		var errs []string
		name, ret := dev.GetName()
		if ret != nvml.SUCCESS {
			errs = append(errs, nvmlErr("GetName", ret))
			name = ""
		}
		if _, known := b.models[uuid]; name == "" && !known {
			name = p.Model + " MIG"
		}
		g.Model = b.modelOf(uuid, name)
		if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryMiB = mem.Total / mib
		} else {
			errs = append(errs, nvmlErr("GetMemoryInfo", ret))
		}
		giID := uint32(noInstanceID)
		if id, ret := dev.GetGpuInstanceId(); ret == nvml.SUCCESS {
			giID = uint32(id)
		}
		g.Err = strings.Join(errs, "; ")
		gs = append(gs, g)
		hs = append(hs, nvmlHandle{uuid: uuid, model: g.Model, dev: dev, mig: true, parentUUID: p.UUID, giID: giID, memTotalMiB: g.MemoryMiB})
	}
	return gs, hs
}

// sample queries each device's utilisation, memory, power and temperature.
// It allocates nothing on the success path.
func (b *nvmlBackend) sample(buf []sample) []sample {
	b.mu.RLock()
	handles := b.handles
	b.mu.RUnlock()

	buf = buf[:0]
	for i := range handles {
		h := &handles[i]
		s := sample{UUID: h.uuid, Model: h.model, MIG: h.mig, MemTotalMiB: h.memTotalMiB, PowerLimitW: h.powerLimitW}
		var failed []string
		if u, ret := h.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
			s.GPUUtil, s.MemUtil, s.HasUtil = u.Gpu, u.Memory, true
		} else if ret != nvml.ERROR_NOT_SUPPORTED {
			failed = append(failed, nvmlErr("GetUtilizationRates", ret))
		}
		if m, ret := h.dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			s.MemUsedMiB, s.MemTotalMiB, s.HasMem = m.Used/mib, m.Total/mib, true
		} else if ret != nvml.ERROR_NOT_SUPPORTED {
			failed = append(failed, nvmlErr("GetMemoryInfo", ret))
		}
		if !h.mig {
			// Power and temperature belong to the whole board; MIG
			// instances do not report them.
			if mw, ret := h.dev.GetPowerUsage(); ret == nvml.SUCCESS {
				s.PowerW, s.HasPower = mw/1000, true
			} else if ret != nvml.ERROR_NOT_SUPPORTED {
				failed = append(failed, nvmlErr("GetPowerUsage", ret))
			}
			if t, ret := h.dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
				s.TempC, s.HasTemp = t, true
			} else if ret != nvml.ERROR_NOT_SUPPORTED {
				failed = append(failed, nvmlErr("GetTemperature", ret))
			}
		}
		if failed != nil {
			s.Err = strings.Join(failed, "; ")
		}
		buf = append(buf, s)
	}
	return buf
}

// reserve hands the task its GPUs by UUID. NVIDIA_VISIBLE_DEVICES is what
// the NVIDIA container runtime reads (Docker); CUDA_VISIBLE_DEVICES limits
// CUDA programs that run without a container (raw_exec, exec). UUIDs are
// used rather than indices because indices differ inside a container.
func (b *nvmlBackend) reserve(ids []string) (*device.ContainerReservation, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := checkKnown(ids, b.byUUID); err != nil {
		return nil, err
	}
	return &device.ContainerReservation{Envs: visibleDevicesEnv(ids)}, nil
}

// registerXid subscribes a device to critical Xid events (once per UUID).
// Must be called with b.mu held.
func (b *nvmlBackend) registerXid(h nvmlHandle) {
	if b.events == nil || h.mig || b.registered[h.uuid] {
		return
	}
	b.registered[h.uuid] = true
	supported, ret := h.dev.GetSupportedEventTypes()
	if ret != nvml.SUCCESS {
		b.logger.Debug("cannot read supported NVML event types", "gpu", h.uuid, "error", ret.Error())
		return
	}
	if supported&nvml.EventTypeXidCriticalError == 0 {
		b.logger.Debug("GPU does not report Xid events", "gpu", h.uuid)
		return
	}
	if ret := h.dev.RegisterEvents(nvml.EventTypeXidCriticalError, b.events); ret != nvml.SUCCESS {
		b.logger.Warn("cannot watch GPU for Xid errors", "gpu", h.uuid, "error", ret.Error())
	}
}

// watchXid waits for critical Xid events and marks the affected devices
// unhealthy until the plugin restarts (an Xid that is not an application
// error usually needs a GPU reset or reboot).
func (b *nvmlBackend) watchXid() {
	defer close(b.done)
	for {
		select {
		case <-b.stop:
			return
		default:
		}
		e, ret := b.events.Wait(xidWaitMillis)
		switch ret {
		case nvml.SUCCESS:
			b.handleEvent(e)
		case nvml.ERROR_TIMEOUT:
		default:
			b.logger.Debug("waiting for NVML events failed", "error", ret.Error())
			select {
			case <-b.stop:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

func (b *nvmlBackend) handleEvent(e nvml.EventData) {
	if e.EventType != nvml.EventTypeXidCriticalError {
		return
	}
	xid := e.EventData
	if applicationXids[xid] {
		b.logger.Info("application Xid error, GPU stays healthy", "xid", xid)
		return
	}
	reason := fmt.Sprintf("critical Xid %d error reported by NVML at %s", xid, time.Now().UTC().Format(time.RFC3339))

	var uuid string
	if e.Device != nil {
		if u, ret := e.Device.GetUUID(); ret == nvml.SUCCESS {
			uuid = u
		}
	}
	b.mu.RLock()
	handles := b.handles
	b.mu.RUnlock()
	var hit []string
	for _, h := range handles {
		switch {
		case uuid == "": // cannot tell which GPU: all of them
		case h.uuid == uuid:
		case h.mig && h.parentUUID == uuid &&
			(e.GpuInstanceId == noInstanceID || h.giID == noInstanceID || h.giID == e.GpuInstanceId):
		default:
			continue
		}
		hit = append(hit, h.uuid)
	}
	b.logger.Error("critical Xid error: marking GPUs unhealthy", "xid", xid, "gpu", uuid, "devices", hit)
	for _, id := range hit {
		b.unhealthy(id, reason)
	}
}

// cString converts a NUL-terminated byte array from NVML.
func cString(b []uint8) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
