package command

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"
	"github.com/posener/complete"

	"github.com/gpu-steward/steward/controller"
)

func init() {
	register("controller", func(ui cli.Ui) cli.Command { return &ControllerCommand{Meta: Meta{UI: ui}} })
}

// ControllerCommand is "steward controller": the control loop.
type ControllerCommand struct {
	Meta
	// Stop, when set, ends the controller (tests); otherwise SIGINT and
	// SIGTERM do.
	Stop <-chan struct{}
}

func (c *ControllerCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward controller -policy FILE|DIR [options]

  Watches Nomad and enforces the policy: job priorities follow tiers,
  tenants get their reservations back, work over a tenant's limit is held,
  idle GPUs are reclaimed, preempted jobs are checkpointed, held and
  resumed by themselves. Every decision is written to the job's variable
  nomad/jobs/<job> (the job's Variables tab in the Nomad UI) and to the
  scaling events on the job's page.

  Connects like the nomad CLI (general options below). Several copies may run:
  one leads (a Nomad variable lock on steward/leader), the others wait.
  SIGHUP reloads the policy; a bad one is logged and the last good one
  kept.

Options:

  -config FILE         The options below in an HCL file (docs/reference/controller.md,
                       "Configuration file"): policy = [...] and log_level at the top,
                       blocks nomad, telemetry, check, high_availability, state. A flag
                       on the command line wins over the file.
  -policy FILE|DIR     Policy file or directory (repeatable). Required, here or in -config.
  -dry-run             Plan and log, change nothing in Nomad.
  -listen ADDR         /metrics, /healthz and (without -check-listen) /v1/job/check
                       address (default 127.0.0.1:9646; "" off). /healthz names this
                       controller and its last error: keep it on loopback unless
                       whoever reaches it may read that.
  -check-listen ADDR   Serve /v1/job/check ('steward job check') alone on ADDR.
  -tls-cert FILE       PEM certificate (and -tls-key FILE, its key) for the listener
                       that serves /v1/job/check. Every check carries its caller's
                       Nomad token: off loopback, the controller refuses to serve
                       checks without them.
  -check-concurrency N Checks answered at once (default 4); others wait 2s, then 503.
  -check-rate R        Checks a second per token (default 1), with bursts of
                       -check-burst N (default 5); beyond: 429 and Retry-After.
  -pprof               Also serve Go's profiler at /debug/pprof/ on -listen (for
                       measuring; keep -listen on loopback).
  -advertise URL       Where people's 'steward job check' reaches this controller,
                       published in the status (default: the listen address);
                       http:// only for a loopback address.
  -resync DUR          Full read of the cluster at least this often (default 30s).
  -stats-interval DUR  GPU activity polling period, for nodes running work an idle
                       rule covers (default 10s).
  -activity-source SRC Where GPU activity is read: nomad (each covered node's
                       host stats, the default: small clusters) or prometheus
                       (one query per interval for the whole cluster).
  -prometheus-address URL
                       Prometheus's HTTP API, e.g. http://127.0.0.1:9090 (with
                       -activity-source prometheus).
  -prometheus-query Q  GPU utilisation in percent, one series per GPU labelled
                       with its UUID (default "100 * DCGM_FI_PROF_GR_ENGINE_ACTIVE").
  -prometheus-uuid-label L
                       The label that holds each series' GPU UUID, a MIG
                       instance's MIG UUID (default UUID).
  -activity-max-age DUR
                       Prometheus samples older than this are refused (default 1m).
  -state-namespace NS  Steward's own namespace: every job's state, the leader lock
                       and the status (default "steward"; it must exist, and no
                       tenant's token may write there).
  -controller-pool NAME
                       The node pool of the controller's own nodes (repeatable).
                       Nomad CE lets any token that may submit jobs name any node
                       pool: Steward holds every job outside its own namespace in
                       this pool, or in "all" while this pool has a node, until its
                       owner submits it to another pool. Never "default" or "all".
  -placeholder-image IMAGE
                       The image placeholders run under docker, on GPU nodes with
                       neither steward-exec nor raw_exec (default
                       steward/shell:local, which 'make image' builds). It must be
                       on those nodes already, with /bin/sh and sleep: it is never
                       pulled (so never untagged or ":latest").
  -job-records=false   Write no record into each job's nomad/jobs/<job> variable
                       (the token then needs no access to jobs' own variables).
  -ui-url URL          The Nomad UI's address for the links in webhook messages
                       (notify blocks), unless a block sets ui_url (default:
                       the Nomad address).
  -election KIND       How copies elect their leader: lock (a Nomad variable lock,
                       the default) or lease (a lease Steward keeps in the same
                       variable; any TTL of 1s or more: fails over in about 2×TTL).
  -lock-ttl DUR        Leader lock TTL (default 15s, at least 10s with -election lock).
  -lock-delay DUR      Wait after a lost leader before another takes over (default 15s).
  -nomad-timeout DUR   Deadline of every Nomad request (default 30s).
  -round-timeout DUR   A leader that has finished no round for this long steps
                       down and releases its lock (default 2m; longer than
                       -nomad-timeout).
  -act-in-flight N     A plan's actions for different jobs (and drains'
                       checkpoint signals) carried out at once (default 8;
                       1: one after another).
  -id NAME             This controller's name (default host:pid), which tenants
                       read: never an allocation ID (one is replaced by
                       NOMAD_ALLOC_NAME).
  -log-level LEVEL     trace, debug, info, warn, error (default info).
  -log-json            Log JSON lines.
  -consul-address ADDR Elect the leader with a Consul session lock on this
                       Consul agent instead of a Nomad variable lock
                       (token: CONSUL_HTTP_TOKEN).
  -consul-lock-key KEY Consul KV key of the lock (default steward/leader).

` + generalOptionsUsage(flagTokenFile))
}

// controllerFlags are the general options the controller takes: no
// -namespace (it watches every namespace), and -token-file.
const controllerFlags = flagTokenFile

func (c *ControllerCommand) AutocompleteFlags() complete.Flags {
	return c.Meta.AutocompleteFlags(controllerFlags, complete.Flags{
		"-policy": complete.PredictFiles("*.hcl"), "-dry-run": complete.PredictNothing,
		"-listen": complete.PredictAnything, "-check-listen": complete.PredictAnything,
		"-tls-cert": complete.PredictFiles("*.pem"), "-tls-key": complete.PredictFiles("*.pem"),
		"-check-concurrency": complete.PredictAnything, "-check-rate": complete.PredictAnything,
		"-check-burst": complete.PredictAnything, "-pprof": complete.PredictNothing, "-advertise": complete.PredictAnything,
		"-resync": complete.PredictAnything, "-stats-interval": complete.PredictAnything,
		"-activity-source":    complete.PredictSet(controller.ActivityNomad, controller.ActivityPrometheus),
		"-prometheus-address": complete.PredictAnything, "-prometheus-query": complete.PredictAnything,
		"-prometheus-uuid-label": complete.PredictAnything, "-activity-max-age": complete.PredictAnything,
		"-state-namespace": complete.PredictAnything, "-placeholder-image": complete.PredictAnything, "-controller-pool": complete.PredictAnything, "-job-records": complete.PredictSet("true", "false"),
		"-election": complete.PredictSet("lock", "lease"), "-lock-ttl": complete.PredictAnything, "-lock-delay": complete.PredictAnything, "-id": complete.PredictAnything,
		"-nomad-timeout": complete.PredictAnything, "-round-timeout": complete.PredictAnything, "-act-in-flight": complete.PredictAnything,
		"-log-level": complete.PredictSet("trace", "debug", "info", "warn", "error"), "-log-json": complete.PredictNothing,
		"-consul-address": complete.PredictAnything, "-consul-lock-key": complete.PredictAnything,
		"-config": complete.PredictFiles("*.hcl"),
	})
}

func (c *ControllerCommand) AutocompleteArgs() complete.Predictor { return complete.PredictNothing }

func (c *ControllerCommand) Synopsis() string { return "Run the controller that enforces a policy" }

// controllerOptions are the controller's flags that are not Config fields.
type controllerOptions struct {
	policies, pools              stringList
	level, consulAddr, consulKey string
	logJSON                      bool
	configFile                   string
}

// flagSet declares the controller's flags onto cfg and o (-config's file
// sets the same flags: controller_config.go).
func (c *ControllerCommand) flagSet(cfg *controller.Config, o *controllerOptions) *flag.FlagSet {
	host, _ := os.Hostname()
	fs := c.FlagSet("controller", controllerFlags)
	fs.Var(&o.policies, "policy", "")
	fs.Var(&o.pools, "controller-pool", "")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "")
	fs.StringVar(&cfg.CheckListen, "check-listen", "", "")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "")
	fs.IntVar(&cfg.CheckConcurrency, "check-concurrency", cfg.CheckConcurrency, "")
	fs.Float64Var(&cfg.CheckRate, "check-rate", cfg.CheckRate, "")
	fs.IntVar(&cfg.CheckBurst, "check-burst", cfg.CheckBurst, "")
	fs.StringVar(&cfg.Advertise, "advertise", "", "")
	fs.StringVar(&cfg.UIURL, "ui-url", "", "")
	fs.DurationVar(&cfg.Resync, "resync", cfg.Resync, "")
	fs.DurationVar(&cfg.StatsInterval, "stats-interval", cfg.StatsInterval, "")
	fs.StringVar(&cfg.ActivitySource, "activity-source", cfg.ActivitySource, "")
	fs.StringVar(&cfg.Prometheus.Address, "prometheus-address", cfg.Prometheus.Address, "")
	fs.StringVar(&cfg.Prometheus.Query, "prometheus-query", cfg.Prometheus.Query, "")
	fs.StringVar(&cfg.Prometheus.UUIDLabel, "prometheus-uuid-label", cfg.Prometheus.UUIDLabel, "")
	fs.DurationVar(&cfg.Prometheus.MaxAge, "activity-max-age", cfg.Prometheus.MaxAge, "")
	fs.StringVar(&cfg.StateNamespace, "state-namespace", cfg.StateNamespace, "")
	fs.StringVar(&cfg.PlaceholderImage, "placeholder-image", cfg.PlaceholderImage, "")
	fs.BoolVar(&cfg.JobRecords, "job-records", cfg.JobRecords, "")
	fs.StringVar(&cfg.Election, "election", cfg.Election, "")
	fs.DurationVar(&cfg.LockTTL, "lock-ttl", cfg.LockTTL, "")
	fs.DurationVar(&cfg.LockDelay, "lock-delay", cfg.LockDelay, "")
	fs.DurationVar(&cfg.CallTimeout, "nomad-timeout", cfg.CallTimeout, "")
	fs.IntVar(&cfg.ActInFlight, "act-in-flight", cfg.ActInFlight, "")
	fs.DurationVar(&cfg.RoundTimeout, "round-timeout", cfg.RoundTimeout, "")
	fs.StringVar(&cfg.Identity, "id", fmt.Sprintf("%s:%d", host, os.Getpid()), "")
	fs.StringVar(&o.level, "log-level", "info", "")
	fs.BoolVar(&o.logJSON, "log-json", false, "")
	fs.StringVar(&o.consulAddr, "consul-address", "", "")
	fs.StringVar(&o.consulKey, "consul-lock-key", "steward/leader", "")
	fs.StringVar(&o.configFile, "config", "", "")
	return fs
}

func (c *ControllerCommand) Run(args []string) int {
	cfg := controller.DefaultConfig()
	var o controllerOptions
	fs := c.flagSet(&cfg, &o)
	if err := c.Parse(fs, args); err != nil {
		c.UI.Error(fmt.Sprintf("%v\n\n%s", err, c.Help()))
		return 1
	}
	if o.configFile != "" {
		// The file's values for every flag the command line left out.
		explicit := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
		if diags, ok := applyControllerConfig(fs, o.configFile, explicit); !ok {
			c.UI.Error(strings.TrimRight(diags, "\n"))
			return 1
		} else if diags != "" {
			c.UI.Warn(strings.TrimRight(diags, "\n"))
		}
	}
	cfg.PolicyFiles = o.policies
	cfg.ControllerPools = o.pools
	var renamed bool
	cfg.Identity, renamed = publicIdentity(cfg.Identity, os.Getenv("NOMAD_ALLOC_ID"), os.Getenv("NOMAD_ALLOC_NAME"))
	if o.consulAddr != "" {
		cfg.Consul = &controller.ConsulConfig{Address: o.consulAddr, LockKey: o.consulKey}
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "steward", Level: hclog.LevelFromString(o.level), JSONFormat: o.logJSON,
		Output: os.Stderr})

	if renamed {
		log.Warn("-id named this allocation's ID, which tenants read where the leader is published: using the allocation's name instead",
			"id", cfg.Identity)
	}

	if skipped := os.Getenv(controller.NotifyEnvSkipped); skipped != "" {
		// The values are not logged, nor are they known here: only the
		// names the job could not pass.
		log.Warn("items of the controller job's notify secrets variable were not passed to the controller: not environment variable names, Nomad's own (NOMAD_*), or values with a NUL byte",
			"variable", "nomad/jobs/steward-controller/controller/controller", "skipped", skipped)
	}

	cfg.Traffic = &controller.Traffic{}
	client, err := c.ClientCounted(cfg.Traffic)
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	// loadToken sets the client's token from -token-file again (the
	// client starts with it); every request after that carries the new
	// one (api.Client guards it with a lock).
	loadToken := func() error {
		if c.tokenFile == "" {
			return nil
		}
		tok, err := readTokenFile(c.tokenFile)
		if err != nil {
			return err
		}
		client.SetSecretID(tok)
		return nil
	}
	ctl, err := controller.New(cfg, client, log)
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGHUP {
					// A renewed workload identity is picked up with
					// the policy; a file gone bad keeps the old token.
					if err := loadToken(); err != nil {
						log.Error("token file reload failed: keeping the last token", "error", err)
					}
					_ = ctl.Reload()
					continue
				}
				log.Info("shutting down", "signal", s.String())
				cancel()
				return
			case <-c.Stop:
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	var serveFailed atomic.Bool
	go func() {
		if err := ctl.Serve(ctx, func(addr string) { log.Info("serving /metrics and /healthz", "address", addr) },
			func(addr string) { log.Info("serving /v1/job/check", "address", addr) }); err != nil {
			// Without its endpoints (a port taken, a bad certificate)
			// the controller would enforce unseen: stop instead.
			log.Error("http endpoints", "error", err)
			serveFailed.Store(true)
			cancel()
		}
	}()
	log.Info("steward controller starting", "nomad", client.Address(), "policy", strings.Join(cfg.PolicyFiles, ","),
		"dry_run", cfg.DryRun, "identity", cfg.Identity)
	if err := ctl.Run(ctx); err != nil {
		log.Error("controller stopped", "error", err)
		return 1
	}
	if serveFailed.Load() {
		return 1
	}
	// Give in-flight log lines a moment (tests read them).
	time.Sleep(10 * time.Millisecond)
	return 0
}

// publicIdentity keeps the controller's allocation ID out of its name,
// which tenants read (steward/controller, their namespace's view, a
// check's answer): with the node, the ID says where the controller's
// token file lies. A jobspec written before (-id ${NOMAD_ALLOC_ID}) gets
// the allocation's name instead.
func publicIdentity(id, allocID, allocName string) (string, bool) {
	if allocID == "" || !strings.Contains(id, allocID) {
		return id, false
	}
	if allocName == "" {
		allocName = "steward-controller"
	}
	return strings.ReplaceAll(id, allocID, allocName), true
}
