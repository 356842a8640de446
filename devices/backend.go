package devices

import (
	"strings"

	"github.com/hashicorp/nomad/plugins/device"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// backend is where GPUs come from: NVML (real hardware) or the simulator.
// The plugin owns the loops, health bookkeeping and the conversion to
// Nomad's types; a backend only answers questions about its GPUs.
type backend interface {
	// inventory enumerates the GPUs now present. An error means the
	// enumeration itself failed (not one GPU); a GPU whose queries fail is
	// returned with gpu.Err set.
	inventory() (inventory, error)

	// sample fills one stats sample per GPU of the last inventory into buf
	// (reused between rounds) and returns it.
	sample(buf []sample) []sample

	// reserve returns what a task needs to use exactly these GPUs.
	reserve(ids []string) (*device.ContainerReservation, error)

	// close releases the backend's resources.
	close()
}

// inventory is the result of one enumeration.
type inventory struct {
	DriverVersion     string
	CUDADriverVersion string
	GPUs              []gpu
}

// gpu is one schedulable device: a whole GPU, or a MIG instance when MIG is
// enabled on its parent.
type gpu struct {
	UUID     string
	Model    string // the Nomad device name ("NVIDIA A100-SXM4-40GB")
	PCIBusID string

	MemoryMiB         uint64
	ComputeCapability string // "8.0"
	PowerLimitW       uint32

	MIG        bool
	ParentUUID string // MIG instances only
	Simulated  bool

	// Board is what nomad-device-nvidia also fingerprints; a MIG instance
	// has its parent's.
	Board boardAttrs

	// Err is why a query about this GPU failed; the GPU is then reported
	// unhealthy with it as the reason.
	Err string
}

// sample is one GPU's figures from one stats round. The has* flags say
// which figures the GPU reported (MIG instances have no utilisation, some
// boards no power reading).
type sample struct {
	UUID  string
	Model string
	MIG   bool

	GPUUtil, MemUtil uint32 // percent
	MemUsedMiB       uint64
	MemTotalMiB      uint64
	PowerW           uint32
	PowerLimitW      uint32
	TempC            uint32

	HasUtil, HasMem, HasPower, HasTemp bool

	// Err is set when a query failed for a reason other than "not
	// supported"; the GPU is then marked unhealthy until a round succeeds.
	Err string
}

// checkKnown fails with InvalidArgument when an ID is not a current device.
func checkKnown(ids []string, known map[string]struct{}) error {
	var unknown []string
	for _, id := range ids {
		if _, ok := known[id]; !ok {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return status.Errorf(codes.InvalidArgument, "unknown GPU IDs: %s", strings.Join(unknown, ", "))
	}
	return nil
}

// Environment variables Reserve sets.
const (
	EnvNvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDAVisibleDevices   = "CUDA_VISIBLE_DEVICES"
)

func visibleDevicesEnv(ids []string) map[string]string {
	list := strings.Join(ids, ",")
	return map[string]string{
		EnvNvidiaVisibleDevices: list,
		EnvCUDAVisibleDevices:   list,
	}
}
