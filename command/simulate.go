package command

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/hashicorp/cli"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/sim"
)

func init() {
	register("simulate", func(ui cli.Ui) cli.Command { return &SimulateCommand{UI: ui} })
}

// SimulateCommand is "steward simulate": it replays a job trace in virtual
// time under FIFO, Nomad's strict priority preemption and a Steward
// policy, and reports what each would have done.
type SimulateCommand struct {
	UI cli.Ui
}

func (c *SimulateCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward simulate -policy FILE -trace TRACE [options]

  Replays a GPU cluster's job history in virtual time on a model of Nomad's
  placement (GPUs bin-packed onto nodes, job priorities, gangs placed all or
  nothing) under three policies: FIFO without preemption, Nomad's strict
  priority preemption, and Steward with the given policy, run by the same
  engine the controller runs. It prints a comparison table, with the rule
  that derived tiers, tenants and idleness where the trace has none.
  docs/simulator.md describes the trace format, the model and each figure.

Options:

  -policy FILE|DIR     Steward policy (required).
  -trace TRACE         A trace file, or a shared trace by name: philly,
                       helios (looked up in -traces-dir). Repeat for more.
  -traces-dir DIR      Where shared traces live. Default: ../shared/traces
                       (next to the repository, from its root).
  -nodes N|LIST        Nodes in the simulated cluster: a number of nodes of
                       -gpus-per-node GPUs, or sizes COUNTxGPUS, comma-
                       separated, for nodes of mixed sizes (4x8,8x4: four
                       8-GPU and eight 4-GPU nodes), each optionally of
                       a GPU model (2x8:H100,4x8:A100) that a trace's
                       model column asks for. Default: 100.
  -gpus-per-node N     GPUs on each node when -nodes is a number (not with
                       a list). Default: 8.
  -scale F             Multiply every tenant's and department's reserve and
                       limit by F, to size a policy written for another
                       cluster (example.hcl is for one 8-GPU node: -scale 100
                       for 100 nodes).
                       Default: 1.
  -seed N              Seed of the workload derivation. Default: 1.
  -limit N             Simulate only the first N jobs of each trace (of the
                       window, with -from or -to).
  -from D, -to D       Simulate only jobs submitted in [from, to), times
                       since the trace's start (-from 24h -to 72h: its second
                       and third day); submissions are re-based so that the
                       window starts at 0. Default: the whole trace.
  -checkpoint-every D  How often jobs checkpoint on their own; work since the
                       last checkpoint is lost when a job is stopped without a
                       checkpoint signal. Default: 30m.
  -checkpoint-cost D   How long a job takes to write a checkpoint when
                       signalled, and to load one when it restarts. A grace
                       shorter than it ends without a checkpoint; the load,
                       and the work done after the signal, count as GPU time
                       lost. Default: 60s.
  -checkpoint-done     Jobs say when the checkpoint a signal asked for is
                       written (the checkpoint contract, any driver: they
                       touch their task dir's steward-checkpoint-written,
                       as jobs/trainer does), and are stopped then rather
                       than at the end of their grace: less work lost after
                       the signal, GPUs free sooner. Default: false (every
                       job runs out its grace).
  -checkpoint-done-notice D
                       With -checkpoint-done, how long after a job says so
                       it is stopped, at most. Default: 2s (the contract's
                       bound; the controller reads the files every 250ms).
                       10s: steward-exec's driver events alone, before the
                       contract.
  -earmarks=false      Stop the simulated controller from reporting which GPUs
                       were freed for whom (the real controller does), so that
                       freed GPUs are free to all at the next plan: for
                       comparison. Default: true.
  -forecast N          Under steward, measure the start-time forecast: at about
                       N job arrivals spread over the trace, forecast the start
                       of every waiting job that never ran, and compare with
                       the start the simulation gives it (median error, share
                       started by the P50 and the P90). Default: 0 (off).
  -forecast-expected   With -forecast, every job says its run time exactly
                       (steward.expected_runtime); else run times come from
                       the jobs finished so far, as in the controller.
  -forecast-max-nodes N
                       With -forecast, replay a cluster of more than N nodes
                       a share of N nodes at a time, as the controller
                       replays one of more than 128 (to measure that on a
                       small simulated cluster). Default: 128.
  -plan-interval D     Least virtual time between two Steward plans: events in
                       between are planned for together, as a controller that
                       batches them. A new job Nomad cannot place is planned
                       for at once (the controller reacts to Nomad's blocked
                       evaluation), as is a victim's grace end. 0 plans at
                       every event. Default: 30s.
  -policies LIST       Which to run, comma-separated. Default:
                       fifo,strict,steward.
  -format FORMAT       table, json, csv or markdown. Default: table.
  -out DIR             Also write results.json, results.csv and PNG charts
                       (queueing-delay CDFs by tier, utilisation over time).
  -cpuprofile FILE     Write a CPU profile of the run to FILE, for
                       go tool pprof (where a slow run spends its time).

