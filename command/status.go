package command

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/ryanuber/columnize"

	"github.com/gpu-steward/steward/controller"
)

func init() {
	register("status", func(ui cli.Ui) cli.Command { return &StatusCommand{UI: ui} })
}

// StatusCommand is "steward status".
type StatusCommand struct{ UI cli.Ui }

func (c *StatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward status [-address ADDR] [-state-namespace NS]

  Prints what the leading controller published after its latest round:
  tenants (reserve, limit, in use, borrowed, pending), held jobs with their
  reasons, idle GPUs, and recent decisions.

  Connects like the nomad CLI (NOMAD_ADDR, NOMAD_TOKEN, ...).
`)
}

func (c *StatusCommand) Synopsis() string {
	return "Show tenants, held jobs, idle GPUs and recent decisions"
}

func (c *StatusCommand) Run(args []string) int {
	var address string
	ns := controller.DefaultConfig().StateNamespace
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&ns, "state-namespace", ns, "")
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
	s, err := controller.ReadStatus(context.Background(), controller.NewNomad(client), ns)
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	c.UI.Output(FormatStatus(s, time.Now()))
	return 0
}

// FormatStatus renders a status as the nomad CLI renders its tables.
func FormatStatus(s *controller.Status, now time.Time) string {
	var b strings.Builder
	mode := ""
	if s.DryRun {
		mode = " (dry run)"
	}
	kv := columnize.DefaultConfig()
	kv.Glue = " = "
	b.WriteString(columnize.Format([]string{
		"Leader|" + s.Leader + mode,
		"Updated|" + now.Sub(s.Updated).Round(time.Second).String() + " ago",
		"Policy|" + s.Policy,
		fmt.Sprintf("Idle GPUs|%d", s.IdleGPUs),
	}, kv) + "\n")

	b.WriteString("\nTenants\n")
	rows := []string{"Tenant|Reserve|Limit|In Use|Borrowed|Pending|Note"}
	for _, t := range s.Tenants {
		note := ""
		if t.Limit >= 0 && t.InUse > t.Limit {
			// Nomad placed work before Steward could hold it, or the
			// limit was lowered: Steward gives the excess back.
			note = fmt.Sprintf("OVER LIMIT by %d", t.InUse-t.Limit)
			if t.Note != "" {
				note += ": " + t.Note
			}
		}
		rows = append(rows, fmt.Sprintf("%s|%d|%s|%d|%d|%d|%s", t.Tenant, t.Reserve, limitString(t.Limit), t.InUse, t.Borrowed, t.Pending, note))
	}
	b.WriteString(columnize.SimpleFormat(rows) + "\n")

	b.WriteString("\nHeld Jobs\n")
	if len(s.Held) == 0 {
		b.WriteString("No held jobs\n")
	} else {
		rows = []string{"Job|Group|Allocs|GPUs|State|Since|Reason"}
		for _, h := range s.Held {
			rows = append(rows, fmt.Sprintf("%s|%s|%d|%d|%s|%s|%s", h.Job, h.Group, h.Count, h.GPUs, h.State,
				h.Since.Local().Format(time.DateTime), h.Reason))
		}
		b.WriteString(columnize.SimpleFormat(rows) + "\n")
	}
	if s.HeldOmitted > 0 {
		fmt.Fprintf(&b, "... and %d more held groups, held more recently (steward job check <job> for one)\n", s.HeldOmitted)
	}

	b.WriteString("\nIdle Allocations\n")
	if len(s.Idle) == 0 {
		b.WriteString("No idle allocations\n")
	} else {
		rows = []string{"Job|Alloc ID|GPUs|Idle|Util"}
		for _, i := range s.Idle {
			rows = append(rows, fmt.Sprintf("%s|%s|%d|%dm|%.0f%%", i.Job, shortID(i.Alloc), i.GPUs, i.Minutes, i.Util))
		}
		b.WriteString(columnize.SimpleFormat(rows) + "\n")
	}
	if s.IdleOmitted > 0 {
		fmt.Fprintf(&b, "... and %d more idle allocations, idle for less time\n", s.IdleOmitted)
	}

	b.WriteString("\nRecent Decisions\n")
	if len(s.Decisions) == 0 {
		b.WriteString("No decisions yet\n")
	} else {
		rows = []string{"Time|Action|Job|GPUs|Reason"}
		for i := len(s.Decisions) - 1; i >= 0; i-- {
			d := s.Decisions[i]
			reason := d.Reason
			if d.Error != "" {
				reason += " (failed: " + d.Error + ")"
			}
			rows = append(rows, fmt.Sprintf("%s|%s|%s|%s|%s", d.At.Local().Format(time.TimeOnly), d.Kind, d.Job, gpuCount(d), reason))
		}
		b.WriteString(columnize.SimpleFormat(rows) + "\n")
	}

	if len(s.Warnings) > 0 {
		b.WriteString("\nJob Warnings\n")
		rows = []string{"Job|Problem"}
		for _, w := range s.Warnings {
			rows = append(rows, w.Job+"|"+w.Problem)
		}
		b.WriteString(columnize.SimpleFormat(rows) + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// gpuCount is a decision's GPUs column: "-" for decisions about a whole
// job's priority, which move no GPUs.
func gpuCount(d controller.Decision) string {
	switch d.Kind {
	case "set-priority", "promote":
		return "-"
	}
	return fmt.Sprint(d.GPUs)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
