package devices

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/device"
)

// Environment variables Reserve gives a task on simulated GPUs. The task
// reports its GPU activity by writing a utilisation percentage, optionally
// followed by the memory it uses in MiB ("80" or "80 12000"), to the
// activity file of each of its GPUs. The plugin reads the files in Stats,
// the same path real GPUs' figures take.
const (
	// EnvSimActivityFile is the activity file of the task's first GPU.
	EnvSimActivityFile = "STEWARD_SIM_ACTIVITY_FILE"
	// EnvSimActivityFiles lists the activity files of all the task's GPUs,
	// comma separated, in the order of NVIDIA_VISIBLE_DEVICES.
	EnvSimActivityFiles = "STEWARD_SIM_ACTIVITY_FILES"
	// EnvSimActivityDir is the directory of the first GPU's activity file.
	EnvSimActivityDir = "STEWARD_SIM_ACTIVITY_DIR"

	// SimActivityFileName is the activity file's name in a GPU's directory
	// (<sim_state_dir>/<uuid>/utilization).
	SimActivityFileName = "utilization"
	// SimDriverVersion is the driver_version attribute of simulated GPUs.
	SimDriverVersion = "simulated"
)

// Synthetic power and temperature model of a simulated GPU.
const (
	simIdlePowerW  = 60
	simPowerLimitW = 400
	simIdleTempC   = 30
	simMaxTempC    = 75
)

// simBackend reports virtual GPUs whose activity the workload drives.
type simBackend struct {
	logger hclog.Logger
	dir    string
	gpus   []gpu
	known  map[string]struct{}

	mu   sync.Mutex
	last map[string]simActivity // last valid reading per GPU
	buf  []byte
}

type simActivity struct {
	util    uint32
	memUsed uint64
}

// SimUUID is the ID of simulated GPU i of a plugin whose state dir is dir:
// SIM-GPU-<8 hex digits of a hash of host name and state dir>-<i>. It is
// stable across restarts and differs between agents on one host that use
// different state dirs.
func SimUUID(dir string, i int) string {
	host, _ := os.Hostname()
	h := fnv.New32a()
	_, _ = io.WriteString(h, host+"\x00"+dir)
	return fmt.Sprintf("SIM-GPU-%08x-%d", h.Sum32(), i)
}

func newSimBackend(cfg Config, logger hclog.Logger) (*simBackend, error) {
	b := &simBackend{
		logger: logger,
		dir:    cfg.SimStateDir,
		known:  map[string]struct{}{},
		last:   map[string]simActivity{},
		buf:    make([]byte, 64),
	}
	if err := mkdirShared(b.dir); err != nil {
		return nil, fmt.Errorf("creating sim_state_dir: %w", err)
	}
	for i := 0; i < cfg.SimCount; i++ {
		id := SimUUID(b.dir, i)
		if _, ignored := cfg.IgnoredGPUIDs[id]; ignored {
			continue
		}
		if err := b.ensureActivityFile(id, false); err != nil {
			return nil, err
		}
		b.gpus = append(b.gpus, gpu{
			UUID:              id,
			Model:             cfg.SimModel,
			PCIBusID:          fmt.Sprintf("0000:%02x:00.0", 0x10+i),
			MemoryMiB:         cfg.SimMemoryMiB,
			ComputeCapability: "8.0",
			PowerLimitW:       simPowerLimitW,
			Simulated:         true,
		})
		b.known[id] = struct{}{}
	}
	return b, nil
}

func (b *simBackend) close() {}

// ActivityDir is the directory holding a simulated GPU's activity file.
func (b *simBackend) activityDir(id string) string { return filepath.Join(b.dir, id) }

// ActivityFile is a simulated GPU's activity file.
func (b *simBackend) activityFile(id string) string {
	return filepath.Join(b.dir, id, SimActivityFileName)
}

// mkdirShared creates dir writable by any task user (exec and docker tasks
// may not run as the agent's user).
func mkdirShared(dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	return os.Chmod(dir, 0o777)
}

