package demo

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/devagent"
)

// The fleet scenario (DEMO=fleet make demo): two GPU models in two node
// pools, with jobs/demo-fleet-policy.hcl.
//
//   - node pool onprem, the dev agent's node: 4 simulated H100s (80 GiB);
//   - node pool cloud, a second client agent: 4 simulated A100s (40 GiB).
//
// Training prefers onprem and goes to the cloud when onprem has no room (a
// pool precedence); research has 2 H100s reserved (a reserve within the
// pool h100) whatever it holds elsewhere.
//
//  1. product's training fills the H100s; research trains on the A100s,
//     asking for them by name (device "nvidia/gpu/Simulated A100").
//  2. research submits more training to onprem: onprem is full, the cloud
//     has room: Steward moves the job to the cloud.
//  3. research fine-tunes on a GPU with at least 60 GiB (a constraint on
//     ${device.attr.memory}: the H100s only). It holds more than its
//     tenant-wide reserve, but none of its H100 reserve: product's newest
//     H100 job gives its GPUs back, and no A100 work is touched.
//  4. research's A100 training ends: product's preempted job, waiting for
//     room in onprem, moves to the cloud and runs there.
const (
	ScenarioFleet = "fleet"
	fleetGPUs     = 4
	fleetH100     = "Simulated H100"
	fleetA100     = "Simulated A100"
)

// policyFile is the scenario's policy under jobs/.
func (c *Config) policyFile() string {
	if c.Scenario == ScenarioFleet {
		return "demo-fleet-policy.hcl"
	}
	return "demo-policy.hcl"
}

// play runs the chosen scenario.
func (d *demo) play(ctx context.Context) error {
	if d.cfg.Scenario == ScenarioFleet {
		return d.fleetScenario(ctx)
	}
	return d.scenario(ctx)
}

// nodeExtra and simExtra are what the fleet scenario adds to the dev
// agent's client block and steward-gpu config: its node pool and model.
func (d *demo) nodeExtra() string {
	if d.cfg.Scenario == ScenarioDocker {
		return d.dockerNodeExtra()
	}
	if d.cfg.Scenario != ScenarioFleet {
		return ""
	}
	return "\n  node_pool = \"onprem\""
}

func (d *demo) simExtra() string {
	if d.cfg.Scenario == ScenarioDocker {
		// Device mounts would replace the trainer's host volume (docs/reference/devices.md).
		return "\n    sim_task_mounts = false"
	}
	if d.cfg.Scenario != ScenarioFleet {
		return ""
	}
	return fmt.Sprintf("\n    sim_model      = %q\n    sim_memory_mib = 81920", fleetH100)
}

// pluginExtra is what the docker scenario adds to the dev agent's
// configuration: Nomad's docker driver pointed at the demo's daemon.
func (d *demo) pluginExtra() string {
	if d.dockerd == nil {
		return ""
	}
	return d.dockerd.PluginConfig()
}

// cloudConfig is the second client agent's configuration: client only,
// joined to the dev agent's server, in node pool cloud, with 4 A100s.
func (d *demo) cloudConfig(ports [3]int) string {
	return fmt.Sprintf(`# Written by steward demo (DEMO=fleet); removed with its data dir.
disable_update_check = true
log_level            = "INFO"
name                 = "cloud-1"
data_dir             = %q
bind_addr            = "127.0.0.1"

advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}

ports {
  http = %d
  rpc  = %d
  serf = %d
}

server {
  enabled = false
}

client {
  enabled   = true
  servers   = ["127.0.0.1:%d"]
  node_pool = "cloud"
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}

plugin "raw_exec" {
  config {
    enabled = true
  }
}

plugin "steward-gpu" {
  config {
    backend        = "sim"
    sim_count      = %d
    sim_state_dir  = %q
    sim_model      = %q
    sim_memory_mib = 40960
    stats_period   = "1s"
  }
}
`, d.path("data-cloud"), ports[0], ports[1], ports[2], d.ports[1], fleetGPUs, d.path("sim-cloud"), fleetA100)
}

