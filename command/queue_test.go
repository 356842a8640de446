package command

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/controller"
)

var queueNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func testQueue() []controller.QueueEntry {
	return []controller.QueueEntry{
		{Job: "ml/nb", Namespace: "ml", ID: "nb", Tenant: "ml", Tier: "interactive", Priority: 60, GPUs: 2, Position: 1, TenantPosition: 1,
			WaitingSince: queueNow.Add(-90 * time.Second), Rule: "capacity", Reason: "no GPUs free; next to start",
			ForecastP50: queueNow.Add(4 * time.Minute), ForecastP90: queueNow.Add(9 * time.Minute)},
		{Job: "research/train", Namespace: "research", ID: "train", Tenant: "research", Tier: "training", Priority: 40, GPUs: 4,
			Position: 2, TenantPosition: 1, WaitingSince: queueNow.Add(-12 * time.Minute), Rule: "limit",
			Reason: "tenant research is at its limit of 8 GPUs", Unblock: []string{"starts now if it asks for 2 GPUs instead of 4",
				"starts when research/sweep ends, or at 14:30 when its min_runtime passes"},
			ForecastP50: queueNow.Add(25 * time.Minute), ForecastP90: queueNow.Add(70 * time.Minute),
			ForecastNote: "run times from steward.expected_runtime of 3 of 5 running jobs; similar jobs for the rest"},
		{Job: "research/odd", Namespace: "research", ID: "odd", Tenant: "research", Tier: "training", Priority: 40, GPUs: 1,
			Position: 3, TenantPosition: 2, WaitingSince: queueNow.Add(-3 * time.Hour), Reason: "no node has a GPU of model H100"},
	}
}

// withLength sets the cluster's queue length on each entry.
func withLength(q []controller.QueueEntry, n int) []controller.QueueEntry {
	for i := range q {
		q[i].QueueLength = n
	}
	return q
}

func TestFormatQueue(t *testing.T) {
	cases := []struct {
		name    string
		queue   []controller.QueueEntry
		verbose bool
		want    []string
		notWant []string
	}{
		{name: "relative times", queue: testQueue(), want: []string{
			"Job             Tenant    Tier         Priority  Position (Tenant)  GPUs  Waiting Since  Forecast P50 / P90   Reason",
			"ml/nb           ml        interactive  60        1 (1)              2     1m ago         in ~4m / in ~9m      no GPUs free",
			"research/train  research  training     40        2 (1)              4     12m ago        in ~25m / in ~1h10m  tenant research is at its limit of 8 GPUs",
			"research/odd    research  training     40        3 (2)              1     3h ago         -                    no node has a GPU",
		}},
		{name: "verbose", queue: testQueue()[1:2], verbose: true, want: []string{
			queueNow.Add(-12 * time.Minute).Local().Format(time.RFC3339),
			queueNow.Add(25*time.Minute).Local().Format(time.RFC3339) + " / " + queueNow.Add(70*time.Minute).Local().Format(time.RFC3339),
		}},
		{name: "empty", want: []string{"No jobs waiting for GPUs"}},
		{name: "a namespace's view says what positions count", queue: withLength(testQueue()[1:2], 3),
			want: []string{"research/train", "2 (1)", "\n\n1 of the 3 jobs waiting in the cluster listed; positions count them all."}},
		{name: "the whole queue: no such line", queue: withLength(testQueue(), 3), notWant: []string{"listed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := FormatQueue(tc.queue, queueNow, tc.verbose)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("queue lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("queue has %q:\n%s", w, out)
				}
			}
		})
	}
}

// steward status JOB: the record's steward_* items and the queue entry
// in full (position, blocking rule, unblock lines, forecast).
func TestFormatJobStatus(t *testing.T) {
	s := &controller.Status{Updated: queueNow.Add(-3 * time.Second), Queue: testQueue(),
		Decisions: []controller.Decision{{At: queueNow.Add(-time.Minute), Kind: "hold", Job: "research/train", GPUs: 4, Reason: "over its limit"},
			{At: queueNow, Kind: "preempt", Job: "ml/other", GPUs: 2}}}
	js := jobStatus(s, jobRef{"research", "train"})
	js.Record = map[string]string{"steward_state": "held", "steward_tier": "training", "steward_updated": queueNow.Add(-time.Minute).Format(time.RFC3339)}
	out := FormatJobStatus(js, queueNow, false)
	for _, want := range []string{
		"ID        = train", "Namespace = research", "State     = held", "Updated   = 1m ago",
		"Position       = 2 in the cluster, 1 in tenant research",
		"Tier           = training (priority 40)",
		"Waiting Since  = 12m ago",
		"Blocked By     = limit: tenant research is at its limit of 8 GPUs",
		"Forecast       = in ~25m (P50), in ~1h10m (P90)",
		"Forecast Basis = run times from steward.expected_runtime",
		"Would Unblock It\n  starts now if it asks for 2 GPUs instead of 4\n  starts when research/sweep ends",
		"Recent Decisions", "hold    research/train  4     over its limit",
		"Status published 3s ago.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("job status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ml/other") {
		t.Errorf("job status shows another job's decision:\n%s", out)
	}

	idle := jobStatus(&controller.Status{}, jobRef{"ml", "done"})
	idle.RecordError = "no record: Steward has decided nothing about the job yet"
	if out := FormatJobStatus(idle, queueNow, false); !strings.Contains(out, "Not waiting for GPUs") || !strings.Contains(out, "no record") {
		t.Errorf("a job not waiting:\n%s", out)
	}
}

// TestQueueJSON: steward queue -json gives each entry's forecast as RFC
// 3339 times, and leaves the fields out of an entry with no forecast
// (never "0001-01-01T00:00:00Z").
func TestQueueJSON(t *testing.T) {
	out := outputFlags{json: true}
	for _, tc := range []struct {
		name    string
		entry   controller.QueueEntry
		want    []string
		notWant []string
	}{
		{name: "a forecast", entry: testQueue()[0],
			want: []string{`"forecast_p50": "2026-11-22T12:04:00Z"`, `"forecast_p90": "2026-11-22T12:09:00Z"`}},
		{name: "no forecast", entry: testQueue()[2],
			want:    []string{`"job": "research/odd"`, `"waiting_since": "2026-11-22T09:00:00Z"`},
			notWant: []string{"forecast_p50", "forecast_p90", "0001-01-01"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := out.format([]controller.QueueEntry{tc.entry})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("JSON lacks %s:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("JSON has %s:\n%s", w, got)
				}
			}
		})
	}
}
