package command

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"
	"github.com/posener/complete"

	"github.com/gpu-steward/steward/controller"
)

func init() {
	register("snooze", func(ui cli.Ui) cli.Command { return &SnoozeCommand{Meta: Meta{UI: ui}} })
}

// SnoozeCommand is "steward snooze JOB DURATION": the job's idle rule
// leaves it alone for a while (the "keep-my-notebook" action of the
// example jobspecs runs it).
type SnoozeCommand struct {
	Meta
}

func (c *SnoozeCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward snooze [options] [-wait 10s] JOB DURATION

  Snoozes the idle rule that covers a job: however idle its GPUs, the rule
  does not reclaim them until DURATION ("2h", "90m") has passed, at most
  the rule's max_snooze. "0s" ends a snooze. Like a pause, the request is
  left for the leading controller in the variable steward/requests/JOB of
  the job's namespace; the job's record (nomad/jobs/JOB, steward_snooze)
  then says until when.

  -wait waits up to that long for the record to say so, and prints it
  (0: do not wait). JOB may be a prefix of the job's ID, as for
  'nomad job status'; a token that may not list jobs must name it in full.

` + generalOptionsUsage(flagNamespace))
}

func (c *SnoozeCommand) AutocompleteFlags() complete.Flags {
	return c.Meta.AutocompleteFlags(flagNamespace, complete.Flags{"-wait": complete.PredictAnything})
}

func (c *SnoozeCommand) AutocompleteArgs() complete.Predictor { return predictJobs{meta: &c.Meta} }

func (c *SnoozeCommand) Synopsis() string {
	return "Keep a job's idle rule from reclaiming its GPUs for a while"
}

func (c *SnoozeCommand) Run(args []string) int {
	fs := c.FlagSet("snooze", flagNamespace)
	wait := fs.Duration("wait", 10*time.Second, "")
	if err := c.Parse(fs, args); err != nil || fs.NArg() != 2 {
		c.UI.Error(c.Help())
		return 1
	}
	d, err := time.ParseDuration(fs.Arg(1))
	if err != nil || d < 0 {
		c.UI.Error(fmt.Sprintf("snooze: %q is no duration such as \"2h\" or \"90m\"", fs.Arg(1)))
		return 1
	}
	client, ref, err := c.requestTarget(fs.Arg(0))
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	ns, job := ref.Namespace, ref.ID
	before := snoozeRecord(client, ns, job)
	by := requester("steward snooze")
	req := controller.Request{Action: "snooze", Duration: d, By: by, At: time.Now()}
	if err := controller.SubmitRequest(context.Background(), controller.NewNomad(client), ns, job, req); err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("snooze of %s/%s for %s requested; the controller carries it out (see its record, nomad/jobs/%s)", ns, job, fs.Arg(1), job))
	for end := time.Now().Add(*wait); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if now := snoozeRecord(client, ns, job); now != before {
			if now == "" {
				now = "no snooze in force: the idle rule applies"
			}
			c.UI.Output(fmt.Sprintf("%s/%s: %s", ns, job, now))
			return 0
		}
	}
	return 0
}

// snoozeRecord is what the job's record says of a snooze ("" when
// nothing, or the record cannot be read).
func snoozeRecord(client *api.Client, ns, job string) string {
	v, _, err := client.Variables().Read("nomad/jobs/"+job, &api.QueryOptions{Namespace: ns})
	if err != nil || v == nil {
		return ""
	}
	return v.Items["steward_snooze"]
}
