package command

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/cli"

	"github.com/gpu-steward/steward/internal/demo"
)

func init() {
	register("demo", func(ui cli.Ui) cli.Command { return &DemoCommand{UI: ui} })
}

// DemoCommand is "steward demo" (`make demo`).
type DemoCommand struct{ UI cli.Ui }

func (c *DemoCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward demo [options]

  Starts a Nomad dev agent on 127.0.0.1 (web UI included) with Steward's
  plugins and 8 simulated GPUs, the controller with jobs/demo-policy.hcl and
  the tenants' namespaces, and plays a scripted scenario with the jobs in
  jobs/: inference, notebooks (one goes idle), a checkpointing trainer, two
  teams borrowing and reclaiming GPUs. It prints a timeline of what Steward
  does, with the reason and the Nomad UI page of each step, and stays up
  until Ctrl-C, which stops everything it started. 'make demo' builds what
  it needs and runs it.

  Run it from the repository root (or give -root): it uses bin/nomad,
  bin/plugins, bin/steward, bin/trainer, jobs/, and writes under .demo/.

Options:

  -root DIR    Repository root (default: the working directory).
  -dir DIR     Where the demo writes (default <root>/.demo).
  -port N      The agent's HTTP port (default 4646; a free one if taken).
  -exit        End after the scenario (also: DEMO_EXIT=1).
  -scenario S  "fleet" (also: DEMO=fleet): two GPU models in two node
               pools, with jobs/demo-fleet-policy.hcl: a pool precedence
               moves training to the cloud and a reserve within the H100
               pool takes H100s back, never A100s. "docker" (also:
               DEMO=docker): the story on one node with the trainer and
               the notebooks in containers (jobs/train-docker.nomad.hcl,
               jobs/notebook-docker.nomad.hcl) in a Docker daemon of the
               demo's own: no network, Steward's images built FROM
               scratch from bin/image (make image-bins), nothing pulled;
               it needs dockerd (make docker). Default: the story on one
               node.
  -nomad PATH, -plugin-dir DIR, -trainer PATH
               The agent, its plugins and the example trainer (default
               <root>/bin/nomad, <root>/bin/plugins, <root>/bin/trainer).
`)
}

func (c *DemoCommand) Synopsis() string {
	return "Run a demo cluster with simulated GPUs and a scripted scenario"
}

func (c *DemoCommand) Run(args []string) int {
	var cfg demo.Config
	cfg.Exit = os.Getenv("DEMO_EXIT") != "" && os.Getenv("DEMO_EXIT") != "0"
	cfg.Scenario = os.Getenv("DEMO")
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Root, "root", "", "")
	fs.StringVar(&cfg.Dir, "dir", "", "")
	fs.IntVar(&cfg.Port, "port", 4646, "")
	fs.StringVar(&cfg.NomadBin, "nomad", "", "")
	fs.StringVar(&cfg.PluginDir, "plugin-dir", "", "")
	fs.StringVar(&cfg.TrainerBin, "trainer", "", "")
	fs.StringVar(&cfg.Scenario, "scenario", cfg.Scenario, "")
	exit := fs.Bool("exit", false, "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error(fmt.Sprintf("%v\n\n%s", err, c.Help()))
		return 1
	}
	cfg.Exit = cfg.Exit || *exit
	if cfg.StewardBin == "" {
		// This very binary runs the controller (make demo runs bin/steward).
		if exe, err := os.Executable(); err == nil {
			cfg.StewardBin = exe
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM,
		syscall.SIGHUP, syscall.SIGPIPE) // a closed terminal or pipe: clean up too
	defer cancel()
	if err := demo.Run(ctx, cfg); err != nil {
		c.UI.Error("steward demo: " + err.Error())
		return 1
	}
	return 0
}