Traces:

  Steward's CSV (job,submit,gpus,run_time and optional allocs,user,tenant,
  tier,idle_after) or the Gen-Parallel CSV of the shared traces, told apart
  by the header, in UTF-8: a malformed row or a byte that is not UTF-8 is
  reported with its line and column. A GPU count below 1 (gpus 0.5) is
  simulated as 1 GPU and counted in the report. A job naming a tier the
  policy lacks runs as its tenant's default tier, as under the controller,
  and the report gives those jobs a delay row of their own.

Exit status:

  0 when every trace was simulated; 1 on an error (bad flags, policy or
  trace); 2 when a trace had nothing to simulate (no job rows, or every job
  CPU-only, outside -from/-to or larger than the cluster): a warning names
  it and says why, and the other traces are still reported.

Example:

  $ steward simulate -policy example.hcl -scale 100 -trace philly -trace helios -out sim-out
`)
}

func (c *SimulateCommand) Synopsis() string {
	return "Replay a job trace under FIFO, Nomad preemption and a Steward policy"
}

// traceList collects repeated -trace flags.
type traceList []string

func (t *traceList) String() string     { return strings.Join(*t, ",") }
func (t *traceList) Set(v string) error { *t = append(*t, v); return nil }

func (c *SimulateCommand) Run(args []string) int {
	var (
		policyPath, tracesDir, policies, format, outDir           string
		cpuProfile                                                string
		nodesArg                                                  string
		traces                                                    traceList
		gpusPerNode, limit                                        int
		seed                                                      uint64
		scale                                                     float64
		checkpointEvery, planInterval, checkpointCost, doneNotice time.Duration
		from, to                                                  time.Duration
		earmarks, checkpointDone                                  bool
		forecasts                                                 int
		forecastExpected                                          bool
		forecastMaxNodes                                          int
	)
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&policyPath, "policy", "", "")
	fs.Var(&traces, "trace", "")
	fs.StringVar(&tracesDir, "traces-dir", sim.DefaultTracesDir, "")
	fs.StringVar(&nodesArg, "nodes", "100", "")
	fs.IntVar(&gpusPerNode, "gpus-per-node", 8, "")
	fs.Float64Var(&scale, "scale", 1, "")
	fs.Uint64Var(&seed, "seed", 1, "")
	fs.IntVar(&limit, "limit", 0, "")
	fs.DurationVar(&from, "from", 0, "")
	fs.DurationVar(&to, "to", 0, "")
	fs.DurationVar(&checkpointEvery, "checkpoint-every", sim.DefaultCheckpointEvery, "")
	fs.DurationVar(&planInterval, "plan-interval", sim.DefaultPlanInterval, "")
	fs.DurationVar(&checkpointCost, "checkpoint-cost", sim.DefaultCheckpointCost, "")
	fs.BoolVar(&earmarks, "earmarks", true, "")
	fs.BoolVar(&checkpointDone, "checkpoint-done", false, "")
	fs.DurationVar(&doneNotice, "checkpoint-done-notice", sim.DefaultDoneNotice, "")
	fs.IntVar(&forecasts, "forecast", 0, "")
	fs.BoolVar(&forecastExpected, "forecast-expected", false, "")
	fs.IntVar(&forecastMaxNodes, "forecast-max-nodes", 0, "")
	fs.StringVar(&policies, "policies", "fifo,strict,steward", "")
	fs.StringVar(&format, "format", "table", "")
	fs.StringVar(&outDir, "out", "", "")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error(fmt.Sprintf("%v\n\n%s", err, c.Help()))
		return 1
	}
	usage := func(msg string) int {
		c.UI.Error(msg + "\n\n" + c.Help())
		return 1
	}
	switch {
	case fs.NArg() > 0:
		return usage(fmt.Sprintf("Unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	case policyPath == "":
		return usage("No policy given: -policy FILE is required.")
	case len(traces) == 0:
		return usage("No trace given: -trace FILE (or philly, helios) is required.")
	case scale <= 0:
		return usage(fmt.Sprintf("-scale must be more than 0; got %g.", scale))
	case limit < 0:
		return usage(fmt.Sprintf("-limit must not be negative; got %d.", limit))
	case forecastMaxNodes < 0:
		return usage(fmt.Sprintf("-forecast-max-nodes must not be negative; got %d.", forecastMaxNodes))
	case forecasts < 0:
		return usage(fmt.Sprintf("-forecast must not be negative; got %d.", forecasts))
	case checkpointEvery < 0 || planInterval < 0 || checkpointCost < 0:
		return usage(fmt.Sprintf("-checkpoint-every, -checkpoint-cost and -plan-interval must not be negative; got %s, %s and %s.",
			checkpointEvery, checkpointCost, planInterval))
	}
	window := sim.Window{From: from, To: to}
	if err := window.Check(); err != nil {
		return usage(fmt.Sprintf("-from/-to: %v.", err))
	}
	nodeGPUs, nodeModels, nodeList, err := sim.ParseNodes(nodesArg, gpusPerNode)
	if err != nil {
		return usage(err.Error() + ".")
	}
	if nodeList && flagGiven(fs, "gpus-per-node") {
		return usage(fmt.Sprintf("-nodes %s gives each node's GPUs: leave out -gpus-per-node, or give -nodes a number.", nodesArg))
	}
	switch format {
	case "table", "json", "csv", "markdown":
	default:
		return usage(fmt.Sprintf("Unknown -format %q: use table, json, csv or markdown.", format))
	}
	var kinds []sim.PolicyKind
	for _, name := range strings.Split(policies, ",") {
		k, err := sim.ParsePolicyKind(strings.TrimSpace(name))
		if err != nil {
			return usage(fmt.Sprintf("-policies: %v.", err))
		}
		kinds = append(kinds, k)
	}

	files, err := policy.ExpandPaths([]string{policyPath})
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	pol, _ := loadPolicy(c.UI, files)
	if pol == nil {
		return 1
	}
	sim.ScaleTenants(pol, scale)

	if cpuProfile != "" {
		stop, err := startCPUProfile(cpuProfile)
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		defer stop()
	}

	var reports []*sim.Report
	empty := 0 // traces with nothing to simulate
	for _, arg := range traces {
		path, err := sim.ResolveTrace(arg, tracesDir)
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		tr, err := sim.ReadTraceFile(path)
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		rep, err := sim.Compare(tr, sim.Options{
			Config: sim.Config{Policy: pol, NodeGPUs: nodeGPUs, NodeModels: nodeModels, CheckpointEvery: checkpointEvery,
				CheckpointCost: checkpointCost, CheckpointDone: checkpointDone, DoneNotice: doneNotice, PlanInterval: planInterval, NoEarmarks: !earmarks,
				Forecasts: forecasts, ForecastExpected: forecastExpected,
				ForecastMaxNodes: forecastMaxNodes},
			Seed: seed, Limit: limit, Window: window, Policies: kinds, TenantScale: scale,
		})
		var nothing *sim.NothingToSimulate
		if errors.As(err, &nothing) {
			// Not a broken trace, but no figures: say why, go on with the
			// other traces, and exit 2 so that a script notices.
			c.UI.Warn("Warning: " + err.Error())
			empty++
			continue
		}
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		reports = append(reports, rep)
	}
	if len(reports) == 0 {
		return 2
	}

	var buf bytes.Buffer
	switch format {
	case "table":
		for i, rep := range reports {
			if i > 0 {
				buf.WriteString("\n")
			}
			err = rep.WriteTable(&buf)
		}
	case "markdown":
		for i, rep := range reports {
			if i > 0 {
				buf.WriteString("\n")
			}
			fmt.Fprintf(&buf, "**%s** (%d jobs)\n\n", rep.Trace, rep.Jobs)
			err = rep.WriteMarkdown(&buf)
		}
	case "json":
		err = sim.WriteJSON(&buf, reports)
	case "csv":
		err = sim.WriteCSV(&buf, reports)
	}
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	if format == "table" || format == "markdown" {
		buf.WriteString("\n")
		if err := sim.WriteForecast(&buf, reports); err != nil {
			c.UI.Error(err.Error())
			return 1
		}
	}
	c.UI.Output(strings.TrimRight(buf.String(), "\n"))

	if outDir != "" {
		written, err := writeSimulationFiles(outDir, reports)
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		c.UI.Info("Wrote " + strings.Join(written, ", "))
	}
	if empty > 0 {
		return 2
	}
	return 0
}

// writeSimulationFiles writes results.json, results.csv and the charts.
func writeSimulationFiles(dir string, reports []*sim.Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory %s: %w", dir, err)
	}
	var written []string
	for _, f := range []struct {
		name  string
		write func(io.Writer, []*sim.Report) error
	}{{"results.json", sim.WriteJSON}, {"results.csv", sim.WriteCSV}} {
		var buf bytes.Buffer
		if err := f.write(&buf, reports); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		written = append(written, path)
	}
	for _, rep := range reports {
		charts, err := sim.WriteCharts(rep, dir)
		if err != nil {
			return nil, err
		}
		written = append(written, charts...)
	}
	return written, nil
}

// startCPUProfile starts Go's CPU profiler writing to path; the returned
// function stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// flagGiven reports whether a flag was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
