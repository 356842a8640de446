package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// sharedGPU is a mock GPU that three processes use: 100 and 101 are the
// task's, 200 is another task's.
func sharedGPU() *mock.Device {
	return &mock.Device{
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{
				{Pid: 100, UsedGpuMemory: 3000 << 20},
				{Pid: 101, UsedGpuMemory: 1000 << 20},
				{Pid: 200, UsedGpuMemory: 30000 << 20},
			}, nvml.SUCCESS
		},
		GetProcessUtilizationFunc: func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			if last >= 3 {
				return nil, nvml.ERROR_NOT_FOUND // nothing ran since
			}
			return []nvml.ProcessUtilizationSample{
				{Pid: 100, TimeStamp: 1, SmUtil: 20},
				{Pid: 100, TimeStamp: 2, SmUtil: 40}, // mean 30
				{Pid: 101, TimeStamp: 2, SmUtil: 5},
				{Pid: 200, TimeStamp: 3, SmUtil: 60},
			}, nvml.SUCCESS
		},
	}
}

// migInstance has running processes but, as MIG instances do, no
// per-process utilisation.
func migInstance() *mock.Device {
	return &mock.Device{
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 512 << 20}, {Pid: 300, UsedGpuMemory: 9000 << 20}}, nvml.SUCCESS
		},
		GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return nil, nvml.ERROR_NOT_SUPPORTED
		},
	}
}

func mockNVML(devs map[string]nvml.Device) *mock.Interface {
	return &mock.Interface{
		InitFunc:     func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return { return nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			if d, ok := devs[uuid]; ok {
				return d, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
}

func TestNVMLAttribution(t *testing.T) {
	lib := mockNVML(map[string]nvml.Device{"GPU-shared": sharedGPU(), "MIG-1": migInstance()})
	opener := &nvmlOpener{newLib: func() nvmlLib { return lib }}
	ours := func() map[uint32]bool { return map[uint32]bool{100: true, 101: true} }

	t.Run("a GPU shared with another task", func(t *testing.T) {
		s, err := newGPUSampler(GPUBackendAuto, map[string]string{envVisibleDevices: "GPU-shared"}, opener.open)
		if err != nil {
			t.Fatal(err)
		}
		u, err := s.sample(ours)
		if err != nil {
			t.Fatal(err)
		}
		// 30 (pid 100's mean) + 5; pid 200's 60% is not the task's.
		if !u.HasUtil || u.Util != 35 || u.MemMiB != 4000 {
			t.Errorf("usage %+v, want 35%% and 4000 MiB", u)
		}
		// The next round asks only for newer samples: none, so idle.
		u, err = s.sample(ours)
		if err != nil || !u.HasUtil || u.Util != 0 || u.MemMiB != 4000 {
			t.Errorf("second round %+v %v, want 0%% and 4000 MiB", u, err)
		}
	})
	t.Run("a MIG instance: memory only", func(t *testing.T) {
		s, err := newGPUSampler(GPUBackendNVML, map[string]string{envVisibleDevices: "MIG-1"}, opener.open)
		if err != nil {
			t.Fatal(err)
		}
		u, err := s.sample(ours)
		if err != nil || u.HasUtil || u.MemMiB != 512 {
			t.Errorf("usage %+v %v, want memory 512 MiB and no utilisation", u, err)
		}
	})
	t.Run("an unknown GPU", func(t *testing.T) {
		_, err := newGPUSampler(GPUBackendAuto, map[string]string{envVisibleDevices: "GPU-gone"}, opener.open)
		if err == nil || !strings.Contains(err.Error(), "NVML has no GPU GPU-gone") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("a failing query", func(t *testing.T) {
		bad := &mock.Device{GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }}
		o := &nvmlOpener{newLib: func() nvmlLib { return mockNVML(map[string]nvml.Device{"GPU-x": bad}) }}
		s, err := newGPUSampler(GPUBackendAuto, map[string]string{envVisibleDevices: "GPU-x"}, o.open)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.sample(ours); err == nil || !strings.Contains(err.Error(), "GPU-x: nvmlDeviceGetComputeRunningProcesses") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("no NVML", func(t *testing.T) {
		calls := 0
		o := &nvmlOpener{newLib: func() nvmlLib {
			calls++
			return &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
		}}
		for i := 0; i < 2; i++ {
			if _, err := newGPUSampler(GPUBackendAuto, map[string]string{envVisibleDevices: "GPU-1"}, o.open); err == nil || !strings.Contains(err.Error(), "NVML unavailable") {
				t.Errorf("error %v", err)
			}
		}
		if calls != 1 {
			t.Errorf("NVML opened %d times, want once", calls)
		}
	})
}

func TestSamplerChoice(t *testing.T) {
	neverNVML := func() (*sharedNVML, error) { t.Fatal("NVML opened"); return nil, nil }
	for _, tc := range []struct {
		name    string
		backend string
		env     map[string]string
		want    string // "nil", "sim", or an error substring
	}{
		{"no GPUs", GPUBackendAuto, map[string]string{}, "nil"},
		{"attribution off", GPUBackendNone, map[string]string{envVisibleDevices: "GPU-1"}, "nil"},
		{"simulated GPUs", GPUBackendAuto, map[string]string{envVisibleDevices: "SIM-GPU-1-0", "STEWARD_SIM_ACTIVITY_FILES": "/tmp/a"}, "sim"},
		{"sim without activity files", GPUBackendSim, map[string]string{envVisibleDevices: "SIM-GPU-1-0"}, "has no STEWARD_SIM_ACTIVITY_FILES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := newGPUSampler(tc.backend, tc.env, neverNVML)
			switch {
			case tc.want == "nil":
				if s != nil || err != nil {
					t.Errorf("sampler %T %v, want none", s, err)
				}
			case tc.want == "sim":
				if _, ok := s.(*simSampler); !ok || err != nil {
					t.Errorf("sampler %T %v, want sim", s, err)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %v, want %q", err, tc.want)
				}
			}
		})
	}
}

func TestSimSampler(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	s := newSimSampler([]string{a, b})
	write := func(f, v string) {
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(a, "80 1000\n")
	write(b, "40\n")
	u, err := s.sample(nil)
	if err != nil || u.Util != 60 || u.MemMiB != 1000 || !u.HasUtil {
		t.Fatalf("usage %+v %v, want mean 60%% and 1000 MiB", u, err)
	}
	write(a, "") // being rewritten: keeps the last reading
	write(b, "bogus")
	if u, _ = s.sample(nil); u.Util != 60 {
		t.Errorf("half-written files: %+v, want the last readings", u)
	}
	os.Remove(a)
	write(b, "250") // clamped
	if u, _ = s.sample(nil); u.Util != 50 {
		t.Errorf("missing file and 250%%: %+v, want (0+100)/2", u)
	}
}
