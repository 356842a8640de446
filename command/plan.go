package command

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"
	"github.com/posener/complete"
	"github.com/ryanuber/columnize"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

func init() {
	register("plan", func(ui cli.Ui) cli.Command { return &PlanCommand{Meta: Meta{UI: ui}} })
}

// Exit codes of `steward plan`, as `nomad job plan`'s.
const (
	planNothing = 0
	planError   = 1
	planPending = 2
)

// PlanCommand is "steward plan": what the controller would do now.
type PlanCommand struct{ Meta }

func (c *PlanCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward plan -policy FILE|DIR [options]
       steward plan -replay FILE [-policy FILE|DIR] [options]

  Reads the cluster and the controller's saved state and prints what the
  controller would do now, each action with its reason, then the work that
  keeps waiting and why, and each tenant's GPUs. Changes nothing. It needs
  an operator's token: it reads every namespace and Steward's state.

  With -namespace (or NOMAD_NAMESPACE) it shows only that namespace's
  actions and waiting work, and its tenant's GPUs; the plan is still the
  whole cluster's.

  Exit status, as 'nomad job plan': 0 when there is nothing to do, 2 when
  actions are pending, 1 on an error.

Plan Options:

  -policy FILE|DIR
    Policy file or directory (repeatable). Required.

  -snapshot FILE
    Also write what the plan was made from to FILE (JSON: the resolved
    policy less its notify blocks, the engine's view of the cluster and the
    time), to plan it again offline with -replay: to study a decision away
    from the cluster, or attach it to a bug report. It holds job, node and
    tenant names, GPU counts and utilisation; no tokens, task config or
    environment.

  -replay FILE
    Plan a -snapshot file again, offline: no Nomad is read, and the plan is
    the one the snapshot's plan was, byte for byte. With -policy, plans it
    with that policy instead ("what if").

  -explain JOB -versus OTHER
    Why the victim order gives up one job's running work before the
    other's, as the plan begins: the first criterion that tells them apart
    (1 class: idle, backfill, past min_runtime, younger; 2 over or within
    the tenant's reservation; 3 priority; 4 one allocation or a gang;
    5 progress at risk per GPU; 6 the snapshot's order), with each job's
    value of it. JOB is namespace/id (or id with -namespace). With -replay,
    of the snapshot's moment. Exit 0, or 1 when a job is no candidate (not
    running, or only in non-preemptible tiers).

  -json
    Print the plan as JSON.

  -t <template>
    Format and print the plan using a Go template.

` + generalOptionsUsage(flagNamespace))
}

func (c *PlanCommand) Synopsis() string {
	return "Print what the controller would do now, with reasons"
}

func (c *PlanCommand) AutocompleteFlags() complete.Flags {
	return c.Meta.AutocompleteFlags(flagNamespace, complete.Flags{
		"-policy": complete.PredictFiles("*.hcl"), "-json": complete.PredictNothing, "-t": complete.PredictAnything,
		"-snapshot": complete.PredictFiles("*.json"), "-replay": complete.PredictFiles("*.json"),
		"-explain": complete.PredictAnything, "-versus": complete.PredictAnything,
	})
}

func (c *PlanCommand) AutocompleteArgs() complete.Predictor { return complete.PredictNothing }

func (c *PlanCommand) Run(args []string) int {
	var policies stringList
	var out outputFlags
	var snapshotFile, replayFile string
	fs := c.FlagSet("plan", flagNamespace)
	fs.Var(&policies, "policy", "")
	fs.StringVar(&snapshotFile, "snapshot", "", "")
	fs.StringVar(&replayFile, "replay", "", "")
	var explain, versus string
	fs.StringVar(&explain, "explain", "", "")
	fs.StringVar(&versus, "versus", "", "")
	fs.BoolVar(&out.json, "json", false, "")
	fs.StringVar(&out.template, "t", "", "")
	if err := c.Parse(fs, args); err != nil {
		c.UI.Error(fmt.Sprintf("%v\n\n%s", err, c.Help()))
		return planError
	}
	var (
		plan    *engine.Plan
		capture *controller.Capture
		err     error
	)
	if replayFile != "" {
		if snapshotFile != "" {
			c.UI.Error("-replay plans a snapshot offline: it takes no -snapshot\n\n" + c.Help())
			return planError
		}
		plan, capture, err = replay(replayFile, policies)
	} else {
		plan, capture, err = c.planLive(policies, snapshotFile)
	}
	if err != nil {
		c.UI.Error(err.Error())
		return planError
	}
	pol := capture.Policy
	if explain != "" || versus != "" {
		return c.explain(capture, explain, versus, out)
	}
	ns := c.Namespace()
	if ns == "*" {
		ns = ""
	}
	po := planOutput(plan, ns, pol)
	if out.formatted() {
		if code := c.print(out.format(po)); code != 0 {
			return planError
		}
	} else {
		c.UI.Output(FormatPlan(po))
	}
	return planExit(po)
}

// planLive plans the cluster as the controller would now, writing what it
// planned from to snapshotFile when set.
func (c *PlanCommand) planLive(policies []string, snapshotFile string) (*engine.Plan, *controller.Capture, error) {
	if len(policies) == 0 {
		return nil, nil, fmt.Errorf("-policy is required (or -replay FILE)\n\n%s", c.Help())
	}
	client, err := c.Client()
	if err != nil {
		return nil, nil, err
	}
	cfg := controller.DefaultConfig()
	cfg.PolicyFiles, cfg.DryRun, cfg.Listen = policies, true, ""
	ctl, err := controller.New(cfg, client, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	if err != nil {
		return nil, nil, err
	}
	capture, plan, err := ctl.CaptureOnce(context.Background())
	if err != nil {
		return nil, nil, err
	}
	if snapshotFile != "" {
		if err := writeCapture(snapshotFile, capture); err != nil {
			return nil, nil, err
		}
	}
	return plan, capture, nil
}

// writeCapture writes a snapshot file, readable by its owner alone: it
// names every tenant's jobs.
func writeCapture(path string, capture *controller.Capture) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := capture.Write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write snapshot %s: %w", path, err)
	}
	return nil
}

// replay plans a snapshot file again, with policies in place of its own
// when given.
func replay(path string, policies []string) (*engine.Plan, *controller.Capture, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	capture, err := controller.ReadCapture(f)
	if err != nil {
		return nil, nil, fmt.Errorf("replay %s: %w", path, err)
	}
	if len(policies) > 0 {
		if capture.Policy, err = controller.LoadPolicy(policies); err != nil {
			return nil, nil, err
		}
	}
	return capture.Replay(), capture, nil
}

// explain answers -explain JOB -versus OTHER: which of the two jobs' work
// the victim order gives up first, and by which criterion, as the plan of
// the capture begins.
func (c *PlanCommand) explain(capture *controller.Capture, x, y string, out outputFlags) int {
	if x == "" || y == "" {
		c.UI.Error("-explain JOB takes -versus OTHER: why one job's work is given up before the other's\n\n" + c.Help())
		return planError
	}
	ref := func(s string) engine.JobRef {
		ns, id, ok := strings.Cut(s, "/")
		if !ok {
			ns, id = c.Namespace(), s
			if ns == "" || ns == "*" {
				ns = "default"
			}
		}
		return engine.JobRef{Namespace: ns, ID: id}
	}
	cmp, err := engine.New(capture.Policy).CompareVictims(capture.Snapshot, capture.At, ref(x), ref(y))
	if err != nil {
		c.UI.Error(err.Error())
		return planError
	}
	if out.formatted() {
		return c.print(out.format(cmp))
	}
	c.UI.Output(cmp.String())
	return planNothing
}

// planExit is the exit status for a plan: 2 when actions are pending.
func planExit(p *PlanOutput) int {
	if len(p.Actions) > 0 {
		return planPending
	}
	return planNothing
}

// PlanOutput is what `steward plan` prints (its -json form).
type PlanOutput struct {
	Actions []PlanAction  `json:"actions"`
	Waiting []PlanWaiting `json:"waiting"`
	Tenants []PlanTenant  `json:"tenants"`
}

// PlanAction is one action the controller would take now.
type PlanAction struct {
	Kind   string `json:"kind"`
	Job    string `json:"job"` // namespace/id
	Group  string `json:"group,omitempty"`
	GPUs   int    `json:"gpus,omitempty"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	// For is the work GPUs are freed for (preempt, idle-stop).
	For string `json:"for,omitempty"`
}

