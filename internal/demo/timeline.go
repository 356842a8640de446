package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The timeline is printed from what the demo sees in Nomad, polled once a
// second: Steward's record of each job (the variable nomad/jobs/<job>,
// shown on the job's Variables tab), the job's running allocations, and the
// steward-exec driver's task events (on the allocation's page).

// jobRef is a job the scenario submitted.
type jobRef struct {
	NS, ID      string
	GPUsPerTask int
}

func (j jobRef) String() string { return j.NS + "/" + j.ID }

// Event is one line of the timeline.
type Event struct {
	Time  time.Time
	Job   string // namespace/job
	Label string // submitted, running, checkpointing, preempted, held, idle reclaim, resumed, ...
	Text  string
	URL   string
}

type watcher struct {
	d *demo

	mu      sync.Mutex
	jobs    []jobRef
	events  []Event
	record  map[string]string // job -> state|reason last printed
	running map[string]int    // job -> running allocations last printed
	seen    map[string]bool   // alloc ID + event time: driver events printed
	allocs  map[string]string // job -> latest running steward-exec alloc ID
	// followed: job -> the task whose output lines the timeline shows
	// (docker.go); outputLines: alloc ID -> lines of it read;
	// outputDone: alloc ID -> its output read after it ended.
	followed    map[string]string
	outputLines map[string]int
	outputDone  map[string]bool
}

func newWatcher(d *demo) *watcher {
	return &watcher{d: d, record: map[string]string{}, running: map[string]int{}, seen: map[string]bool{}, allocs: map[string]string{},
		followed: map[string]string{}, outputLines: map[string]int{}, outputDone: map[string]bool{}}
}

func (w *watcher) add(j jobRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.jobs {
		if x == j {
			return
		}
	}
	w.jobs = append(w.jobs, j)
}

// emit prints one timeline line and remembers it.
func (w *watcher) emit(job, label, text, url string) {
	e := Event{Time: time.Now(), Job: job, Label: label, Text: text, URL: url}
	w.mu.Lock()
	w.events = append(w.events, e)
	w.mu.Unlock()
	line := fmt.Sprintf("%s  %-20s %-14s %s", e.Time.Format("15:04:05"), job, label, text)
	if url != "" {
		line += "  → " + url
	}
	w.d.printf("%s\n", line)
}

// Events returns the timeline so far.
func (w *watcher) Events() []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Event(nil), w.events...)
}

func (w *watcher) count(label string) int {
	n := 0
	for _, e := range w.Events() {
		if e.Label == label {
			n++
		}
	}
	return n
}

func (w *watcher) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		w.poll()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *watcher) poll() {
	w.mu.Lock()
	jobs := append([]jobRef(nil), w.jobs...)
	w.mu.Unlock()
	for _, j := range jobs {
		w.pollRecord(j)
		w.pollAllocs(j)
	}
}

// varURL is the UI page of the job's record (its Variables tab links it).
func (d *demo) varURL(ns, job string) string {
	return fmt.Sprintf("%s/ui/variables/var/nomad/jobs/%s@%s", d.addr, job, ns)
}

func (d *demo) jobURL(ns, job string) string {
	return fmt.Sprintf("%s/ui/jobs/%s@%s", d.addr, job, ns)
}

func (d *demo) allocURL(id string) string { return fmt.Sprintf("%s/ui/allocations/%s", d.addr, id) }

func (w *watcher) pollRecord(j jobRef) {
	v, _, err := w.d.client.Variables().Read("nomad/jobs/"+j.ID, &api.QueryOptions{Namespace: j.NS})
	if err != nil || v == nil {
		return
	}
	state, reason, rule := v.Items["steward_state"], v.Items["steward_reason"], v.Items["steward_rule"]
	if state == "" {
		return
	}
	key := state + "|" + reason
	w.mu.Lock()
	prev := w.record[j.String()]
	w.record[j.String()] = key
	w.mu.Unlock()
	if key == prev {
		return
	}
	label := state
	switch {
	case state == "running" && rule == "admit":
		label = "resumed"
	case state == "running" && rule == "tier":
		label = "priority"
	case state == "held" && rule == "idle":
		label = "idle reclaim"
	case state == "checkpointing" && rule == "idle":
		label = "idle reclaim"
	case state == "idle-stopped":
		label = "idle reclaim"
	}
	text := reason
	if state == "checkpointing" {
		text = "checkpoint signal sent, grace " + w.d.grace + ": " + reason
	}
	if n := v.Items["steward_preemptions"]; (state == "preempted" || label == "resumed") && n != "" && n != "0" {
		text += " (preemptions this hour: " + n + ")"
	}
	w.emit(j.String(), label, text, w.d.varURL(j.NS, j.ID))
}

