package command

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/nomad/api"
	"github.com/posener/complete"

	"github.com/gpu-steward/steward/acl"
	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/jobs"
	"github.com/gpu-steward/steward/policy"
)

// OperatorSetupCommand is "steward operator setup": docs/install.md's
// cluster-side steps in one idempotent command.
type OperatorSetupCommand struct{ Meta }

// Exit codes of `steward operator setup`: -check exits setupMissing when
// something is not as setup would make it.
const (
	setupOK      = 0
	setupError   = 1
	setupMissing = 2
)

// The names setup gives what it creates, the same as docs/install.md's.
const (
	setupJobID       = "steward-controller"
	setupACLPolicy   = "steward-controller"
	setupPolicyVar   = "nomad/jobs/" + setupJobID
	setupPolicyItem  = "policy"
	setupPoolDesc    = "Steward's controller: no tenant's work"
	setupNSDesc      = "Steward's state"
	setupACLPolicyDs = "Steward controller (steward operator setup)"
)

func (c *OperatorSetupCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward operator setup [options]

  Sets Steward up on a Nomad cluster with an operator's (management) token,
  as docs/install.md's steps by hand do, in this order:

    1. the namespace "steward", for Steward's state and its controller;
    2. the controller's node pool (-var node_pool=...), when not "default";
    3. the ACL policy "steward-controller" (acl/steward-controller.policy.hcl),
       bound to the controller job's workload identity: no token is made,
       none is printed (skipped when the cluster runs without ACLs);
    4. the policy variable nomad/jobs/steward-controller in namespace
       steward, from -policy FILE, validated first (every mistake with its
       file:line:col; nothing is changed when it is invalid), and the
       notify secrets variable
       nomad/jobs/steward-controller/controller/controller from
       -notify-env-file FILE;
    5. Nomad's system-scheduler preemption off (install.md, step 8);
    6. the controller job, from the shipped jobspec
       (jobs/steward-controller.nomad.hcl, built into this binary) with the
       -var and -var-file values 'nomad job run' would take.

  Each step first reads what is there and changes only what differs, so a
  second run changes nothing and says so. It prints what it did, then what
  is left to do by hand (the host user, the image, monitoring, teams).

  Exit status: 0 when everything is set up, 1 on an error; with -check, 2
  when something is missing or differs.

Setup Options:

  -policy FILE
    The Steward policy (one HCL file) to store in the policy variable. Needed
    the first time; without it a variable already there is kept (and
    validated).

  -notify-env-file FILE
    The notify blocks' secrets (url_env, headers_from_env): KEY=VALUE lines,
    quoted as in a shell's .env file ("..." with \n, \" and \\ escapes,
    '...' as written). They are stored as the items of the Nomad variable
    nomad/jobs/steward-controller/controller/controller in namespace steward,
    which only the controller job and operators can read, replacing what is
    there; the job gives each to the controller as an environment variable
    and restarts it when they change. Names are printed, values never. A
    name that is not an environment variable's, or starts with NOMAD_, is
    refused. Without it, a variable already there is kept.

  -var KEY=VALUE, -var-file FILE
    Values of the jobspec's variables (driver, image, steward_bin, user,
    node_pool, count, election, lock_ttl, tls_cert, tls_key, nomad_addr,
    pprof), as for
    'nomad job run'. Repeatable.

  -jobspec FILE
    Register this jobspec instead of the shipped one.

  -check
    Change nothing: say what is set up and what is missing or differs, and
    exit 2 unless everything is in place.