// PlanWaiting is work that keeps waiting after the plan, with why.
type PlanWaiting struct {
	Job    string `json:"job"`
	Group  string `json:"group"`
	GPUs   int    `json:"gpus"`
	Held   bool   `json:"held"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// PlanTenant is a tenant's GPUs after the plan.
type PlanTenant struct {
	Tenant   string `json:"tenant"`
	Reserve  int    `json:"reserve"`
	Limit    int    `json:"limit"` // -1: none
	InUse    int    `json:"in_use"`
	Borrowed int    `json:"borrowed"`
	Waiting  int    `json:"waiting"`
}

// planOutput turns the engine's plan into what the command prints,
// keeping only namespace ns's jobs and its tenant when ns is set (pol
// says which tenant that is).
func planOutput(plan *engine.Plan, ns string, pol *policy.Policy) *PlanOutput {
	po := &PlanOutput{Actions: []PlanAction{}, Waiting: []PlanWaiting{}, Tenants: []PlanTenant{}}
	keep := func(j engine.JobRef) bool { return ns == "" || j.Namespace == ns }
	for _, a := range plan.Actions {
		if !keep(a.Job) {
			continue
		}
		pa := PlanAction{Kind: string(a.Kind), Job: a.Job.String(), Group: a.Group, GPUs: a.GPUs,
			Rule: string(a.Reason.Rule), Reason: a.Reason.Message}
		if a.For != nil {
			pa.For = a.For.String()
		}
		po.Actions = append(po.Actions, pa)
	}
	for _, w := range plan.Waiting {
		if !keep(w.Job) {
			continue
		}
		po.Waiting = append(po.Waiting, PlanWaiting{Job: w.Job.String(), Group: w.Group, GPUs: w.GPUs, Held: w.Held,
			Rule: string(w.Reason.Rule), Reason: w.Reason.Message})
	}
	tenant := ""
	if ns != "" && pol != nil {
		tenant = pol.TenantOf(ns).Name
	}
	for _, t := range plan.Tenants {
		if tenant != "" && t.Tenant != tenant {
			continue
		}
		limit := t.Limit
		if limit == policy.Unlimited {
			limit = -1
		}
		po.Tenants = append(po.Tenants, PlanTenant{Tenant: t.Tenant, Reserve: t.Reserve, Limit: limit, InUse: t.InUse,
			Borrowed: t.Borrowed(), Waiting: t.Waiting})
	}
	return po
}

// FormatPlan renders a plan as the nomad CLI renders its tables.
func FormatPlan(p *PlanOutput) string {
	var b strings.Builder
	if len(p.Actions) == 0 {
		b.WriteString("Nothing to do.\n")
	} else {
		rows := []string{"Action|Job|Group|GPUs|Rule|Reason"}
		for _, a := range p.Actions {
			gpus := ""
			if a.GPUs > 0 {
				gpus = fmt.Sprint(a.GPUs)
			}
			rows = append(rows, fmt.Sprintf("%s|%s|%s|%s|%s|%s", a.Kind, a.Job, a.Group, gpus, a.Rule, a.Reason))
		}
		b.WriteString(columnize.SimpleFormat(rows) + "\n")
	}
	if len(p.Waiting) > 0 {
		rows := []string{"Job|Group|GPUs|Held|Reason"}
		for _, w := range p.Waiting {
			rows = append(rows, fmt.Sprintf("%s|%s|%d|%t|%s", w.Job, w.Group, w.GPUs, w.Held, w.Reason))
		}
		b.WriteString("\nWaiting\n" + columnize.SimpleFormat(rows) + "\n")
	}
	b.WriteString("\nTenants\n")
	rows := []string{"Tenant|Reserve|Limit|In Use|Borrowed|Waiting"}
	for _, t := range p.Tenants {
		rows = append(rows, fmt.Sprintf("%s|%d|%s|%d|%d|%d", t.Tenant, t.Reserve, limitString(t.Limit), t.InUse, t.Borrowed, t.Waiting))
	}
	b.WriteString(columnize.SimpleFormat(rows))
	return b.String()
}

func limitString(l int) string {
	if l == policy.Unlimited || l < 0 {
		return "none"
	}
	return fmt.Sprint(l)
}