func (w *watcher) pollAllocs(j jobRef) {
	stubs, _, err := w.d.client.Jobs().Allocations(j.ID, false, &api.QueryOptions{Namespace: j.NS})
	if err != nil {
		return
	}
	sort.Slice(stubs, func(a, b int) bool { return stubs[a].CreateIndex < stubs[b].CreateIndex })
	w.pollOutput(j, stubs)
	running := 0
	var latest string
	for _, s := range stubs {
		if s.ClientStatus == api.AllocClientStatusRunning && s.DesiredStatus == api.AllocDesiredStatusRun {
			running++
			latest = s.ID
		}
		for _, ts := range s.TaskStates {
			for _, e := range ts.Events {
				if e.Type != "Driver" || e.DisplayMessage == "" {
					continue
				}
				k := fmt.Sprintf("%s/%d", s.ID, e.Time)
				w.mu.Lock()
				dup := w.seen[k]
				w.seen[k] = true
				w.mu.Unlock()
				if !dup {
					w.emit(j.String(), "task event", "alloc "+s.ID[:8]+": "+e.DisplayMessage, w.d.allocURL(s.ID))
				}
			}
		}
	}
	w.mu.Lock()
	prev, known := w.running[j.String()]
	w.running[j.String()] = running
	if latest != "" {
		w.allocs[j.String()] = latest
	}
	w.mu.Unlock()
	if known && prev == running || !known && running == 0 {
		return
	}
	if running == 0 {
		w.emit(j.String(), "stopped", "no allocation running", w.d.jobURL(j.NS, j.ID))
		return
	}
	text := fmt.Sprintf("%s running", plural(running, "allocation"))
	if j.GPUsPerTask > 0 {
		text += fmt.Sprintf(", %s", plural(running*j.GPUsPerTask, "GPU"))
	}
	url := w.d.jobURL(j.NS, j.ID)
	if running == 1 && latest != "" {
		url = w.d.allocURL(latest)
	}
	w.emit(j.String(), "running", text, url)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// summary prints Steward's status and where to look in the UI.
func (d *demo) summary(w *watcher) {
	d.printf("\n==> bin/steward status\n")
	out, err := runCmd(d.cfg.StewardBin, "status", "-address", d.addr)
	if err != nil {
		d.printf("(steward status: %v)\n", err)
	}
	d.printf("%s\n", strings.TrimRight(out, "\n"))
	d.printf("\n==> bin/steward queue\n")
	out, err = runCmd(d.cfg.StewardBin, "queue", "-address", d.addr)
	if err != nil {
		d.printf("(steward queue: %v)\n", err)
	}
	d.printf("%s\n", strings.TrimRight(out, "\n"))
	// The first waiting job in full: its place, what blocks it, what
	// would unblock it and its forecast.
	first, _ := runCmd(d.cfg.StewardBin, "queue", "-address", d.addr, "-t", `{{range .}}{{.Namespace}} {{.ID}}{{"\n"}}{{end}}`)
	if ns, id, ok := strings.Cut(strings.SplitN(strings.TrimSpace(first), "\n", 2)[0], " "); ok {
		d.printf("\n==> bin/steward status -namespace %s %s\n", ns, id)
		out, err = runCmd(d.cfg.StewardBin, "status", "-address", d.addr, "-namespace", ns, id)
		if err != nil {
			d.printf("(steward status: %v)\n", err)
		}
		d.printf("%s\n", strings.TrimRight(out, "\n"))
	}
	counts := []string{}
	labels := []string{"submitted", "checkpointing", "preempted", "held", "idle reclaim", "resumed", "task event"}
	if d.cfg.Scenario == ScenarioDocker {
		labels = append(labels, "task output")
	}
	for _, l := range labels {
		counts = append(counts, fmt.Sprintf("%s %d", l, w.count(l)))
	}
	d.printf("\n==> timeline: %s\n", strings.Join(counts, ", "))
	d.printf("==> in the Nomad UI (%s/ui/jobs?namespace=*): each job's Variables tab holds Steward's record\n", d.addr)
	d.printf("    (click the eye to reveal a value); its Versions/scaling events say why it was held or resumed;\n")
	d.printf("    the trainer's allocation pages show the driver's checkpoint and resume events.\n")
}