` + generalOptionsUsage(flagTokenFile))
}

func (c *OperatorSetupCommand) Synopsis() string {
	return "Create Steward's namespace, ACL policy, policy variable and controller job"
}

func (c *OperatorSetupCommand) AutocompleteFlags() complete.Flags {
	return c.Meta.AutocompleteFlags(flagTokenFile, complete.Flags{
		"-policy": complete.PredictFiles("*.hcl"), "-var": complete.PredictAnything,
		"-var-file": complete.PredictFiles("*"), "-jobspec": complete.PredictFiles("*.hcl"),
		"-check": complete.PredictNothing, "-notify-env-file": complete.PredictFiles("*"),
	})
}

func (c *OperatorSetupCommand) AutocompleteArgs() complete.Predictor { return complete.PredictNothing }

// setupStep is what one step found or did.
type setupStep struct {
	What string
	// State: created, updated, unchanged, skipped (apply); ok, missing,
	// differs, skipped (-check).
	State  string
	Detail string
}

func (s setupStep) changed() bool { return s.State == "created" || s.State == "updated" }
func (s setupStep) lacking() bool { return s.State == "missing" || s.State == "differs" }

// setup holds one run's inputs.
type setup struct {
	client     *api.Client
	ns         string
	policyText string // "" with no -policy
	policyFile string
	// notifyEnv: -notify-env-file's items; nil without it.
	notifyEnv     map[string]string
	notifyEnvFile string
	jobspec       string
	vars          string
	apply         bool
}

func (c *OperatorSetupCommand) Run(args []string) int {
	var policyFile, jobspecFile, notifyEnvFile string
	var vars, varFiles stringList
	var check bool
	fs := c.FlagSet("operator setup", flagTokenFile)
	fs.StringVar(&policyFile, "policy", "", "")
	fs.StringVar(&jobspecFile, "jobspec", "", "")
	fs.StringVar(&notifyEnvFile, "notify-env-file", "", "")
	fs.Var(&vars, "var", "")
	fs.Var(&varFiles, "var-file", "")
	fs.BoolVar(&check, "check", false, "")
	if err := c.Parse(fs, args); err != nil || fs.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("operator setup takes no arguments")
		}
		c.UI.Error(fmt.Sprintf("%v\n\n%s", err, c.Help()))
		return setupError
	}
	s := &setup{ns: controller.DefaultConfig().StateNamespace, jobspec: jobs.Controller, apply: !check, policyFile: policyFile}
	if jobspecFile != "" {
		b, err := os.ReadFile(jobspecFile)
		if err != nil {
			c.UI.Error(fmt.Sprintf("read -jobspec: %v", err))
			return setupError
		}
		s.jobspec = string(b)
	}
	var err error
	if s.vars, err = variableValues(vars, varFiles); err != nil {
		c.UI.Error(err.Error())
		return setupError
	}
	// The policy is validated before anything is changed.
	if policyFile != "" {
		text, ok := c.validatePolicy(policyFile)
		if !ok {
			return setupError
		}
		s.policyText = text
	}
	// So are the notify secrets.
	if notifyEnvFile != "" {
		if s.notifyEnv, err = readNotifyEnvFile(notifyEnvFile); err != nil {
			c.UI.Error(err.Error())
			return setupError
		}
		s.notifyEnvFile = notifyEnvFile
	}
	if s.client, err = c.Client(); err != nil {
		c.UI.Error(err.Error())
		return setupError
	}
	// The jobspec is parsed (by Nomad) before anything is changed too: a
	// mistyped -var fails here, not after the namespace was made.
	job, err := s.parseJob()
	if err != nil {
		c.UI.Error(err.Error())
		return setupError
	}
	steps := []func(*api.Job) (setupStep, error){s.namespace, s.nodePool, s.aclPolicy, s.policyVariable, s.notifyEnvVariable, s.schedulerConfig, s.controllerJob}
	var done []setupStep
	for _, step := range steps {
		st, err := step(job)
		if err != nil {
			c.report(done)
			c.UI.Error(err.Error())
			return setupError
		}
		done = append(done, st)
	}
	c.report(done)
	changed, lacking := 0, 0
	for _, st := range done {
		if st.changed() {
			changed++
		}
		if st.lacking() {
			lacking++
		}
	}
	switch {
	case check && lacking > 0:
		c.UI.Output(fmt.Sprintf("\n%d of %d steps missing or different: 'steward operator setup' (without -check) makes them so.", lacking, len(done)))
		return setupMissing
	case check:
		c.UI.Output("\nEverything steward operator setup makes is in place.")
	case changed == 0:
		c.UI.Output("\nNothing changed: everything was already set up.")
	default:
		c.UI.Output(fmt.Sprintf("\nChanged %d of %d steps.", changed, len(done)))
	}
	c.UI.Output("\n" + setupLeft(job))
	return setupOK
}

// validatePolicy parses the policy file as the controller will, and prints
// every diagnostic with its file:line:col.
func (c *OperatorSetupCommand) validatePolicy(path string) (string, bool) {
	if strings.HasSuffix(path, ".json") {
		// The job renders the variable to local/policy.hcl.
		c.UI.Error(fmt.Sprintf("%s: the controller job reads its policy as HCL: give an .hcl file", path))
		return "", false
	}
	src, err := os.ReadFile(path)
	if err != nil {
		c.UI.Error(fmt.Sprintf("read -policy: %v", err))
		return "", false
	}
	p := policy.NewParser()
	pol, diags := p.Parse(path)
	if len(diags) > 0 {
		var buf bytes.Buffer
		if err := p.WriteDiagnostics(&buf, diags); err != nil {
			c.UI.Error(err.Error())
		}
		c.UI.Error(strings.TrimRight(buf.String(), "\n"))
	}
	if pol == nil || diags.HasErrors() {
		c.UI.Error(fmt.Sprintf("%s: not valid; nothing was changed", path))
		return "", false
	}
	return string(src), true
}

// report prints each step: its state, what, and how.
func (c *OperatorSetupCommand) report(steps []setupStep) {
	for _, st := range steps {
		line := fmt.Sprintf("%-9s %s", st.State, st.What)
		if st.Detail != "" {
			line += ": " + st.Detail
		}
		if st.lacking() {
			c.UI.Warn(line)
			continue
		}
		c.UI.Output(line)
	}
}

// result is the step's state: what apply did, or what -check found.
func (s *setup) result(what string, exists, same bool, detail string) setupStep {
	st := setupStep{What: what, Detail: detail}
	switch {
	case s.apply && !exists:
		st.State = "created"
	case s.apply && !same:
		st.State = "updated"
	case s.apply:
		st.State = "unchanged"
	case !exists:
		st.State = "missing"
	case !same:
		st.State = "differs"
	default:
		st.State = "ok"
	}
	return st
}

func (s *setup) parseJob() (*api.Job, error) {
	job, err := s.client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: s.jobspec, Variables: s.vars, Canonicalize: true})
	if err != nil {
		return nil, fmt.Errorf("parse the controller jobspec with Nomad: %w", err)
	}
	if job.Namespace == nil || *job.Namespace != s.ns {
		return nil, fmt.Errorf("the controller jobspec must run the job in namespace %q, Steward's", s.ns)
	}
	return job, nil
}

func (s *setup) namespace(*api.Job) (setupStep, error) {
	what := "namespace " + s.ns
	_, _, err := s.client.Namespaces().Info(s.ns, nil)
	switch {
	case err == nil:
		return s.result(what, true, true, ""), nil
	case !isNotFound(err):
		return setupStep{}, fmt.Errorf("read namespace %s: %w", s.ns, err)
	case s.apply:
		if _, err := s.client.Namespaces().Register(&api.Namespace{Name: s.ns, Description: setupNSDesc}, nil); err != nil {
			return setupStep{}, fmt.Errorf("create namespace %s: %w", s.ns, err)
		}
	}
	return s.result(what, false, false, "where Steward keeps its state; give tenants no rule in it"), nil
}

func (s *setup) nodePool(job *api.Job) (setupStep, error) {
	pool := ""
	if job.NodePool != nil {
		pool = *job.NodePool
	}
	what := "node pool " + pool
	if pool == "" || pool == api.NodePoolDefault || pool == api.NodePoolAll {
		return setupStep{What: "node pool", State: "skipped",
			Detail: fmt.Sprintf("the controller runs in pool %q; give it a pool of its own with -var node_pool=NAME (docs/install.md, The controller, step 2)", pool)}, nil
	}
	_, _, err := s.client.NodePools().Info(pool, nil)
	switch {
	case err == nil:
		return s.result(what, true, true, ""), nil
	case !isNotFound(err):
		return setupStep{}, fmt.Errorf("read node pool %s: %w", pool, err)
	case s.apply:
		if _, err := s.client.NodePools().Register(&api.NodePool{Name: pool, Description: setupPoolDesc}, nil); err != nil {
			return setupStep{}, fmt.Errorf("create node pool %s: %w", pool, err)
		}
	}
	return s.result(what, false, false, fmt.Sprintf("set node_pool = %q in the controller nodes' client config", pool)), nil
}

func (s *setup) aclPolicy(*api.Job) (setupStep, error) {
	what := fmt.Sprintf("ACL policy %s (bound to job %s in namespace %s)", setupACLPolicy, setupJobID, s.ns)
	want := &api.ACLPolicy{Name: setupACLPolicy, Description: setupACLPolicyDs, Rules: acl.Controller,
		JobACL: &api.JobACL{Namespace: s.ns, JobID: setupJobID}}
	have, _, err := s.client.ACLPolicies().Info(setupACLPolicy, nil)
	exists := err == nil && have != nil
	switch {
	case err != nil && strings.Contains(err.Error(), "ACL support disabled"):
		return setupStep{What: "ACL policy " + setupACLPolicy, State: "skipped", Detail: "this cluster runs without ACLs"}, nil
	case err != nil && !isNotFound(err):
		return setupStep{}, fmt.Errorf("read ACL policy %s: %w", setupACLPolicy, err)
	}
	same := exists && have.Rules == want.Rules && have.JobACL != nil &&
		have.JobACL.Namespace == s.ns && have.JobACL.JobID == setupJobID && have.JobACL.Group == "" && have.JobACL.Task == ""
	if s.apply && !same {
		if _, err := s.client.ACLPolicies().Upsert(want, nil); err != nil {
			return setupStep{}, fmt.Errorf("apply ACL policy %s: %w", setupACLPolicy, err)
		}
	}
	detail := ""
	if !same {
		detail = "the controller's rights, through its job's workload identity: no token to hand out"
	}
	return s.result(what, exists, same, detail), nil
}

func (s *setup) policyVariable(*api.Job) (setupStep, error) {
	what := fmt.Sprintf("policy variable %s in namespace %s", setupPolicyVar, s.ns)
	v, _, err := s.client.Variables().Read(setupPolicyVar, &api.QueryOptions{Namespace: s.ns})
	exists := err == nil && v != nil
	if err != nil && !isNotFound(err) {
		return setupStep{}, fmt.Errorf("read %s: %w", what, err)
	}
	if s.policyText == "" {
		if !exists || v.Items[setupPolicyItem] == "" {
			if s.apply {
				return setupStep{}, fmt.Errorf("%s does not exist: give -policy FILE", what)
			}
			return s.result(what, false, false, "give -policy FILE"), nil
		}
		// Kept as it is, but a policy the controller would refuse is an
		// error here too, with its place in the variable.
		p := policy.NewParser()
		name := setupPolicyVar + "@" + s.ns
		if _, diags := p.ParseSources(policy.Source{Name: name, Bytes: []byte(v.Items[setupPolicyItem])}); diags.HasErrors() {
			var buf bytes.Buffer
			_ = p.WriteDiagnostics(&buf, diags)
			return setupStep{}, fmt.Errorf("the policy in %s is not valid:\n%s", what, strings.TrimRight(buf.String(), "\n"))
		}
		return s.result(what, true, true, "kept (no -policy given)"), nil
	}
	same := exists && v.Items[setupPolicyItem] == s.policyText
	if s.apply && !same {
		nv := &api.Variable{Namespace: s.ns, Path: setupPolicyVar, Items: map[string]string{}}
		if exists {
			// Other items an operator keeps there stay; the write is
			// check-and-set against what was read.
			for k, val := range v.Items {
				nv.Items[k] = val
			}
			nv.ModifyIndex = v.ModifyIndex
		}
		nv.Items[setupPolicyItem] = s.policyText
		if _, _, err := s.client.Variables().CheckedUpdate(nv, &api.WriteOptions{Namespace: s.ns}); err != nil {
			return setupStep{}, fmt.Errorf("write %s: %w", what, err)
		}
	}
	return s.result(what, exists, same, "from "+s.policyFile), nil
}

func (s *setup) schedulerConfig(*api.Job) (setupStep, error) {
	what := "Nomad's system-scheduler preemption off"
	resp, _, err := s.client.Operator().SchedulerGetConfiguration(nil)
	if err != nil {
		return setupStep{}, fmt.Errorf("read Nomad's scheduler configuration: %w", err)
	}
	cfg := resp.SchedulerConfig
	if cfg == nil {
		return setupStep{}, fmt.Errorf("read Nomad's scheduler configuration: none returned")
	}
	on := cfg.PreemptionConfig.SystemSchedulerEnabled
	if s.apply && on {
		cfg.PreemptionConfig.SystemSchedulerEnabled = false
		out, _, err := s.client.Operator().SchedulerCASConfiguration(cfg, nil)
		if err != nil {
			return setupStep{}, fmt.Errorf("turn Nomad's system-scheduler preemption off: %w", err)
		}
		if !out.Updated {
			return setupStep{}, fmt.Errorf("turn Nomad's system-scheduler preemption off: the configuration changed meanwhile; run setup again")
		}
	}
	detail := ""
	if on {
		detail = "while on, a tenant's system job evicts GPU work with no checkpoint signal (docs/install.md, step 8)"
	}
	return s.result(what, true, !on, detail), nil
}

func (s *setup) controllerJob(job *api.Job) (setupStep, error) {
	what := fmt.Sprintf("job %s in namespace %s", setupJobID, s.ns)
	_, _, err := s.client.Jobs().Info(setupJobID, &api.QueryOptions{Namespace: s.ns})
	exists := err == nil
	if err != nil && !isNotFound(err) {
		return setupStep{}, fmt.Errorf("read %s: %w", what, err)
	}
	same := false
	if exists {
		// What `nomad job plan` shows: no difference, nothing to register.
		plan, _, err := s.client.Jobs().Plan(job, true, &api.WriteOptions{Namespace: s.ns})
		if err != nil {
			return setupStep{}, fmt.Errorf("plan %s: %w", what, err)
		}
		same = plan.Diff == nil || plan.Diff.Type == "None"
	}
	if s.apply && !same {
		resp, _, err := s.client.Jobs().RegisterOpts(job, &api.RegisterOptions{Submission: &api.JobSubmission{
			Source: s.jobspec, Format: "hcl2", Variables: s.vars}}, &api.WriteOptions{Namespace: s.ns})
		if err != nil {
			return setupStep{}, fmt.Errorf("register %s: %w", what, err)
		}
		return s.result(what, exists, same, "evaluation "+resp.EvalID), nil
	}
	return s.result(what, exists, same, ""), nil
}

// setupLeft is what setup cannot do: the steps on the nodes, monitoring
// and teams.
func setupLeft(job *api.Job) string {
	driver, user := "docker", "steward"
	if tg := job.TaskGroups; len(tg) > 0 && len(tg[0].Tasks) > 0 {
		driver, user = tg[0].Tasks[0].Driver, tg[0].Tasks[0].User
	}
	left := []string{
		fmt.Sprintf("the controller's host user %q on its nodes (docs/install.md, The controller, step 3)", user),
	}
	if driver == "docker" {
		left = append(left, "the controller image on its nodes: make image; docker save steward/controller:local | ssh NODE docker load (step 6)")
	}
	left = append(left,
		"the device plugin steward-gpu (and the driver steward-exec where jobs use it) on the GPU clients (docs/install.md, checklist 1-2)",
		"each team's ACL policy, from acl/steward-user.policy.hcl (docs/install.md, Teams)",
		"the dashboard: import monitoring/grafana/steward.json into Grafana (docs/operations.md, Dashboards and alerts)",
		"the alerts: load monitoring/prometheus/steward-alerts.yml into Prometheus; each links its runbook (docs/operations.md)",
		"see the controller come up: nomad job status -namespace steward "+setupJobID+", then steward status",
		"a controller run outside Nomad needs a token of its own, which this command never makes or prints: "+
			"acl/steward-controller.policy.hcl says how to mint one (keep its secret in a file of mode 0600, for -token-file)",
	)
	var b strings.Builder
	b.WriteString("What is left (by hand):")
	for _, l := range left {
		b.WriteString("\n  - " + l)
	}
	return b.String()
}
