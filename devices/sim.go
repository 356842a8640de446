package devices

import (
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/device"
	"golang.org/x/sys/unix"

	"github.com/gpu-steward/steward/internal/safefs"
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

	// SimActivityFileName starts an activity file's name in a GPU's
	// directory: <sim_state_dir>/<uuid>/utilization-<time>-<random>, a new
	// one for each reservation.
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

// simBoard is what an A100-SXM4 reports for the attributes
// nomad-device-nvidia also fingerprints (boardattrs.go): 64 GiB of BAR1,
// 1410/1215 MHz maximum clocks, PCIe 4.0 x16, no display, persistence on.
var simBoard = boardAttrs{
	BAR1MiB:         65536,
	CoresClockMHz:   1410,
	MemoryClockMHz:  1215,
	PCIBandwidthMBs: pciBandwidthMBs(4, 16),
	DisplayState:    enableState(0),
	PersistenceMode: enableState(1),
}

// simBackend reports virtual GPUs whose activity the workload drives.
//
// Its state dir is private to the plugin's user (root on a client): mode
// 0711, so tasks can pass through but neither list nor write it, and the
// same for each GPU's dir below it. Each Reserve creates a new activity
// file per GPU with an unguessable name (O_CREAT|O_EXCL|O_NOFOLLOW, mode
// 0622: any task user may write it, none but root read it) and tells the
// task its path. Only the task given the name can write it: another task
// cannot list the dir to find it, nor replace it, nor plant a symlink the
// plugin would follow. The previous file of the GPU is removed.
type simBackend struct {
	// mounts: reservations mount the activity dirs (Config.SimTaskMounts).
	mounts bool
	logger hclog.Logger
	dir    string
	root   *safefs.Dir
	gpus   []gpu
	known  map[string]struct{}

	mu      sync.Mutex
	gpuDirs map[string]*safefs.Dir
	current map[string]string      // GPU -> name of its current activity file
	last    map[string]simActivity // last valid reading per GPU
	buf     []byte
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
	root, err := openSimStateDir(cfg.SimStateDir)
	if err != nil {
		return nil, fmt.Errorf("sim_state_dir: %w", err)
	}
	b := &simBackend{
		mounts:  cfg.SimTaskMounts,
		logger:  logger,
		dir:     cfg.SimStateDir,
		root:    root,
		known:   map[string]struct{}{},
		gpuDirs: map[string]*safefs.Dir{},
		current: map[string]string{},
		last:    map[string]simActivity{},
		buf:     make([]byte, 64),
	}
	for i := 0; i < cfg.SimCount; i++ {
		id := SimUUID(b.dir, i)
		if _, ignored := cfg.IgnoredGPUIDs[id]; ignored {
			continue
		}
		if err := b.openGPUDir(id); err != nil {
			b.close()
			return nil, err
		}
		g := gpu{
			UUID:              id,
			Model:             cfg.SimModel,
			PCIBusID:          fmt.Sprintf("0000:%02x:00.0", 0x10+i),
			MemoryMiB:         cfg.SimMemoryMiB,
			ComputeCapability: "8.0",
			PowerLimitW:       simPowerLimitW,
			Simulated:         true,
			Board:             simBoard,
		}
		if cfg.SimMIGProfile == "" {
			b.gpus = append(b.gpus, g)
			b.known[id] = struct{}{}
			continue
		}
		// In MIG mode a GPU shows only its instances, each a device with
		// its own ID, as NVML's MIG device handles are (nvml.go).
		_, memGiB, _ := parseMIGProfile(cfg.SimMIGProfile)
		for k := 0; k < cfg.SimMIGCount; k++ {
			mig := g
			mig.UUID = fmt.Sprintf("MIG-%s-%d", strings.TrimPrefix(id, "SIM-GPU-"), k)
			mig.Model = cfg.SimModel + " MIG " + cfg.SimMIGProfile
			mig.MemoryMiB = uint64(memGiB) * 1024
			mig.MIG, mig.ParentUUID = true, id
			if err := b.openGPUDir(mig.UUID); err != nil {
				b.close()
				return nil, err
			}
			b.gpus = append(b.gpus, mig)
			b.known[mig.UUID] = struct{}{}
		}
	}
	return b, nil
}

// openSimStateDir creates (mode 0711) and opens the state dir. It must be
// the plugin user's own: a dir someone else created (say in /tmp, before
// the agent started) is refused. A dir of an older version (0777) is
// tightened through its descriptor.
func openSimStateDir(dir string) (*safefs.Dir, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	root, err := safefs.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	if err := chmodOwn(root); err != nil {
		root.Close()
		return nil, err
	}
	return root, nil
}

// chmodOwn sets a dir of the plugin's to 0711, refusing one it does not own.
func chmodOwn(d *safefs.Dir) error {
	st, err := d.Stat()
	if err != nil {
		return err
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("%s is owned by uid %d, not by this plugin's user (uid %d): refusing a directory someone else controls", d.Path(), st.Uid, euid)
	}
	return d.Chmod(0o711)
}

func (b *simBackend) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.gpuDirs {
		d.Close()
	}
	b.gpuDirs = map[string]*safefs.Dir{}
	if b.root != nil {
		b.root.Close()
	}
}

