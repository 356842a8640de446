package command

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"
	"github.com/ryanuber/columnize"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/policy"
)

func init() {
	register("plan", func(ui cli.Ui) cli.Command { return &PlanCommand{UI: ui} })
}

// PlanCommand is "steward plan": what the controller would do now.
type PlanCommand struct{ UI cli.Ui }

func (c *PlanCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward plan -policy FILE|DIR [-address ADDR]

  Reads the cluster and the controller's saved state and prints what the
  controller would do now, each action with its reason, then the work that
  keeps waiting and why, and each tenant's GPUs. Changes nothing.

  Connects like the nomad CLI (NOMAD_ADDR, NOMAD_TOKEN, ...).
`)
}

func (c *PlanCommand) Synopsis() string {
	return "Print what the controller would do now, with reasons"
}

func (c *PlanCommand) Run(args []string) int {
	var policies stringList
	var address string
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&policies, "policy", "")
	addressFlag(fs, &address)
	if err := fs.Parse(args); err != nil {
		c.UI.Error(fmt.Sprintf("%v\n\n%s", err, c.Help()))
		return 1
	}
	client, err := nomadClient(address)
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	cfg := controller.DefaultConfig()
	cfg.PolicyFiles, cfg.DryRun, cfg.Listen = policies, true, ""
	ctl, err := controller.New(cfg, client, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	plan, _, err := ctl.PlanOnce(context.Background())
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	if len(plan.Actions) == 0 {
		c.UI.Output("Nothing to do.")
	} else {
		rows := []string{"Action|Job|Group|GPUs|Rule|Reason"}
		for _, a := range plan.Actions {
			gpus := ""
			if a.GPUs > 0 {
				gpus = fmt.Sprint(a.GPUs)
			}
			rows = append(rows, fmt.Sprintf("%s|%s|%s|%s|%s|%s", a.Kind, a.Job, a.Group, gpus, a.Reason.Rule, a.Reason.Message))
		}
		c.UI.Output(columnize.SimpleFormat(rows))
	}
	if len(plan.Waiting) > 0 {
		rows := []string{"Job|Group|GPUs|Held|Reason"}
		for _, w := range plan.Waiting {
			rows = append(rows, fmt.Sprintf("%s|%s|%d|%t|%s", w.Job, w.Group, w.GPUs, w.Held, w.Reason.Message))
		}
		c.UI.Output("\nWaiting")
		c.UI.Output(columnize.SimpleFormat(rows))
	}
	c.UI.Output("\nTenants")
	rows := []string{"Tenant|Reserve|Limit|In Use|Borrowed|Waiting"}
	for _, t := range plan.Tenants {
		rows = append(rows, fmt.Sprintf("%s|%d|%s|%d|%d|%d", t.Tenant, t.Reserve, limitString(t.Limit), t.InUse, t.Borrowed(), t.Waiting))
	}
	c.UI.Output(columnize.SimpleFormat(rows))
	return 0
}

func limitString(l int) string {
	if l == policy.Unlimited || l < 0 {
		return "none"
	}
	return fmt.Sprint(l)
}
