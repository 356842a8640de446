package command

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/posener/complete"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/internal/version"
	"github.com/gpu-steward/steward/policy"
)

// OperatorDebugCommand is "steward operator debug": a redacted archive of
// what troubleshooting the controller needs, as `nomad operator debug`
// makes for Nomad.
type OperatorDebugCommand struct{ Meta }

// Bounds of one archive.
const (
	debugDefaultDuration = 30 * time.Second
	debugDefaultMaxMiB   = 64
	// debugLogBytes: the tail of each controller log file taken.
	debugLogBytes = 1 << 20
	// debugMaxRecords: job records read at most (each a Nomad read).
	debugMaxRecords = 2000
)

func (c *OperatorDebugCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward operator debug [options]

  Writes a tar.gz archive of what troubleshooting Steward needs, as
  'nomad operator debug' does for Nomad, with an operator's token:

    index.json            what the archive holds, what could not be
                          collected and why, and how many secrets were
                          redacted (by rule, never their values)
    versions.json         steward's version and the Nomad agent's
    status.json           the controller's published status (tenants, held
                          jobs, the queue, recent decisions)
    controller.json       the leader and where it answers job checks
    states/NS/JOB.json    every job's state (steward/jobs/... in namespace
                          steward)
    records/NS/JOB.json   every job's record (its steward_* items only)
    policy.json           the resolved policy, less its notify blocks
    plan.json             what the controller would do now, with reasons
    snapshot.json         what that plan was made from (the capture format
                          of 'steward plan -snapshot': replay it with
                          'steward plan -replay')
    nomad/                the controller job, its allocations, Nomad's
                          scheduler configuration
    logs/                 the tail of each controller allocation's log
    controller/ADDR/      its /healthz, /metrics and, when it runs with
                          -pprof, goroutine, heap and CPU profiles

  Every file is redacted before it is written: the token used, the values
  of secret-looking environment variables (TOKEN, SECRET, PASSWORD, KEY,
  AUTH...) and of the variables the policy's notify blocks read (url_env,
  headers_from_env), token headers, SecretID fields and credentials in
  URLs. The task environment of the controller job is left out. The
  archive is written mode 0600.

Debug Options:

  -output FILE
    Where to write the archive (default steward-debug-<time>.tar.gz in the
    current directory).

  -duration D
    The whole collection's time bound (default 30s); the CPU profile runs
    for a third of it. What is not collected in time is listed in index.json.

  -max-size MiB
    The archive's size cap before compression (default 64): files past it are
    cut or left out, and index.json says which.

  -policy FILE|DIR
    The policy to plan with (default: the one in the controller job's
    variable, nomad/jobs/steward-controller in namespace steward).

  -controller URL
    The controller's -listen address (http://127.0.0.1:PORT), for /healthz,
    /metrics and /debug/pprof; repeatable (default: the addresses of the
    steward-controller service in Nomad). A controller in a container
    (network_mode "none") is reached by nothing outside it: its logs and
    status are still collected.