// activityDir is the directory holding a simulated GPU's activity files.
func (b *simBackend) activityDir(id string) string { return filepath.Join(b.dir, id) }

// openGPUDir creates and opens a GPU's dir, and finds the activity file of
// its last reservation (a task may still be writing it after a plugin
// restart). A symlink in the dir's place is removed, never followed.
func (b *simBackend) openGPUDir(id string) error {
	d, err := b.root.Sub(id, 0o711)
	if errors.Is(err, safefs.ErrSymlink) {
		b.logger.Warn("removing a symlink in the place of a GPU's activity dir", "gpu", id)
		if err := b.root.Remove(id); err != nil {
			return err
		}
		d, err = b.root.Sub(id, 0o711)
	}
	if err != nil {
		return fmt.Errorf("activity dir of %s: %w", id, err)
	}
	if err := chmodOwn(d); err != nil {
		d.Close()
		return fmt.Errorf("activity dir of %s: %w", id, err)
	}
	names, err := d.Names()
	if err != nil {
		d.Close()
		return fmt.Errorf("activity dir of %s: %w", id, err)
	}
	// Names sort by creation time: the newest is the current one; older
	// ones (and an older version's shared "utilization" file) go.
	var current string
	for _, n := range names {
		if strings.HasPrefix(n, simActivityPrefix) && n > current {
			current = n
		}
	}
	for _, n := range names {
		if n != current {
			if err := d.Remove(n); err != nil {
				b.logger.Warn("cannot remove a stale activity file", "gpu", id, "file", n, "error", err)
			}
		}
	}
	b.mu.Lock()
	b.gpuDirs[id] = d
	b.current[id] = current
	b.mu.Unlock()
	return nil
}

// simActivityPrefix starts an activity file's name:
// utilization-<creation time, 16 hex digits>-<26 random base32 digits>.
const simActivityPrefix = SimActivityFileName + "-"

func newActivityFileName() string {
	return fmt.Sprintf("%s%016x-%s", simActivityPrefix, time.Now().UnixNano(), rand.Text())
}

// newActivityFile gives a GPU a new activity file, at idle (0), and
// removes its previous one. It returns the new file's path.
func (b *simBackend) newActivityFile(id string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := b.gpuDirs[id]
	if d == nil {
		return "", fmt.Errorf("GPU %s has no activity dir", id)
	}
	name := newActivityFileName()
	if err := d.CreateExclusive(name, []byte("0\n"), 0o622); err != nil {
		return "", fmt.Errorf("creating activity file of %s: %w", id, err)
	}
	if old := b.current[id]; old != "" {
		if err := d.Remove(old); err != nil {
			b.logger.Warn("cannot remove the previous activity file", "gpu", id, "error", err)
		}
	}
	b.current[id] = name
	delete(b.last, id)
	return filepath.Join(d.Path(), name), nil
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
			MIG:         g.MIG,
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

// readActivity reads a GPU's current activity file (b.mu held); ok is
// false when the content is not (yet) a valid reading. A GPU never
// reserved, or whose file is gone, is idle. The file is opened without
// following symlinks.
func (b *simBackend) readActivity(id string) (simActivity, bool) {
	d, name := b.gpuDirs[id], b.current[id]
	if d == nil || name == "" {
		return simActivity{}, true
	}
	f, err := d.OpenFile(name, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
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

// parseActivity is ParseSimActivity with utilisation rounded to the whole
// percent the plugin reports.
func parseActivity(raw []byte) (simActivity, bool) {
	a, ok := ParseSimActivity(raw)
	if !ok {
		return simActivity{}, false
	}
	return simActivity{util: uint32(math.Round(a.Util)), memUsed: a.MemMiB}, true
}

// reserve gives each GPU a new activity file at idle and tells the task
// where to report its activity. The activity directories are also
// mounted at the same path, so the variables work inside exec and docker
// tasks too (they cannot be listed there either).
func (b *simBackend) reserve(ids []string) (*device.ContainerReservation, error) {
	if err := checkKnown(ids, b.known); err != nil {
		return nil, err
	}
	res := &device.ContainerReservation{Envs: visibleDevicesEnv(ids)}
	files := make([]string, 0, len(ids))
	for _, id := range ids {
		file, err := b.newActivityFile(id)
		if err != nil {
			return nil, err
		}
		files = append(files, file)
		if b.mounts {
			res.Mounts = append(res.Mounts, &device.Mount{
				TaskPath: b.activityDir(id),
				HostPath: b.activityDir(id),
			})
		}
	}
	res.Envs[EnvSimActivityDir] = b.activityDir(ids[0])
	res.Envs[EnvSimActivityFile] = files[0]
	res.Envs[EnvSimActivityFiles] = strings.Join(files, ",")
	return res, nil
}
