package command

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"
	"github.com/posener/complete"
	"github.com/ryanuber/columnize"

	"github.com/gpu-steward/steward/controller"
)

func init() {
	register("status", func(ui cli.Ui) cli.Command { return &StatusCommand{Meta: Meta{UI: ui}} })
}

// StatusCommand is "steward status [JOB]".
type StatusCommand struct{ Meta }

func (c *StatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward status [options] [JOB]

  Without a job: what the leading controller published after its latest
  round: tenants (reserve, limit, in use, borrowed, pending), held jobs with
  their reasons, idle GPUs, and recent decisions.

  With -namespace (or NOMAD_NAMESPACE) it reads that namespace's view,
  which a tenant's token may read: only that namespace's jobs and its
  tenant's figures. Without, it reads the whole cluster's view in Steward's
  namespace, which only operators may read.

  With a job (an ID or a prefix of one, as 'nomad job status' takes): the
  job's record (nomad/jobs/<job>: state, reason, tier...) and, while it
  waits for GPUs, its place in the queue: position in the cluster and
  within its tenant, the rule that blocks it with the numbers, what would
  unblock it, and the forecast start (P50/P90). Without -namespace the job
  is looked for in every namespace.

Status Options:

  -state-namespace <ns>
    Steward's own namespace, where the cluster's view is (default "steward").

` + outputOptionsUsage + "\n\n" + generalOptionsUsage(flagNamespace))
}

func (c *StatusCommand) Synopsis() string {
	return "Show tenants, held jobs, idle GPUs and recent decisions, or one job's"
}

func (c *StatusCommand) AutocompleteFlags() complete.Flags { return c.viewAutocomplete() }

func (c *StatusCommand) AutocompleteArgs() complete.Predictor { return predictJobs{meta: &c.Meta} }

func (c *StatusCommand) Run(args []string) int {
	v, ok := c.readViewCommand("status", args, 1, "want at most one job", c.Help())
	if !ok {
		return 1
	}
	fs, out, client, s := v.fs, v.out, v.client, v.status
	now := time.Now()
	if fs.NArg() == 0 {
		if out.formatted() {
			return c.print(out.format(s))
		}
		c.UI.Output(FormatStatus(s, now, out.verbose))
		return 0
	}
	ns := c.Namespace()
	if ns == "" {
		ns = "*"
	}
	job, err := resolveJob(client, ns, fs.Arg(0), viewJobs(s))
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	js := jobStatus(s, job)
	js.Record, js.RecordError = readRecord(client, job)
	if out.formatted() {
		return c.print(out.format(js))
	}
	c.UI.Output(FormatJobStatus(js, now, out.verbose))
	return 0
}

// print writes formatted output, or its error.
func (m *Meta) print(text string, err error) int {
	if err != nil {
		m.UI.Error(err.Error())
		return 1
	}
	m.UI.Output(text)
	return 0
}

// readView reads the status a namespace may see: with a namespace, the
// view the leader publishes in it (steward/status there: that namespace's
// jobs only); without one (or "*"), the cluster's view in stateNS, which a
// tenant's token may not read.
func readView(client *api.Client, ns, stateNS string) (*controller.Status, error) {
	n := controller.NewNomad(client)
	if ns != "" && ns != "*" {
		s, err := controller.ReadStatus(context.Background(), n, ns)
		if err != nil && !isForbidden(err) && strings.Contains(err.Error(), "no status at") {
			return nil, fmt.Errorf("no status in namespace %s: the leading controller publishes one (%s@%s) once the namespace has work, within seconds of its next round; is steward controller running?",
				ns, controller.StatusPath, ns)
		}
		if err != nil {
			return nil, fmt.Errorf("read the status of namespace %s: %w", ns, err)
		}
		return s, nil
	}
	s, err := controller.ReadStatus(context.Background(), n, stateNS)
	if isForbidden(err) {
		return nil, fmt.Errorf("read the cluster's status (%s@%s): %w\nA team's token may read only its namespace's view: give -namespace NS (or set NOMAD_NAMESPACE)",
			controller.StatusPath, stateNS, err)
	}
	return s, err
}

// FormatStatus renders a status as the nomad CLI renders its tables;
// times relative to now unless verbose.
func FormatStatus(s *controller.Status, now time.Time, verbose bool) string {
	var b strings.Builder
	mode := ""
	if s.DryRun {
		mode = " (dry run)"
	}
	kv := columnize.DefaultConfig()
	kv.Glue = " = "
	b.WriteString(columnize.Format([]string{
		"Leader|" + s.Leader + mode,
		"Updated|" + when(s.Updated, now, verbose),
		"Policy|" + s.Policy,
		fmt.Sprintf("Idle GPUs|%d", s.IdleGPUs),
	}, kv) + "\n")

	b.WriteString("\nTenants\n")
	fair := false
	for _, t := range s.Tenants {
		fair = fair || t.FairShare > 0
	}
	rows := []string{"Tenant|Reserve|Limit|In Use|Borrowed|Pending|Note"}
	if fair {
		// Fair share over time: decayed borrowed GPU-hours, the tenant's
		// share of them, and its fair share.
		rows[0] = "Tenant|Reserve|Limit|In Use|Borrowed|Pending|Used (decayed GPU-h)|Used Share|Fair Share|Note"
	}
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
		if fair {
			rows = append(rows, fmt.Sprintf("%s|%d|%s|%d|%d|%d|%.1f|%.0f%%|%.0f%%|%s", t.Tenant, t.Reserve, limitString(t.Limit), t.InUse,
				t.Borrowed, t.Pending, t.UsageGPUHours, 100*t.UsedShare, 100*t.FairShare, note))
			continue
		}
		rows = append(rows, fmt.Sprintf("%s|%d|%s|%d|%d|%d|%s", t.Tenant, t.Reserve, limitString(t.Limit), t.InUse, t.Borrowed, t.Pending, note))
	}
	b.WriteString(columnize.SimpleFormat(rows) + "\n")
	formatDepartments(&b, s.Departments)

	b.WriteString("\nHeld Jobs\n")
	if len(s.Held) == 0 {
		b.WriteString("No held jobs\n")
	} else {
		b.WriteString(formatHeld(s.Held, now, verbose) + "\n")
	}
	if s.HeldOmitted > 0 {
		fmt.Fprintf(&b, "... and %d more held groups, held more recently (steward status <job> for one)\n", s.HeldOmitted)
	}

	b.WriteString("\nIdle Allocations\n")
	if len(s.Idle) == 0 {
		b.WriteString("No idle allocations\n")
	} else {
		b.WriteString(formatIdle(s.Idle) + "\n")
	}
	if s.IdleOmitted > 0 {
		fmt.Fprintf(&b, "... and %d more idle allocations, idle for less time\n", s.IdleOmitted)
	}

	b.WriteString("\nRecent Decisions\n")
	if len(s.Decisions) == 0 {
		b.WriteString("No decisions yet\n")
	} else {
		b.WriteString(formatDecisions(s.Decisions, now, verbose) + "\n")
	}

	if len(s.Warnings) > 0 {
		b.WriteString("\nJob Warnings\n")
		rows = []string{"Job|Problem"}
		for _, w := range s.Warnings {
			rows = append(rows, w.Job+"|"+w.Problem)
		}
		b.WriteString(columnize.SimpleFormat(rows) + "\n")
	}
	if s.Trimmed != "" {
		b.WriteString("\nTrimmed: " + s.Trimmed + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func formatHeld(held []controller.HeldStatus, now time.Time, verbose bool) string {
	rows := []string{"Job|Group|Allocs|GPUs|State|Since|Reason"}
	for _, h := range held {
		rows = append(rows, fmt.Sprintf("%s|%s|%d|%d|%s|%s|%s", h.Job, h.Group, h.Count, h.GPUs, h.State,
			when(h.Since, now, verbose), h.Reason))
	}
	return columnize.SimpleFormat(rows)
}

func formatIdle(idle []controller.IdleStatus) string {
	rows := []string{"Job|Alloc ID|GPUs|Idle|Util"}
	for _, i := range idle {
		rows = append(rows, fmt.Sprintf("%s|%s|%d|%dm|%.0f%%", i.Job, shortID(i.Alloc), i.GPUs, i.Minutes, i.Util))
	}
	return columnize.SimpleFormat(rows)
}

// formatDecisions lists decisions newest first.
func formatDecisions(ds []controller.Decision, now time.Time, verbose bool) string {
	rows := []string{"Time|Action|Job|GPUs|Reason"}
	for i := len(ds) - 1; i >= 0; i-- {
		d := ds[i]
		reason := d.Reason
		if d.Error != "" {
			reason += " (failed: " + d.Error + ")"
		}
		rows = append(rows, fmt.Sprintf("%s|%s|%s|%s|%s", when(d.At, now, verbose), d.Kind, d.Job, gpuCount(d), reason))
	}
	return columnize.SimpleFormat(rows)
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

// viewJobs are the jobs a status names, for matching a prefix when the
// token may not list jobs.
func viewJobs(s *controller.Status) []jobRef {
	var out []jobRef
	add := func(key string) {
		if ns, id, ok := strings.Cut(key, "/"); ok {
			out = append(out, jobRef{ns, id})
		}
	}
	for _, q := range s.Queue {
		out = append(out, jobRef{q.Namespace, q.ID})
	}
	for _, h := range s.Held {
		add(h.Job)
	}
	for _, i := range s.Idle {
		add(i.Job)
	}
	for _, d := range s.Decisions {
		add(d.Job)
	}
	for _, w := range s.Warnings {
		add(w.Job)
	}
	return out
}

// JobStatus is what `steward status JOB` shows (and prints with -json).
type JobStatus struct {
	Job       string `json:"job"` // namespace/id
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	// Record is the steward_* items of the job's record, nomad/jobs/<job>
	// (other items the job keeps there are left out); RecordError says
	// why there is none to show.
	Record      map[string]string `json:"record,omitempty"`
	RecordError string            `json:"record_error,omitempty"`
	// Queue is its entry while it waits for GPUs.
	Queue     *controller.QueueEntry  `json:"queue,omitempty"`
	Held      []controller.HeldStatus `json:"held,omitempty"`
	Idle      []controller.IdleStatus `json:"idle,omitempty"`
	Decisions []controller.Decision   `json:"decisions,omitempty"`
	Warnings  []controller.JobWarning `json:"warnings,omitempty"`
	// Updated is when the leader published the status read.
	Updated time.Time `json:"updated"`
}

// jobStatus picks one job's entries out of a status.
func jobStatus(s *controller.Status, job jobRef) *JobStatus {
	key := job.String()
	js := &JobStatus{Job: key, Namespace: job.Namespace, ID: job.ID, Updated: s.Updated}
	for i := range s.Queue {
		if q := s.Queue[i]; q.Namespace == job.Namespace && q.ID == job.ID {
			js.Queue = &q
		}
	}
	for _, h := range s.Held {
		if h.Job == key {
			js.Held = append(js.Held, h)
		}
	}
	for _, i := range s.Idle {
		if i.Job == key {
			js.Idle = append(js.Idle, i)
		}
	}
	for _, d := range s.Decisions {
		if d.Job == key {
			js.Decisions = append(js.Decisions, d)
		}
	}
	for _, w := range s.Warnings {
		if w.Job == key {
			js.Warnings = append(js.Warnings, w)
		}
	}
	return js
}

// readRecord reads the steward_* items of a job's record.
func readRecord(client *api.Client, job jobRef) (map[string]string, string) {
	v, _, err := client.Variables().Read("nomad/jobs/"+job.ID, &api.QueryOptions{Namespace: job.Namespace})
	switch {
	case err != nil && strings.Contains(err.Error(), "variable not found"):
		return nil, "no record: Steward has decided nothing about the job yet"
	case err != nil:
		return nil, fmt.Sprintf("read its record nomad/jobs/%s: %v", job.ID, err)
	}
	out := map[string]string{}
	for k, val := range v.Items {
		if strings.HasPrefix(k, "steward_") {
			out[k] = val
		}
	}
	return out, ""
}

// FormatJobStatus renders one job's status.
func FormatJobStatus(js *JobStatus, now time.Time, verbose bool) string {
	var b strings.Builder
	kv := columnize.DefaultConfig()
	kv.Glue = " = "
	rows := []string{"ID|" + js.ID, "Namespace|" + js.Namespace}
	keys := make([]string, 0, len(js.Record))
	for k := range js.Record {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := js.Record[k]
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			v = when(t, now, verbose)
		}
		rows = append(rows, recordLabel(k)+"|"+v)
	}
	b.WriteString(columnize.Format(rows, kv) + "\n")
	if js.RecordError != "" {
		b.WriteString("(" + js.RecordError + ")\n")
	}

	b.WriteString("\nQueue\n")
	if q := js.Queue; q == nil {
		b.WriteString("Not waiting for GPUs\n")
	} else {
		blocked := q.Reason
		if q.Rule != "" {
			blocked = q.Rule + ": " + q.Reason
		}
		rows := []string{
			fmt.Sprintf("Position|%d in the cluster, %d in tenant %s", q.Position, q.TenantPosition, q.Tenant),
			fmt.Sprintf("Tier|%s (priority %d)", q.Tier, q.Priority),
			fmt.Sprintf("GPUs|%d", q.GPUs),
			"Waiting Since|" + when(q.WaitingSince, now, verbose),
			"Blocked By|" + orDash(blocked),
			"Forecast|" + forecast(q, now, verbose),
		}
		if q.ForecastNote != "" {
			rows = append(rows, "Forecast Basis|"+q.ForecastNote)
		}
		b.WriteString(columnize.Format(rows, kv) + "\n")
		if len(q.Unblock) > 0 {
			b.WriteString("\nWould Unblock It\n")
			for _, u := range q.Unblock {
				b.WriteString("  " + u + "\n")
			}
		}
	}
	if len(js.Held) > 0 {
		b.WriteString("\nHeld Groups\n" + formatHeld(js.Held, now, verbose) + "\n")
	}
	if len(js.Idle) > 0 {
		b.WriteString("\nIdle Allocations\n" + formatIdle(js.Idle) + "\n")
	}
	if len(js.Decisions) > 0 {
		b.WriteString("\nRecent Decisions\n" + formatDecisions(js.Decisions, now, verbose) + "\n")
	}
	for _, w := range js.Warnings {
		b.WriteString("\nWarning: " + w.Problem + "\n")
	}
	fmt.Fprintf(&b, "\nStatus published %s.", when(js.Updated, now, verbose))
	return b.String()
}

// recordLabel turns a record key into a label: steward_idle_since → Idle
// Since.
func recordLabel(key string) string {
	words := strings.Split(strings.TrimPrefix(key, "steward_"), "_")
	for i, w := range words {
		if w != "" {
			words[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, " ")
}

// forecast renders a queue entry's forecast start: "in ~25m (P50), in
// ~1h10m (P90)", "-" when there is none.
func forecast(q *controller.QueueEntry, now time.Time, verbose bool) string {
	if q.ForecastP50.IsZero() {
		return "-"
	}
	s := when(q.ForecastP50, now, verbose) + " (P50)"
	if !q.ForecastP90.IsZero() {
		s += ", " + when(q.ForecastP90, now, verbose) + " (P90)"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatDepartments writes the Departments table, when the policy has
// departments: their tenants together against the department's reserve
// and limit, and, with fair share over time, the department's decayed
// usage and shares among departments.
func formatDepartments(b *strings.Builder, ds []controller.DepartmentStatus) {
	if len(ds) == 0 {
		return
	}
	fair := false
	for _, d := range ds {
		fair = fair || d.FairShare > 0
	}
	rows := []string{"Department|Tenants|Reserve|Limit|In Use|Pending|Note"}
	if fair {
		rows[0] = "Department|Tenants|Reserve|Limit|In Use|Pending|Used (decayed GPU-h)|Used Share|Fair Share|Note"
	}
	for _, d := range ds {
		note := ""
		if d.Limit >= 0 && d.InUse > d.Limit {
			note = fmt.Sprintf("OVER LIMIT by %d", d.InUse-d.Limit)
		}
		tenants := strings.Join(d.Tenants, ", ")
		if fair {
			rows = append(rows, fmt.Sprintf("%s|%s|%d|%s|%d|%d|%.1f|%.0f%%|%.0f%%|%s", d.Department, tenants, d.Reserve, limitString(d.Limit),
				d.InUse, d.Pending, d.UsageGPUHours, 100*d.UsedShare, 100*d.FairShare, note))
			continue
		}
		rows = append(rows, fmt.Sprintf("%s|%s|%d|%s|%d|%d|%s", d.Department, tenants, d.Reserve, limitString(d.Limit), d.InUse, d.Pending, note))
	}
	b.WriteString("\nDepartments\n" + columnize.SimpleFormat(rows) + "\n")
}
