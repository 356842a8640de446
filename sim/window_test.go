package sim

import (
	"strings"
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	const trace = `
job,submit,gpus,run_time
a,0,1,60
b,3599,1,60
c,3600,1,60
d,7200,1,60
e,10800,1,60`
	h := time.Hour
	tests := []struct {
		name    string
		w       Window
		limit   int
		want    map[string]time.Duration // kept jobs' re-based submissions
		outside int
		cut     int // by -limit
	}{
		{"whole trace", Window{}, 0, map[string]time.Duration{"a": 0, "b": 3599 * time.Second, "c": h, "d": 2 * h, "e": 3 * h}, 0, 0},
		{"from", Window{From: h}, 0, map[string]time.Duration{"c": 0, "d": h, "e": 2 * h}, 2, 0},
		{"to is open", Window{To: h}, 0, map[string]time.Duration{"a": 0, "b": 3599 * time.Second}, 3, 0},
		{"from and to", Window{From: h, To: 3 * h}, 0, map[string]time.Duration{"c": 0, "d": h}, 3, 0},
		{"limit counts from the window", Window{From: h}, 1, map[string]time.Duration{"c": 0}, 2, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := mustTrace(t, trace)
			d, in, err := prepare(tr, Options{Config: Config{Policy: mustPolicy(t, tinyPolicy), Nodes: 1, GPUsPerNode: 8},
				Window: tc.w, Limit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]time.Duration{}
			for _, j := range tr.Jobs {
				got[j.ID] = j.Submit
			}
			if len(got) != len(tc.want) {
				t.Fatalf("kept %v, want %v", got, tc.want)
			}
			for id, at := range tc.want {
				if s, ok := got[id]; !ok || s != at {
					t.Errorf("job %s: submitted at %s (kept %v), want %s", id, s, ok, at)
				}
			}
			switch {
			case !tc.w.IsSet() && in.Window != nil:
				t.Errorf("no window given, yet the report has %+v", in.Window)
			case tc.w.IsSet() && (in.Window == nil || in.Window.JobsOutside != tc.outside):
				t.Errorf("window %+v, want %d jobs outside", in.Window, tc.outside)
			}
			if d.Truncated != tc.cut {
				t.Errorf("%d jobs cut by -limit, want %d", d.Truncated, tc.cut)
			}
		})
	}
}

func TestWindowCheck(t *testing.T) {
	tests := []struct {
		w   Window
		err string
	}{
		{Window{}, ""},
		{Window{From: time.Hour}, ""},
		{Window{From: time.Hour, To: 2 * time.Hour}, ""},
		{Window{From: 2 * time.Hour, To: time.Hour}, "window [2h, 1h): the end must come after the start"},
		{Window{From: time.Hour, To: time.Hour}, "the end must come after the start"},
		{Window{From: -time.Minute}, "times must not be negative"},
	}
	for _, tc := range tests {
		err := tc.w.Check()
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: %v, want %q", tc.w, err, tc.err)
		}
	}
}

// The window shows in the table's header and in results.json.
func TestWindowReported(t *testing.T) {
	tr := mustTrace(t, `
job,submit,gpus,run_time
a,0,1,60
b,90000,1,60
c,180000,1,60
d,270000,1,60`)
	rep, err := Compare(tr, Options{Config: Config{Policy: mustPolicy(t, tinyPolicy), Nodes: 1, GPUsPerNode: 8},
		Window: Window{From: 24 * time.Hour, To: 72 * time.Hour}, Policies: []PolicyKind{FIFO}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Jobs != 2 || rep.Results[0].Completed != 2 {
		t.Fatalf("%d jobs, %d completed; want 2, 2", rep.Jobs, rep.Results[0].Completed)
	}
	var table, js strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if want := "jobs submitted 24h to 72h of the trace (re-based to start at 0; 2 outside left out)"; !strings.Contains(table.String(), want) {
		t.Errorf("header lacks %q:\n%s", want, table.String())
	}
	if err := WriteJSON(&js, []*Report{rep}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"from": "24h"`, `"to": "72h"`, `"from_seconds": 86400`, `"jobs_outside": 2`} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("results.json lacks %s", want)
		}
	}
}
