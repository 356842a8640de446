package command

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/posener/complete"

	"github.com/gpu-steward/steward/controller"
)

func init() {
	register("queue move", func(ui cli.Ui) cli.Command { return &QueueMoveCommand{Meta: Meta{UI: ui}} })
}

// QueueMoveCommand is "steward queue move JOB -before OTHER | -top".
type QueueMoveCommand struct{ Meta }

func (c *QueueMoveCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward queue move [options] JOB (-before OTHER | -top)

  Reorders your own waiting jobs: JOB goes just before OTHER, a waiting
  job of the same namespace, or (-top) before every waiting job of its
  namespace. Only the order among your tenant's own waiting jobs of the
  same tier and priority changes: JOB takes the place one of them held,
  and every other tenant's job keeps its place, so fairness between
  tenants is untouched. A higher tier or priority still goes first.

  Like 'steward pause', the request is left for the leading controller in
  the variable steward/requests/JOB of the job's namespace (-namespace,
  else NOMAD_NAMESPACE, else "default"), which the token must be allowed
  to write (acl/steward-user.policy.hcl). The job's record says where it
  moved (steward_queue_move) and 'steward queue' shows its new position
  after the controller's next round. A move lasts as long as the job.

Queue Move Options:

  -before <OTHER>
    The waiting job of the same namespace to move JOB before.

  -top
    Move JOB before every waiting job of its namespace.

` + generalOptionsUsage(flagNamespace))
}

func (c *QueueMoveCommand) Synopsis() string {
	return "Move one of your waiting jobs before another of yours"
}

func (c *QueueMoveCommand) AutocompleteFlags() complete.Flags {
	return c.Meta.AutocompleteFlags(flagNamespace, complete.Flags{
		"-before": predictJobs{meta: &c.Meta}, "-top": complete.PredictNothing,
	})
}

func (c *QueueMoveCommand) AutocompleteArgs() complete.Predictor { return predictJobs{meta: &c.Meta} }

func (c *QueueMoveCommand) Run(args []string) int {
	var before string
	var top bool
	fs := c.FlagSet("queue move", flagNamespace)
	fs.StringVar(&before, "before", "", "")
	fs.BoolVar(&top, "top", false, "")
	if err := c.Parse(fs, args); err != nil {
		c.UI.Error(c.Help())
		return 1
	}
	// Flags may follow JOB too ('steward queue move JOB -top'), as they
	// do in the usage line.
	job := fs.Arg(0)
	if fs.NArg() > 1 {
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			c.UI.Error(c.Help())
			return 1
		}
		if fs.NArg() > 0 {
			job = ""
		}
	}
	if job == "" {
		c.UI.Error("queue move takes one job\n\n" + c.Help())
		return 1
	}
	if (before == "") == !top {
		c.UI.Error("queue move takes either -before OTHER or -top\n\n" + c.Help())
		return 1
	}
	client, ref, err := c.requestTarget(job)
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	if before != "" {
		// OTHER in the same namespace, resolved like JOB (a prefix will
		// do where the token may list jobs).
		other, err := resolveJob(client, ref.Namespace, before, nil)
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		before = other.ID
	}
	req := controller.Request{Action: "move", Before: before, By: requester("steward queue move"), At: time.Now()}
	if err := controller.SubmitRequest(context.Background(), controller.NewNomad(client), ref.Namespace, ref.ID, req); err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	where := "to the top of namespace " + ref.Namespace + "'s waiting jobs"
	if before != "" {
		where = "before " + ref.Namespace + "/" + before
	}
	c.UI.Output(fmt.Sprintf("move of %s/%s %s requested; the controller carries it out (see steward queue)", ref.Namespace, ref.ID, where))
	return 0
}
