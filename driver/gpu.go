package driver

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-steward/steward/devices"
)

// envVisibleDevices is how the device plugin names a task's GPUs.
const envVisibleDevices = "NVIDIA_VISIBLE_DEVICES"

// gpuUsage is what a task's own processes do on its GPUs in one sample.
type gpuUsage struct {
	// Util is the mean utilisation of the task's GPUs, percent, counting
	// only the task's processes. HasUtil is false where the hardware
	// cannot say (MIG instances report no per-process utilisation).
	Util    float64
	HasUtil bool
	// MemMiB is GPU memory the task's processes hold, all GPUs together.
	MemMiB uint64
}

// gpuSampler attributes GPU activity to a task's processes.
type gpuSampler interface {
	// sample reads one round; pids lists the task's processes (called
	// only by samplers that need them: a /proc scan is not free).
	sample(pids func() map[uint32]bool) (gpuUsage, error)
	close()
}

// taskGPUs returns the GPU IDs the device plugin gave the task.
func taskGPUs(deviceEnv map[string]string) []string {
	var ids []string
	for _, id := range strings.Split(deviceEnv[envVisibleDevices], ",") {
		if id = strings.TrimSpace(id); id != "" && id != "void" && id != "none" && id != "all" {
			ids = append(ids, id)
		}
	}
	return ids
}

// newGPUSampler picks how to attribute a task's GPU activity, or returns
// nil when the task has no GPUs or attribution is off.
func newGPUSampler(backend string, deviceEnv map[string]string, openNVML func() (*sharedNVML, error)) (gpuSampler, error) {
	ids := taskGPUs(deviceEnv)
	files := deviceEnv[devices.EnvSimActivityFiles]
	switch {
	case backend == GPUBackendNone || len(ids) == 0:
		return nil, nil
	case backend == GPUBackendSim || backend == GPUBackendAuto && files != "":
		if files == "" {
			return nil, fmt.Errorf("gpu_backend %q, but the task has no %s (is steward-gpu running with backend = \"sim\"?)", GPUBackendSim, devices.EnvSimActivityFiles)
		}
		return newSimSampler(strings.Split(files, ",")), nil
	}
	lib, err := openNVML()
	if err != nil {
		return nil, err
	}
	return newNVMLSampler(lib, ids)
}

// simSampler reads the activity files the steward-gpu plugin's simulated
// backend gives a task. A simulated GPU has no processes: everything on it
// is the task's, which is what its activity file says.
type simSampler struct {
	files []string
	last  []gpuActivity // last valid reading per file
}

type gpuActivity struct {
	util   float64
	memMiB uint64
}

func newSimSampler(files []string) *simSampler {
	return &simSampler{files: files, last: make([]gpuActivity, len(files))}
}

func (s *simSampler) close() {}

func (s *simSampler) sample(func() map[uint32]bool) (gpuUsage, error) {
	var u gpuUsage
	for i, f := range s.files {
		// The plugin's files are in directories only root can write; still,
		// the driver (root) follows no symlink to read them.
		f = strings.TrimSpace(f)
		raw, err := readNoFollow(filepath.Dir(f), filepath.Base(f), 256)
		switch {
		case errors.Is(err, os.ErrNotExist):
			s.last[i] = gpuActivity{}
		case err != nil:
			return gpuUsage{}, fmt.Errorf("reading simulated GPU activity: %w", err)
		default:
			// An empty or half-written file keeps the last reading, as in
			// the device plugin.
			if act, ok := parseSimActivity(string(raw)); ok {
				s.last[i] = act
			}
		}
		u.Util += s.last[i].util
		u.MemMiB += s.last[i].memMiB
	}
	u.Util /= float64(len(s.files))
	u.HasUtil = true
	return u, nil
}

// parseSimActivity parses "<utilisation %> [<memory MiB>]", the format of
// the device plugin's activity files (docs/devices.md).
func parseSimActivity(raw string) (gpuActivity, bool) {
	f := strings.Fields(raw)
	if len(f) == 0 {
		return gpuActivity{}, false
	}
	u, err := strconv.ParseFloat(f[0], 64)
	if err != nil || math.IsNaN(u) {
		return gpuActivity{}, false
	}
	act := gpuActivity{util: math.Max(0, math.Min(100, u))}
	if len(f) > 1 {
		m, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return gpuActivity{}, false
		}
		act.memMiB = m
	}
	return act, true
}

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