` + generalOptionsUsage(flagTokenFile))
}

func (c *OperatorDebugCommand) Synopsis() string {
	return "Write a redacted archive of the controller's state, plans, logs and profiles"
}

func (c *OperatorDebugCommand) AutocompleteFlags() complete.Flags {
	return c.Meta.AutocompleteFlags(flagTokenFile, complete.Flags{
		"-output": complete.PredictFiles("*.tar.gz"), "-duration": complete.PredictAnything,
		"-max-size": complete.PredictAnything, "-policy": complete.PredictFiles("*.hcl"),
		"-controller": complete.PredictAnything,
	})
}

func (c *OperatorDebugCommand) AutocompleteArgs() complete.Predictor { return complete.PredictNothing }

// debugRun is one collection.
type debugRun struct {
	ctx    context.Context
	client *api.Client
	nomad  controller.Nomad
	ns     string
	arc    *debugArchive
	red    *redactor
	policy *policy.Policy // the resolved policy, when there is one
	// policyFiles are its files, for the plan: -policy's, or a private
	// copy of the variable's text in tmp.
	policyFiles []string
	tmp         string
	duration    time.Duration
	started     time.Time
}

func (c *OperatorDebugCommand) Run(args []string) int {
	var output string
	var policies, controllers stringList
	duration := debugDefaultDuration
	maxMiB := debugDefaultMaxMiB
	fs := c.FlagSet("operator debug", flagTokenFile)
	fs.StringVar(&output, "output", "", "")
	fs.DurationVar(&duration, "duration", duration, "")
	fs.IntVar(&maxMiB, "max-size", maxMiB, "")
	fs.Var(&policies, "policy", "")
	fs.Var(&controllers, "controller", "")
	if err := c.Parse(fs, args); err != nil || fs.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("operator debug takes no arguments")
		}
		c.UI.Error(fmt.Sprintf("%v\n\n%s", err, c.Help()))
		return 1
	}
	if duration < 3*time.Second || maxMiB < 1 {
		c.UI.Error("-duration must be at least 3s and -max-size at least 1 (MiB)")
		return 1
	}
	started := time.Now().UTC()
	root := "steward-debug-" + started.Format("2006-01-02-150405Z")
	if output == "" {
		output = root + ".tar.gz"
	}
	cfg, err := c.Config()
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	red := newRedactor()
	red.secret(cfg.SecretID, "the Nomad token used")
	red.environment(os.Environ())
	client, err := nomadClientCounted(cfg, nil)
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	r := &debugRun{ctx: ctx, client: client, nomad: controller.NewNomad(client), ns: controller.DefaultConfig().StateNamespace,
		red: red, arc: newDebugArchive(root, maxMiB<<20, red), duration: duration, started: started}

	defer func() {
		if r.tmp != "" {
			os.RemoveAll(r.tmp)
		}
	}()
	// The policy first: the variables its notify blocks read are secrets
	// to redact from everything after.
	r.loadPolicy(policies)
	r.versions()
	r.status()
	r.states()
	r.records()
	r.plan()
	r.controllerJob()
	r.controllers(controllers)

	idx := debugIndex{Created: started, Steward: version.String(), Args: redactArgs(args)}
	if err := r.arc.write(output, idx); err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("Wrote %s: %d files in %s, %d not collected (index.json says why).",
		output, len(r.arc.files)+1, time.Since(started).Round(time.Millisecond), len(r.arc.problems)))
	for _, p := range r.arc.problems {
		c.UI.Warn("  " + p)
	}
	return 0
}

// redactArgs keeps the command line for index.json, less any -token value.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.HasPrefix(a, "-token=") || strings.HasPrefix(a, "--token=") {
			out[i] = "-token=" + redacted
		}
		if i > 0 && (args[i-1] == "-token" || args[i-1] == "--token") {
			out[i] = redacted
		}
	}
	return out
}

func (r *debugRun) q() *api.QueryOptions {
	return (&api.QueryOptions{Namespace: r.ns}).WithContext(r.ctx)
}

// loadPolicy resolves the policy (-policy, else the controller job's
// variable) and adds its notify blocks' secrets to the redactor.
func (r *debugRun) loadPolicy(paths []string) {
	var err error
	if len(paths) == 0 {
		items, _, gerr := r.nomad.GetVar(r.ctx, r.ns, setupPolicyVar)
		switch {
		case gerr != nil:
			r.arc.problem("policy: read %s@%s: %v", setupPolicyVar, r.ns, gerr)
			return
		case items == nil || items[setupPolicyItem] == "":
			r.arc.problem("policy: no %s@%s (give -policy FILE)", setupPolicyVar, r.ns)
			return
		}
		p := policy.NewParser()
		pol, diags := p.ParseSources(policy.Source{Name: setupPolicyVar + "@" + r.ns + ".hcl", Bytes: []byte(items[setupPolicyItem])})
		if pol == nil || diags.HasErrors() {
			r.arc.problem("policy: the policy in %s@%s is not valid: %s", setupPolicyVar, r.ns, diags.Error())
			return
		}
		r.policy = pol
		if r.tmp, err = os.MkdirTemp("", "steward-debug-"); err == nil {
			f := filepath.Join(r.tmp, "policy.hcl")
			if err = os.WriteFile(f, []byte(items[setupPolicyItem]), 0o600); err == nil {
				r.policyFiles = []string{f}
			}
		}
		if err != nil {
			r.arc.problem("policy: a private copy to plan with: %v", err)
		}
	} else if r.policy, err = controller.LoadPolicy(paths); err != nil {
		r.arc.problem("policy: %v", err)
		return
	} else {
		r.policyFiles = paths
	}
	for _, n := range r.policy.Notify {
		if n.URL != "" {
			r.red.secret(n.URL, "notify "+n.Name+" url")
		}
		if n.URLEnv != "" {
			r.red.secret(os.Getenv(n.URLEnv), "notify "+n.Name+" url_env")
		}
		for h, env := range n.HeadersFromEnv {
			r.red.secret(os.Getenv(env), "notify "+n.Name+" header "+h)
		}
	}
	resolved := *r.policy
	resolved.Notify = nil // as `steward plan -snapshot`: URLs and headers may be credentials
	r.arc.addJSON("policy.json", &resolved)
}

func (r *debugRun) versions() {
	v := map[string]string{"steward": version.String(), "built_against_nomad": version.Nomad()}
	self, err := r.client.Agent().Self()
	if err != nil {
		r.arc.problem("versions: the Nomad agent's: %v", err)
	} else {
		v["nomad_agent"] = self.Member.Tags["build"]
		v["nomad_agent_name"] = self.Member.Name
	}
	r.arc.addJSON("versions.json", v)
}

func (r *debugRun) status() {
	s, err := controller.ReadStatus(r.ctx, r.nomad, r.ns)
	if err != nil {
		r.arc.problem("status: %v", err)
	} else {
		r.arc.addJSON("status.json", s)
	}
	items, _, err := r.nomad.GetVar(r.ctx, r.ns, controller.ControllerPath)
	switch {
	case err != nil:
		r.arc.problem("controller: read %s@%s: %v", controller.ControllerPath, r.ns, err)
	case items == nil:
		r.arc.problem("controller: no %s@%s: no controller has led yet", controller.ControllerPath, r.ns)
	default:
		r.arc.addJSON("controller.json", items)
	}
}

// states adds every job's state variable.
func (r *debugRun) states() {
	const prefix = "steward/jobs/"
	refs, err := r.nomad.ListVars(r.ctx, r.ns, prefix)
	if err != nil {
		r.arc.problem("states: list %s in %s: %v", prefix, r.ns, err)
		return
	}
	for _, ref := range refs {
		items, _, err := r.nomad.GetVar(r.ctx, ref.Namespace, ref.Path)
		if err != nil {
			r.arc.problem("states: %s: %v", ref.Path, err)
			if r.ctx.Err() != nil {
				return
			}
			continue
		}
		r.arc.addJSON("states/"+strings.TrimPrefix(ref.Path, prefix)+".json", items)
	}
}

// records adds every job's record, its steward_* items only: a job may
// keep its own items (credentials included) in the same variable.
func (r *debugRun) records() {
	refs, err := r.nomad.ListVars(r.ctx, "*", "nomad/jobs/")
	if err != nil {
		r.arc.problem("records: list nomad/jobs/ in every namespace: %v", err)
		return
	}
	for i, ref := range refs {
		if i == debugMaxRecords {
			r.arc.problem("records: %d more left out (at most %d)", len(refs)-i, debugMaxRecords)
			return
		}
		items, _, err := r.nomad.GetVar(r.ctx, ref.Namespace, ref.Path)
		if err != nil {
			r.arc.problem("records: %s@%s: %v", ref.Path, ref.Namespace, err)
			if r.ctx.Err() != nil {
				return
			}
			continue
		}
		rec := map[string]string{}
		for k, v := range items {
			if strings.HasPrefix(k, "steward_") {
				rec[k] = v
			}
		}
		if len(rec) > 0 {
			r.arc.addJSON("records/"+ref.Namespace+"/"+strings.TrimPrefix(ref.Path, "nomad/jobs/")+".json", rec)
		}
	}
}

// plan plans the cluster now, as `steward plan -snapshot` does, and adds
// the plan and what it was made from.
func (r *debugRun) plan() {
	if r.policy == nil {
		r.arc.problem("plan, snapshot: no policy to plan with")
		return
	}
	if len(r.policyFiles) == 0 {
		return // loadPolicy said why
	}
	var logBuf bytes.Buffer
	cfg := controller.DefaultConfig()
	cfg.DryRun, cfg.Listen, cfg.PolicyFiles = true, "", r.policyFiles
	ctl, err := controller.New(cfg, r.client, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logBuf}))
	if err != nil {
		r.arc.problem("plan, snapshot: %v", err)
		return
	}
	capture, plan, err := ctl.CaptureOnce(r.ctx)
	if err != nil {
		r.arc.problem("plan, snapshot: %v", err)
	} else {
		r.arc.addJSON("plan.json", planOutput(plan, "", capture.Policy))
		var b bytes.Buffer
		if err := capture.Write(&b); err != nil {
			r.arc.problem("snapshot.json: %v", err)
		} else {
			r.arc.add("snapshot.json", b.Bytes())
		}
	}
	if logBuf.Len() > 0 {
		r.arc.add("plan.log", logBuf.Bytes())
	}
}
