package command

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/posener/complete"
	"github.com/ryanuber/columnize"

	"github.com/gpu-steward/steward/controller"
)

func init() {
	register("queue", func(ui cli.Ui) cli.Command { return &QueueCommand{Meta: Meta{UI: ui}} })
}

// QueueCommand is "steward queue": the jobs waiting for GPUs, in the
// order the engine would start them.
type QueueCommand struct{ Meta }

func (c *QueueCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward queue [options]

  Lists the jobs waiting for GPUs in the order Steward would start them,
  as the leading controller published them after its latest round: each
  job's tenant, tier and priority, its position in the cluster and (in
  brackets) within its tenant, the GPUs it waits for, since when, the
  forecast start (P50 / P90) and the reason it waits.

  With -namespace (or NOMAD_NAMESPACE) it lists that namespace's jobs only,
  from the view a tenant's token may read; positions stay the cluster's,
  and a line under the table says how many jobs wait in the cluster (the
  "of N" of each waiting job's record, which counts jobs, not groups).
  Without, the whole cluster's queue (an operator's token).

  'steward status JOB' shows one job's entry in full: the blocking rule,
  what would unblock it, and what the forecast rests on.

Queue Options:

  -state-namespace <ns>
    Steward's own namespace, where the cluster's view is (default "steward").

` + outputOptionsUsage + "\n\n" + generalOptionsUsage(flagNamespace))
}

func (c *QueueCommand) Synopsis() string {
	return "List the jobs waiting for GPUs, with position, reason and forecast"
}

func (c *QueueCommand) AutocompleteFlags() complete.Flags { return c.viewAutocomplete() }

func (c *QueueCommand) AutocompleteArgs() complete.Predictor { return complete.PredictNothing }

func (c *QueueCommand) Run(args []string) int {
	v, ok := c.readViewCommand("queue", args, 0, "queue takes no arguments", c.Help())
	if !ok {
		return 1
	}
	queue := v.status.Queue
	if queue == nil {
		queue = []controller.QueueEntry{}
	}
	if v.out.formatted() {
		return c.print(v.out.format(queue))
	}
	c.UI.Output(FormatQueue(queue, time.Now(), v.out.verbose))
	return 0
}

// FormatQueue renders the queue as `nomad queue status` renders its
// table; times relative to now unless verbose.
func FormatQueue(queue []controller.QueueEntry, now time.Time, verbose bool) string {
	if len(queue) == 0 {
		return "No jobs waiting for GPUs"
	}
	rows := []string{"Job|Tenant|Tier|Priority|Position (Tenant)|GPUs|Waiting Since|Forecast P50 / P90|Reason"}
	for _, q := range queue {
		fc := "-"
		if !q.ForecastP50.IsZero() {
			fc = when(q.ForecastP50, now, verbose) + " / " + when(q.ForecastP90, now, verbose)
		}
		moved := ""
		if q.Moved != "" {
			// Its owner moved it (steward queue move); -json and
			// steward status say where.
			moved = " moved"
		}
		rows = append(rows, fmt.Sprintf("%s|%s|%s|%d|%d (%d)%s|%d|%s|%s|%s", q.Job, q.Tenant, q.Tier, q.Priority,
			q.Position, q.TenantPosition, moved, q.GPUs, when(q.WaitingSince, now, verbose), fc, orDash(q.Reason)))
	}
	out := columnize.SimpleFormat(rows)
	if n := queue[0].QueueLength; n > len(queue) {
		// A namespace's view (or a status cut to fit): positions, and
		// each record's "of N", count every job waiting in the cluster.
		out += fmt.Sprintf("\n\n%d of the %s waiting in the cluster listed; positions count them all.", len(queue), pluralJobs(n))
	}
	return out
}

func pluralJobs(n int) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}
