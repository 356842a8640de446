//go:build cgo

// Per-process GPU attribution through NVML needs cgo: go-nvml loads
// libnvidia-ml.so.1 with dlopen through C. A build without cgo gets
// gpu_nocgo.go, which says so instead.

package driver

import (
	"fmt"
	"math"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// openNVMLLib is the real library (it is loaded at Init).
func openNVMLLib() nvmlLib { return nvml.New() }

// nvmlLib is the part of go-nvml the driver uses; nvml.New() and the mocks
// in github.com/NVIDIA/go-nvml/pkg/nvml/mock satisfy it.
type nvmlLib interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetHandleByUUID(string) (nvml.Device, nvml.Return)
}

var _ nvmlLib = nvml.Interface(nil)

// sharedNVML is NVML opened once per plugin process, on the first task
// with real GPUs; it stays open for the plugin's life.
type sharedNVML struct {
	lib nvmlLib
}

// nvmlOpener opens NVML once and remembers the result, so a client
// without NVIDIA's driver logs the reason once, not once per task.
type nvmlOpener struct {
	newLib func() nvmlLib
	once   sync.Once
	shared *sharedNVML
	err    error
}

func (o *nvmlOpener) open() (*sharedNVML, error) {
	o.once.Do(func() {
		lib := o.newLib()
		if ret := lib.Init(); ret != nvml.SUCCESS {
			o.err = fmt.Errorf("NVML unavailable (nvmlInit: %s): no per-process GPU attribution", ret.Error())
			return
		}
		o.shared = &sharedNVML{lib: lib}
	})
	return o.shared, o.err
}

// nvmlSampler attributes utilisation and memory of the task's GPUs (whole
// GPUs or MIG instances) to the task's own processes, so that GPUs shared
// by several tasks are not counted whole against each.
type nvmlSampler struct {
	devs []nvmlDev
}

type nvmlDev struct {
	uuid string
	dev  nvml.Device
	// lastSeen is the timestamp of the newest utilisation sample already
	// read: NVML returns samples newer than the timestamp it is given.
	lastSeen uint64
	// noUtil: the device has no per-process utilisation (MIG).
	noUtil bool
}

func newNVMLSampler(shared *sharedNVML, ids []string) (*nvmlSampler, error) {
	s := &nvmlSampler{}
	for _, id := range ids {
		dev, ret := shared.lib.DeviceGetHandleByUUID(id)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML has no GPU %s: %s", id, ret.Error())
		}
		s.devs = append(s.devs, nvmlDev{uuid: id, dev: dev})
	}
	return s, nil
}

func (s *nvmlSampler) close() {}

func (s *nvmlSampler) sample(pidsOf func() map[uint32]bool) (gpuUsage, error) {
	pids := pidsOf()
	var u gpuUsage
	utilDevs := 0
	for i := range s.devs {
		d := &s.devs[i]
		procs, ret := d.dev.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			return gpuUsage{}, fmt.Errorf("GPU %s: nvmlDeviceGetComputeRunningProcesses: %s", d.uuid, ret.Error())
		}
		for _, p := range procs {
			if pids[p.Pid] {
				u.MemMiB += p.UsedGpuMemory >> 20
			}
		}
		if d.noUtil {
			continue
		}
		util, ok, err := d.processUtil(pids)
		if err != nil {
			return gpuUsage{}, err
		}
		if ok {
			u.Util += util
			utilDevs++
		}
	}
	if utilDevs > 0 {
		u.Util /= float64(utilDevs)
		u.HasUtil = true
	}
	return u, nil
}

// processUtil sums the SM utilisation of the task's processes over the
// samples NVML took since the last call (their mean per process).
func (d *nvmlDev) processUtil(pids map[uint32]bool) (float64, bool, error) {
	samples, ret := d.dev.GetProcessUtilization(d.lastSeen)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND:
		// No process ran on the GPU since lastSeen: it is idle.
		return 0, true, nil
	case nvml.ERROR_NOT_SUPPORTED:
		d.noUtil = true
		return 0, false, nil
	default:
		return 0, false, fmt.Errorf("GPU %s: nvmlDeviceGetProcessUtilization: %s", d.uuid, ret.Error())
	}
	sum := map[uint32]float64{}
	n := map[uint32]int{}
	for _, s := range samples {
		if s.TimeStamp > d.lastSeen {
			d.lastSeen = s.TimeStamp
		}
		if pids[s.Pid] {
			sum[s.Pid] += float64(s.SmUtil)
			n[s.Pid]++
		}
	}
	var util float64
	for pid, total := range sum {
		util += total / float64(n[pid])
	}
	return math.Min(util, 100), true, nil
}
