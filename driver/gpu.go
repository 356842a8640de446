package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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

// gpuActivity is one reading of an activity file, in the format the
// device plugin owns (devices.ParseSimActivity).
type gpuActivity = devices.SimActivity

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
			if act, ok := devices.ParseSimActivity(raw); ok {
				s.last[i] = act
			}
		}
		u.Util += s.last[i].Util
		u.MemMiB += s.last[i].MemMiB
	}
	u.Util /= float64(len(s.files))
	u.HasUtil = true
	return u, nil
}
