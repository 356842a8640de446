package command

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/controller"
)

func TestWhen(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	at := now.Add(25 * time.Minute)
	cases := []struct {
		name    string
		t       time.Time
		verbose bool
		want    string
	}{
		{name: "zero", t: time.Time{}, want: "-"},
		{name: "zero, verbose", t: time.Time{}, verbose: true, want: "-"},
		{name: "now", t: now.Add(300 * time.Millisecond), want: "now"},
		{name: "seconds ago", t: now.Add(-2 * time.Second), want: "2s ago"},
		{name: "minutes ago", t: now.Add(-12*time.Minute - 40*time.Second), want: "12m ago"},
		{name: "hours ago", t: now.Add(-3*time.Hour - 5*time.Minute - 10*time.Second), want: "3h5m ago"},
		{name: "whole hours ago", t: now.Add(-2 * time.Hour), want: "2h ago"},
		{name: "days ago", t: now.Add(-50 * time.Hour), want: "2d2h ago"},
		{name: "forecast", t: at, want: "in ~25m"},
		{name: "forecast in hours", t: now.Add(70 * time.Minute), want: "in ~1h10m"},
		{name: "verbose", t: at, verbose: true, want: at.Local().Format(time.RFC3339)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := when(tc.t, now, tc.verbose); got != tc.want {
				t.Errorf("when = %q, want %q", got, tc.want)
			}
		})
	}
}

// -json prints what decodes back into the same value; -t runs a
// template; both at once, or a bad template, is an error.
func TestOutputFormats(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	queue := []controller.QueueEntry{{Job: "research/train", Namespace: "research", ID: "train", Tenant: "research",
		Tier: "training", Priority: 40, GPUs: 4, Position: 3, TenantPosition: 1, WaitingSince: now.Add(-12 * time.Minute),
		Rule: "limit", Reason: "tenant research is at its limit of 8 GPUs", Unblock: []string{"starts now if it asks for 2 GPUs instead of 4"},
		ForecastP50: now.Add(25 * time.Minute), ForecastP90: now.Add(70 * time.Minute), ForecastNote: "expected_runtime of 3 of 5"}}
	status := &controller.Status{Updated: now, Leader: "ctl", Queue: queue,
		Held: []controller.HeldStatus{{Job: "research/old", Group: "work", Count: 1, GPUs: 2, State: "held", Since: now}}}
	cases := []struct {
		name    string
		out     outputFlags
		data    any
		decoded any
		want    string
		wantErr string
	}{
		{name: "queue as JSON", out: outputFlags{json: true}, data: queue, decoded: &[]controller.QueueEntry{}},
		{name: "status as JSON", out: outputFlags{json: true}, data: status, decoded: &controller.Status{}},
		{name: "job status as JSON", out: outputFlags{json: true}, data: jobStatus(status, jobRef{"research", "train"}), decoded: &JobStatus{}},
		{name: "template", out: outputFlags{template: "{{range .}}{{.Job}} {{.Position}}{{end}}"}, data: queue, want: "research/train 3"},
		{name: "both", out: outputFlags{json: true, template: "x"}, data: queue, wantErr: "both -json and -t"},
		{name: "bad template", out: outputFlags{template: "{{.Nope"}, data: queue, wantErr: "parse -t template"},
		{name: "template on a missing field", out: outputFlags{template: "{{.Nope}}"}, data: status, wantErr: "execute -t template"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.out.format(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.decoded != nil {
				if err := json.Unmarshal([]byte(got), tc.decoded); err != nil {
					t.Fatalf("decode: %v\n%s", err, got)
				}
				want := reflect.ValueOf(tc.data)
				if want.Kind() == reflect.Pointer {
					want = want.Elem()
				}
				if got := reflect.ValueOf(tc.decoded).Elem().Interface(); !reflect.DeepEqual(got, want.Interface()) {
					t.Errorf("round trip:\n got %+v\nwant %+v", got, want.Interface())
				}
				return
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