// startCloud starts the second client agent and waits for its node.
func (d *demo) startCloud(ctx context.Context) error {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = p
	}
	for _, dir := range []string{"data-cloud", "sim-cloud"} {
		if err := os.MkdirAll(d.path(dir), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(d.path("cloud.hcl"), []byte(d.cloudConfig(ports)), 0o644); err != nil {
		return err
	}
	logFile, err := os.Create(d.path("cloud.log"))
	if err != nil {
		return err
	}
	d.printf("==> starting a second Nomad client, node pool cloud, with %d simulated %ss (log: %s)\n",
		fleetGPUs, fleetA100, rel(d.cfg.Root, logFile.Name()))
	cmd := exec.Command(d.cfg.NomadBin, "agent", "-config", d.path("cloud.hcl"), "-plugin-dir", d.cfg.PluginDir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = devagent.Env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting the cloud client: %w", err)
	}
	d.cloud, d.cloudDone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(d.cloudDone) }()
	_ = os.WriteFile(d.path("cloud.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)

	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.cloudDone:
			return fmt.Errorf("the cloud client exited during start; last lines of %s:\n%s", d.path("cloud.log"), fileTail(d.path("cloud.log"), 30))
		case <-time.After(300 * time.Millisecond):
		}
		nodes, _, err := d.client.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
		if err != nil {
			continue
		}
		for _, n := range nodes {
			if n.NodePool != "cloud" || n.Status != api.NodeStatusReady || n.NodeResources == nil {
				continue
			}
			gpus := 0
			for _, dev := range n.NodeResources.Devices {
				if dev.Type == "gpu" {
					gpus += len(dev.Instances)
				}
			}
			if gpus == fleetGPUs {
				d.printf("==> node %s is up in node pool cloud with %d %ss; node %s is in node pool onprem with %d %ss\n",
					n.Name, gpus, fleetA100, d.nodeID[:8], fleetGPUs, fleetH100)
				return nil
			}
		}
	}
	return fmt.Errorf("the cloud client was not ready within 90s; see %s", d.path("cloud.log"))
}

// stopCloud stops the second client agent, if it runs.
func (d *demo) stopCloud() {
	if d.cloud == nil {
		return
	}
	select {
	case <-d.cloudDone:
		return
	default:
	}
	_ = d.cloud.Process.Signal(os.Interrupt)
	select {
	case <-d.cloudDone:
	case <-time.After(15 * time.Second):
	}
	_ = syscall.Kill(-d.cloud.Process.Pid, syscall.SIGKILL)
	select {
	case <-d.cloudDone:
	case <-time.After(10 * time.Second):
	}
}

// fleetScenario plays the fleet story.
func (d *demo) fleetScenario(ctx context.Context) error {
	d.grace = "10s"
	sc := &script{d: d, ctx: ctx}
	onprem, cloud := []string{"node_pool", "onprem"}, []string{"node_pool", "cloud"}
	d.printf("\n==> fleet scenario (about 2 minutes): node pool onprem, 4 %ss; node pool cloud, 4 %ss;\n"+
		"    training prefers onprem, then the cloud; research has 2 H100s reserved (pool h100)\n", fleetH100, fleetA100)

	sc.step("product's training fills the H100s in onprem; research trains on the A100s, asking for them by name")
	batchA := jobRef{"product", "batch-a", 2}
	batchB := jobRef{"product", "batch-b", 2}
	aTrain := jobRef{"research", "a-train", 2}
	sc.submit(func() error { return d.work(batchA, "training", 1, onprem...) })
	sc.wait(60*time.Second, "product/batch-a running", func() bool { return d.running(batchA) == 1 })
	sc.pause(1100 * time.Millisecond) // batch-b is the newer: the first to give GPUs back
	sc.submit(func() error { return d.work(batchB, "training", 1, onprem...) })
	sc.submit(func() error {
		return d.work(aTrain, "training", 1, append(cloud, "device", "nvidia/gpu/"+fleetA100)...)
	})
	sc.wait(60*time.Second, "product/batch-b and research/a-train running", func() bool {
		return d.running(batchB) == 1 && d.running(aTrain) == 1
	})

	sc.step("research submits more training to onprem: onprem is full, the cloud has room: Steward moves it there")
	tune := jobRef{"research", "tune", 2}
	sc.submit(func() error { return d.work(tune, "training", 1, onprem...) })
	sc.wait(60*time.Second, "research/tune moved to the cloud", func() bool { return d.w.count("moved") > 0 })
	sc.wait(60*time.Second, "research/tune running", func() bool { return d.running(tune) == 1 })
	sc.pause(2 * time.Second)

	sc.step("research fine-tunes on a GPU with 60 GiB or more (the H100s): it holds none of its 2 reserved H100s, so product gives H100s back")
	finetune := jobRef{"research", "finetune", 1}
	sc.submit(func() error { return d.work(finetune, "training", 1, append(onprem, "min_memory", "60 GiB")...) })
	sc.wait(60*time.Second, "product/batch-b preempted", func() bool { return d.state(batchB) == "preempted" })
	sc.wait(60*time.Second, "research/finetune running", func() bool { return d.running(finetune) == 1 })
	if d.running(aTrain) != 1 || d.running(tune) != 1 {
		sc.missed = append(sc.missed, "research's A100 work untouched")
	}
	sc.pause(2 * time.Second)

	sc.step("research's A100 training ends: product's preempted job, with no room in onprem, moves to the cloud")
	moved := d.w.count("moved")
	if ctx.Err() == nil {
		d.finish(aTrain)
	}
	sc.wait(60*time.Second, "product/batch-b moved", func() bool { return d.w.count("moved") > moved })
	sc.wait(60*time.Second, "product/batch-b running again", func() bool { return d.running(batchB) == 1 })
	sc.pause(3 * time.Second)
	return sc.end("moved", "preempted", "checkpointing")
}

// freePort is a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
