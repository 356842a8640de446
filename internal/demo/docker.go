package demo

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/dockerd"
)

// The docker scenario (DEMO=docker make demo): the main story (scenario.go)
// with its trainer and notebooks in containers, under Nomad's docker
// driver, in a Docker daemon of the demo's own (internal/dockerd): no
// network (containers run with network_mode = "none"), its roots in the
// temp dir (named by <dir>/dockerd.dir while it runs), Steward's images
// built into it FROM scratch from images/*.Dockerfile and bin/image (make
// image-bins), tagged steward/<name>:local as the example jobs name them.
// Nothing is pulled.
//
//   - research/train is jobs/train-docker.nomad.hcl: jobs/trainer in
//     steward/trainer, with Steward's checkpoint contract for any driver:
//     the checkpoint signal, ${NOMAD_TASK_DIR}/steward-checkpoint-written
//     (the controller stops the task once it is there), checkpoints on the
//     tenant's host volume, and steward_resumed rendered from the job's
//     record by a template. The timeline shows the trainer's own lines.
//   - research/explore and product/notebook-a are
//     jobs/notebook-docker.nomad.hcl (steward/shell).
//
// The simulated GPUs mount nothing into tasks here (sim_task_mounts =
// false): Nomad would otherwise drop the trainer's host volume (see
// docs/reference/devices.md). So a container reports no GPU activity: its GPUs read
// 0%. notebook-a is idle from the start, and the idle rule takes its GPU
// 30 s after it opens, once the trainer waits; research keeps its own
// notebook with `steward snooze`, as a user would with the
// keep-my-notebook action.
const (
	ScenarioDocker = "docker"
	// dockerTag is the tag of Steward's images in the demo's daemon: the
	// example docker jobs' default.
	dockerTag = "local"
	// checkpointVolume is research's host volume for the trainer's
	// checkpoints (<dir>/checkpoints/research).
	checkpointVolume = "checkpoints-research"
)

// dockerFiles are what the docker scenario needs besides the default's.
func (c *Config) dockerFiles() []string {
	return []string{filepath.Join(c.JobsDir, "train-docker.nomad.hcl"), filepath.Join(c.JobsDir, "notebook-docker.nomad.hcl")}
}

// startDocker starts the demo's Docker daemon, its roots under the demo
// dir, and builds Steward's images into it.
func (d *demo) startDocker() error {
	d.printf("==> starting a Docker daemon of the demo's own (no network) and building steward/{%s}:%s FROM scratch (nothing is pulled)\n",
		strings.Join(dockerd.Images, ","), dockerTag)
	// research's host volume: the agent checks it exists.
	if err := os.MkdirAll(d.path(filepath.Join("checkpoints", "research")), 0o700); err != nil {
		return err
	}
	started := time.Now()
	// Its roots in the temp dir, as the tests' daemon's: its sockets'
	// paths must stay short (a unix socket's path has at most 107 bytes).
	daemon, err := dockerd.Start("", d.cfg.Root, dockerTag)
	if err != nil {
		return fmt.Errorf("the demo's Docker daemon: %w", err)
	}
	d.dockerd = daemon
	// A later run finds it there if this one is killed (stopStaleDocker).
	if err := os.WriteFile(d.path("dockerd.dir"), []byte(daemon.Dir+"\n"), 0o644); err != nil {
		d.stopDocker()
		return err
	}
	d.printf("==> Docker is up at %s with Steward's images (%v; log: %s)\n", daemon.Host,
		time.Since(started).Round(100*time.Millisecond), rel(d.cfg.Root, filepath.Join(daemon.Dir, "dockerd.log")))
	return nil
}

// stopDocker stops the demo's daemon, its containers with it, and removes
// its roots.
func (d *demo) stopDocker() {
	if d.dockerd == nil {
		return
	}
	d.dockerd.Stop()
	_ = os.Remove(d.path("dockerd.dir"))
	d.printf("==> stopped the Docker daemon and removed its data root\n")
	d.dockerd = nil
}

// stopStaleDocker stops the daemon an earlier run left behind (killed
// without its clean-up), its containers, containerd and shims, and
// removes its roots (dockerd.StopStale): dockerd.dir names its dir.
func (d *demo) stopStaleDocker() {
	b, err := os.ReadFile(d.path("dockerd.dir"))
	if err != nil {
		return
	}
	dir := strings.TrimSpace(string(b))
	if filepath.IsAbs(dir) && strings.HasPrefix(filepath.Base(dir), "dockerd-") {
		if dockerd.StopStale(dir) {
			d.printf("==> stopped a Docker daemon and its containers left by an earlier demo run\n")
		}
	}
	_ = os.Remove(d.path("dockerd.dir"))
}

// dockerNodeExtra is the dev agent's client block's host volume for the
// trainer's checkpoints.
func (d *demo) dockerNodeExtra() string {
	return fmt.Sprintf(`

  host_volume %q {
    path      = %q
    read_only = false
  }`, checkpointVolume, d.path(filepath.Join("checkpoints", "research")))
}

