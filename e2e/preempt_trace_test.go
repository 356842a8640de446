package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// preemptTrace is where one preemption's time went, each step an offset
// from the moment the benchmark registered the beneficiary (manual-stop:
// stopped the victim). Every time is this machine's clock: Nomad's
// server and client, the controller and the benchmark share it. A step
// Nomad did not take (no blocked evaluation under Nomad's own
// preemption) or the controller did not log is -1.
type preemptTrace struct {
	blocked  time.Duration // Nomad blocked the beneficiary's evaluation
	decided  time.Duration // the controller's preempt line (its first call on the victim follows)
	exited   time.Duration // the victim's task finished, by the client
	reported time.Duration // the server last heard of the victim (its client's update)
	placed   time.Duration // the beneficiary's allocation was created
	started  time.Duration // its task started, by the client
}

var logTimeRE = regexp.MustCompile(`(?m)^(\S+Z) \[INFO\]  steward: preempt: job=(\S+) `)

// tracePreemption reads the steps of the preemption that started at
// start from Nomad (evaluations, allocations) and the controller's log
// (ctlLog; empty without a controller).
func tracePreemption(b *testing.B, c *cluster, start time.Time, ns, victim, beneficiary, ctlLog string) preemptTrace {
	b.Helper()
	tr := preemptTrace{blocked: -1, decided: -1, exited: -1, reported: -1, placed: -1, started: -1}
	since := func(t time.Time) time.Duration {
		if t.IsZero() || t.Before(start.Add(-time.Second)) {
			return -1
		}
		return t.Sub(start)
	}
	evals, _, err := c.Client.Jobs().Evaluations(beneficiary, &api.QueryOptions{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	for _, ev := range evals {
		if ev.TriggeredBy == "queued-allocs" {
			if d := since(time.Unix(0, ev.CreateTime)); d >= 0 && (tr.blocked < 0 || d < tr.blocked) {
				tr.blocked = d
			}
		}
	}
	for _, m := range logTimeRE.FindAllStringSubmatch(ctlLog, -1) {
		if m[2] != ns+"/"+victim {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if d := since(at); err == nil && d >= 0 {
			tr.decided = d
			break
		}
	}
	allocs, _, err := c.Client.Jobs().Allocations(victim, true, &api.QueryOptions{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range allocs {
		for _, ts := range a.TaskStates {
			if d := since(ts.FinishedAt); d >= 0 && (tr.exited < 0 || d < tr.exited) {
				tr.exited = d
				tr.reported = since(time.Unix(0, a.ModifyTime))
			}
		}
	}
	allocs, _, err = c.Client.Jobs().Allocations(beneficiary, false, &api.QueryOptions{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range allocs {
		if d := since(time.Unix(0, a.CreateTime)); d >= 0 && (tr.placed < 0 || d < tr.placed) {
			tr.placed = d
		}
		for _, ts := range a.TaskStates {
			if d := since(ts.StartedAt); d >= 0 && (tr.started < 0 || d < tr.started) {
				tr.started = d
			}
		}
	}
	return tr
}

func (tr preemptTrace) String() string {
	ms := func(d time.Duration) string {
		if d < 0 {
			return "-"
		}
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("blocked %s, decided %s, victim exited %s, reported %s, placed %s, started %s",
		ms(tr.blocked), ms(tr.decided), ms(tr.exited), ms(tr.reported), ms(tr.placed), ms(tr.started))
}

// logTraces logs every preemption's steps, slowest (by start) first, and
// the median of each step.
func logTraces(b *testing.B, traces []preemptTrace) {
	b.Helper()
	if len(traces) == 0 {
		return
	}
	byStart := slices.Clone(traces)
	slices.SortFunc(byStart, func(x, y preemptTrace) int { return int(y.started - x.started) })
	var lines []string
	for _, tr := range byStart {
		lines = append(lines, "  "+tr.String())
	}
	med := func(get func(preemptTrace) time.Duration) time.Duration {
		var ds []time.Duration
		for _, tr := range traces {
			if d := get(tr); d >= 0 {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			return -1
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	m := preemptTrace{blocked: med(func(t preemptTrace) time.Duration { return t.blocked }),
		decided:  med(func(t preemptTrace) time.Duration { return t.decided }),
		exited:   med(func(t preemptTrace) time.Duration { return t.exited }),
		reported: med(func(t preemptTrace) time.Duration { return t.reported }),
		placed:   med(func(t preemptTrace) time.Duration { return t.placed }),
		started:  med(func(t preemptTrace) time.Duration { return t.started })}
	b.Logf("steps, median: %s\nsteps of each preemption, slowest first:\n%s", m, strings.Join(lines, "\n"))
}