// ensureActivityFile creates a GPU's directory and activity file; with
// reset, or when the file is missing, it writes 0 (idle).
func (b *simBackend) ensureActivityFile(id string, reset bool) error {
	if err := mkdirShared(b.activityDir(id)); err != nil {
		return fmt.Errorf("creating activity dir of %s: %w", id, err)
	}
	f := b.activityFile(id)
	if _, err := os.Stat(f); err == nil && !reset {
		return nil
	}
	if err := os.WriteFile(f, []byte("0\n"), 0o666); err != nil {
		return fmt.Errorf("writing activity file of %s: %w", id, err)
	}
	if err := os.Chmod(f, 0o666); err != nil {
		return fmt.Errorf("writing activity file of %s: %w", id, err)
	}
	b.mu.Lock()
	delete(b.last, id)
	b.mu.Unlock()
	return nil
}

func (b *simBackend) inventory() (inventory, error) {
	return inventory{DriverVersion: SimDriverVersion, GPUs: b.gpus}, nil
}

// sample reads every GPU's activity file. A file that is missing reads as
// idle; one that is being rewritten (empty) or invalid keeps the last value.
func (b *simBackend) sample(buf []sample) []sample {
	b.mu.Lock()
	defer b.mu.Unlock()
	buf = buf[:0]
	for i := range b.gpus {
		g := &b.gpus[i]
		act, ok := b.readActivity(g.UUID)
		if !ok {
			act = b.last[g.UUID]
		} else if b.last[g.UUID] != act {
			b.last[g.UUID] = act
		}
		memUsed := act.memUsed
		if memUsed > g.MemoryMiB {
			memUsed = g.MemoryMiB
		}
		buf = append(buf, sample{
			UUID:        g.UUID,
			Model:       g.Model,
			GPUUtil:     act.util,
			MemUtil:     act.util * 6 / 10,
			MemUsedMiB:  memUsed,
			MemTotalMiB: g.MemoryMiB,
			PowerW:      simIdlePowerW + act.util*(simPowerLimitW-simIdlePowerW)/100,
			PowerLimitW: simPowerLimitW,
			TempC:       simIdleTempC + act.util*(simMaxTempC-simIdleTempC)/100,
			HasUtil:     true,
			HasMem:      true,
			HasPower:    true,
			HasTemp:     true,
		})
	}
	return buf
}

// readActivity reads one activity file; ok is false when the content is
// not (yet) a valid reading.
func (b *simBackend) readActivity(id string) (simActivity, bool) {
	f, err := os.Open(b.activityFile(id))
	if err != nil {
		if os.IsNotExist(err) {
			return simActivity{}, true
		}
		b.logger.Debug("cannot read activity file", "gpu", id, "error", err)
		return simActivity{}, false
	}
	n, err := io.ReadFull(f, b.buf)
	f.Close()
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		b.logger.Debug("cannot read activity file", "gpu", id, "error", err)
		return simActivity{}, false
	}
	act, ok := parseActivity(b.buf[:n])
	if !ok && n > 0 {
		b.logger.Debug("ignoring invalid activity file content", "gpu", id, "content", string(b.buf[:n]))
	}
	return act, ok
}

// parseActivity parses "<utilisation %> [<memory used MiB>]". Utilisation
// may have decimals and is clamped to 0..100.
func parseActivity(raw []byte) (simActivity, bool) {
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return simActivity{}, false
	}
	u, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || math.IsNaN(u) {
		return simActivity{}, false
	}
	act := simActivity{util: uint32(math.Round(math.Max(0, math.Min(100, u))))}
	if len(fields) > 1 {
		m, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return simActivity{}, false
		}
		act.memUsed = m
	}
	return act, true
}

// reserve resets the GPUs' activity to idle and tells the task where to
// report its activity. The activity directories are also mounted at the
// same path, so the variables work inside exec and docker tasks too.
func (b *simBackend) reserve(ids []string) (*device.ContainerReservation, error) {
	if err := checkKnown(ids, b.known); err != nil {
		return nil, err
	}
	res := &device.ContainerReservation{Envs: visibleDevicesEnv(ids)}
	files := make([]string, 0, len(ids))
	for _, id := range ids {
		if err := b.ensureActivityFile(id, true); err != nil {
			return nil, err
		}
		files = append(files, b.activityFile(id))
		res.Mounts = append(res.Mounts, &device.Mount{
			TaskPath: b.activityDir(id),
			HostPath: b.activityDir(id),
		})
	}
	res.Envs[EnvSimActivityDir] = b.activityDir(ids[0])
	res.Envs[EnvSimActivityFile] = files[0]
	res.Envs[EnvSimActivityFiles] = strings.Join(files, ",")
	return res, nil
}