// trainerDocker registers jobs/train-docker.nomad.hcl as job j.
func (d *demo) trainerDocker(j jobRef) error {
	job, err := d.parse("train-docker.nomad.hcl", map[string]string{
		"namespace": j.NS, "checkpoint_volume": checkpointVolume,
		"steps": "100000", "step_time": "200ms", "checkpoint_every": "10", "kill_timeout": "5s",
	})
	if err != nil {
		return err
	}
	job.ID, job.Name, job.Namespace = &j.ID, &j.ID, &j.NS
	prio := tierPriority["training"]
	job.Priority = &prio
	d.w.follow(j, "train")
	return d.register(j, job, "1 allocation × 1 GPU, tier training, driver docker (steward/trainer:"+dockerTag+
		", no network): checkpoints every 10 steps to host volume "+checkpointVolume+" (jobs/train-docker.nomad.hcl)")
}

// notebookDocker registers jobs/notebook-docker.nomad.hcl as job j: a
// stand-in for a notebook in steward/shell.
func (d *demo) notebookDocker(j jobRef) error {
	job, err := d.parse("notebook-docker.nomad.hcl", map[string]string{"namespace": j.NS, "name": j.ID})
	if err != nil {
		return err
	}
	// Its stand-in command reports activity to the simulated GPUs through
	// their mounts, which this node does not give (sim_task_mounts): a
	// quiet one instead.
	job.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c",
		"trap 'exit 0' TERM INT; echo notebook open; while true; do sleep 1 & wait $!; done"}
	job.ID, job.Name, job.Namespace = &j.ID, &j.ID, &j.NS
	prio := tierPriority["interactive"]
	job.Priority = &prio
	return d.register(j, job, fmt.Sprintf("1 allocation × %s, tier interactive, driver docker (steward/shell:%s, no network) (jobs/notebook-docker.nomad.hcl)",
		plural(j.GPUsPerTask, "GPU"), dockerTag))
}

// snooze runs `steward snooze` on job j, as its owner would from the
// job's keep-my-notebook action.
func (d *demo) snooze(j jobRef, dur string) error {
	out, err := runCmd(d.cfg.StewardBin, "snooze", "-address", d.addr, "-namespace", j.NS, "-wait", "15s", j.ID, dur)
	if err != nil {
		return fmt.Errorf("steward snooze %s: %v: %s", j, err, strings.TrimSpace(out))
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	d.w.emit(j.String(), "snoozed", "its owner keeps it: steward snooze "+j.ID+" "+dur+": "+lines[len(lines)-1], d.varURL(j.NS, j.ID))
	return nil
}

// trainerLines are the lines of jobs/trainer's output the timeline shows:
// what it was told at its start, where it resumes from, and its side of
// the checkpoint contract.
var trainerLines = []string{"STEWARD_RESUMED=", "resuming from checkpoint", "no checkpoint", "received)", "checkpoint written at", "stopping at step"}

// follow has the watcher show job j's task's output lines (trainerLines).
func (w *watcher) follow(j jobRef, task string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.followed[j.String()] = task
}

// pollOutput prints the new lines of interest of each allocation of a
// followed job, read through Nomad's allocation filesystem API.
func (w *watcher) pollOutput(j jobRef, stubs []*api.AllocationListStub) {
	w.mu.Lock()
	task, ok := w.followed[j.String()]
	w.mu.Unlock()
	if !ok {
		return
	}
	for _, s := range stubs {
		if s.ClientStatus != api.AllocClientStatusRunning && w.outputDone[s.ID] {
			continue
		}
		a, _, err := w.d.client.Allocations().Info(s.ID, nil)
		if err != nil {
			continue
		}
		r, err := w.d.client.AllocFS().Cat(a, "alloc/logs/"+task+".stdout.0", nil)
		if err != nil {
			continue
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			continue
		}
		final := s.ClientStatus != api.AllocClientStatusRunning && s.ClientStatus != api.AllocClientStatusPending
		if final {
			w.outputDone[s.ID] = true // its last read
		}
		lines := completeLines(data, final)
		seen := w.outputLines[s.ID]
		if len(lines) <= seen {
			continue
		}
		w.outputLines[s.ID] = len(lines)
		for _, l := range lines[seen:] {
			for _, want := range trainerLines {
				if strings.Contains(l, want) {
					w.emit(j.String(), "task output", "alloc "+s.ID[:8]+": "+l, w.d.allocURL(s.ID))
					break
				}
			}
		}
	}
}

// completeLines are the lines of a task's output read so far: a last line
// without its newline is still being written (Nomad's log pipe may hand
// over a line in pieces), so it is left for the next read unless the
// allocation has ended; counted now, it would be passed over when whole.
func completeLines(data []byte, final bool) []string {
	if !final {
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			data = data[:i+1]
		} else {
			data = nil
		}
	}
	s := strings.TrimSuffix(string(data), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
